#include "tools/launch/launcher.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

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

LaunchOptions Filled() {
  LaunchOptions o;
  o.out = "run";
  o.bin = "bin";
  o.config = "job.yaml";
  o.token_file = "job.token";
  return o;
}

TEST(CompleteLaunchOptionsTest, NamesTheMissingFlag) {
  for (const auto& [flag, clear] :
       std::vector<std::pair<std::string, std::string LaunchOptions::*>>{
           {"run_dir", &LaunchOptions::out},
           {"bin", &LaunchOptions::bin},
           {"config", &LaunchOptions::config},
           {"token", &LaunchOptions::token_file}}) {
    LaunchOptions o = Filled();
    (o.*clear).clear();
    const absl::Status st = CompleteLaunchOptions("", "", &o);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_EQ(st.message(), "ps_launch: --" + flag + " is required");
  }
  LaunchOptions o = Filled();
  o.compute_threads = 0;
  EXPECT_EQ(CompleteLaunchOptions("", "", &o).message(),
            "ps_launch: --compute_threads must be >= 1");
}

TEST(CompleteLaunchOptionsTest, ReadsTheFilesOrNamesTheFlag) {
  LaunchOptions o = Filled();
  ASSERT_TRUE(CompleteLaunchOptions("", "", &o).ok());
  EXPECT_TRUE(o.worker_argv.empty());
  EXPECT_TRUE(o.net.empty());
  const std::string argv =
      WriteTemp("argv", std::string("python3\0train.py\0{RANK}\0", 24));
  ASSERT_TRUE(CompleteLaunchOptions(argv, "", &o).ok());
  EXPECT_THAT(o.worker_argv, ElementsAre("python3", "train.py", "{RANK}"));
  const absl::Status missing = CompleteLaunchOptions(argv + ".none", "", &o);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("--worker_argv_file: "));
  const absl::Status bad_table =
      CompleteLaunchOptions("", WriteTemp("net", "only-a-name\n"), &o);
  EXPECT_EQ(bad_table.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_table.message(), HasSubstr("--net_table: "));
}

}  // namespace
}  // namespace pstrain::launch
