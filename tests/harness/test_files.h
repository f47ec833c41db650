// Small file helpers shared by the checkpoint and resume tests.
#ifndef PSTRAIN_TESTS_HARNESS_TEST_FILES_H_
#define PSTRAIN_TESTS_HARNESS_TEST_FILES_H_

#include <string>
#include <vector>

namespace pstrain::test_files {

// An empty folder `name` under the test's temporary directory (removed
// first if a previous run left it).
std::string TempDir(const std::string& name);

// The whole content of `path` ("" when it cannot be read).
std::string ReadBytes(const std::string& path);

// True when `a` and `b` hold the same floats bit for bit (NaN payloads and
// the sign of zero included).
bool BitEqual(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace pstrain::test_files

#endif  // PSTRAIN_TESTS_HARNESS_TEST_FILES_H_
