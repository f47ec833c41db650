#include "coordinator/supervision_notes.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/run_record.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

std::string Read(const std::string& path) {
  return ReadFileText(path).value_or("");
}
TEST(SupervisionNotesTest, AppendsOneLineEachInOrder) {
  const std::string path = TempPath("notes");
  std::ofstream(path) << "lost 1 worker 0\n";  // an earlier coordinator's
  SupervisionNotes notes(path);
  notes.Registered(2);
  notes.Lost(3, /*server=*/true, 1);
  notes.Lost(4, /*server=*/false, 2);
  notes.Failed();
  EXPECT_EQ(Read(path),
            "lost 1 worker 0\n"
            "registered worker 2\n"
            "lost 3 server 1\n"
            "lost 4 worker 2\n"
            "failed\n");
}

TEST(SupervisionNotesTest, NoPathWritesNothingAndAnUnwritableOneIsNotFatal) {
  SupervisionNotes none("");
  none.Failed();
  const std::string dir = TempPath("no_such_dir");
  SupervisionNotes unwritable(dir + "/notes");
  unwritable.Registered(0);
  EXPECT_FALSE(std::ifstream(dir + "/notes").good());
}

}  // namespace
}  // namespace pstrain
