#include "tools/launch/launcher.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ReadNetTableTest, ReadsNameAddressAndPrefix) {
  const std::string path = WriteTemp(
      "net",
      "coordinator\t10.213.0.1\t/r/netshape.sh\texec\tr1\tcoordinator\n"
      "worker-0\t10.213.0.3\t/r/netshape.sh\texec\tr1\tworker-0\n");
  auto table = ReadNetTable(path);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->size(), 2u);
  EXPECT_EQ(table->at("worker-0").address, "10.213.0.3");
  EXPECT_THAT(table->at("worker-0").prefix,
              ElementsAre("/r/netshape.sh", "exec", "r1", "worker-0"));
}

TEST(ReadNetTableTest, NamesTheFileAndLineOfABadRow) {
  const std::string path =
      WriteTemp("bad_net", "coordinator\t10.213.0.1\nworker-0 10.213.0.3\n");
  auto table = ReadNetTable(path);
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(table.status().message(), HasSubstr(path + ":2"));
  EXPECT_EQ(ReadNetTable(path + ".none").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ReadArgvFileTest, SplitsOnNul) {
  const char kArgv[] = "env\0PSTRAIN_RANK={RANK}\0bash\0-c\0exec a b\0";
  const std::string path =
      WriteTemp("argv", std::string(kArgv, sizeof(kArgv) - 1));
  auto argv = ReadArgvFile(path);
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv, ElementsAre("env", "PSTRAIN_RANK={RANK}", "bash", "-c",
                                 "exec a b"));
  EXPECT_EQ(ReadArgvFile(WriteTemp("empty", "")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain::launch
