// RunJobProcesses starts its processes as psctl run does: here, that the
// workers get psctl run's environment (their heaps on huge pages,
// common/huge_pages.h) and the servers and the coordinator ours. The job's
// binaries are shell scripts that write their environment to their logs.
#include "tools/bench/job_processes.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void WriteScript(const std::string& path, const std::string& body) {
  mkdir(path.substr(0, path.rfind('/')).c_str(), 0755);
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ASSERT_EQ(chmod(path.c_str(), 0755), 0) << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(RunJobProcesses, WorkersGetPsctlRunsEnvironment) {
  const std::string root = std::string(getenv("TEST_TMPDIR")) + "/job";
  const std::string bin = root + "/bin";
  mkdir(root.c_str(), 0755);
  mkdir(bin.c_str(), 0755);
  // The coordinator writes its port file (--port_file=PATH) and ends; the
  // others print their environment to stderr (their logs) and end.
  WriteScript(bin + "/coordinator/ps_coordinator",
              "for a in \"$@\"; do case $a in --port_file=*) "
              "echo 1 > \"${a#--port_file=}\";; esac; done\nenv >&2\n");
  WriteScript(bin + "/server/ps_server", "env >&2\n");
  WriteScript(bin + "/worker/ps_worker", "env >&2\n");
  ASSERT_EQ(setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=4", 1), 0);

  JobRunOptions o;
  o.bin_dir = bin;
  o.config = "unused.yaml";
  o.work_dir = root;
  o.workers = 2;
  o.steps = 1;
  o.pin_cores = false;
  absl::StatusOr<JobRunResult> run = RunJobProcesses(o);
  unsetenv("GLIBC_TUNABLES");
  ASSERT_TRUE(run.ok()) << run.status();

  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(ReadFile(absl::StrCat(root, "/worker-", r, ".log")),
                HasSubstr("GLIBC_TUNABLES=glibc.malloc.arena_max=4:"
                          "glibc.malloc.hugetlb=1\n"))
        << "worker " << r;
  }
  for (const char* log : {"/server-0.log", "/coordinator.log"}) {
    const std::string text = ReadFile(root + log);
    EXPECT_THAT(text, HasSubstr("GLIBC_TUNABLES=glibc.malloc.arena_max=4\n"))
        << log;
    EXPECT_THAT(text, Not(HasSubstr("hugetlb"))) << log;
  }
}

}  // namespace
}  // namespace pstrain::bench
