// Child processes: stdout lines, exit codes, the peak memory sample, and a
// child that overruns its deadline being killed with DEADLINE_EXCEEDED.
#include "tools/bench/subprocess.h"

#include <stdlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cpu_placement.h"
#include "gtest/gtest.h"

namespace pstrain::bench {
namespace {

TEST(Child, ReadsLinesAndExitCode) {
  absl::StatusOr<Child> child = Child::Start(
      {"/bin/sh", "-c", "echo first; echo second; read x; exit 3"}, true);
  ASSERT_TRUE(child.ok()) << child.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  EXPECT_EQ(*child->ReadLine(deadline), "first");
  EXPECT_EQ(*child->ReadLine(deadline), "second");
  // Sampled while the shell waits in `read`: once stdin closes it may exit
  // (a zombie has no VmHWM) before Wait's first sample.
  child->SampleMemory();
  child->CloseStdin();  // ends `read`
  absl::StatusOr<Finished> f = child->Wait(deadline);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->exit_code, 3);
  EXPECT_GT(f->max_rss_bytes, 0);
}

// A "port N" line gives N; any other line, a port out of range or the end
// of stdout is UNAVAILABLE saying what came.
TEST(Child, ReadsAPortLine) {
  absl::StatusOr<Child> child =
      Child::Start({"/bin/sh", "-c",
                    "echo port 4321; echo port 0; echo port 70000; echo ready"},
                   true);
  ASSERT_TRUE(child.ok()) << child.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::StatusOr<int> port = child->ReadPort(deadline);
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 4321);
  for (const char* line : {"port 0", "port 70000", "ready"}) {
    port = child->ReadPort(deadline);
    EXPECT_EQ(port.status().code(), absl::StatusCode::kUnavailable) << line;
    EXPECT_EQ(port.status().message(), absl::StrCat("printed no port: ", line));
  }
  port = child->ReadPort(deadline);  // end of stdout
  EXPECT_EQ(port.status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(child->Wait(deadline).ok());
}

TEST(Child, GetsTheEnvironmentItIsGiven) {
  const std::vector<std::string> env = {"PSTRAIN_SUBPROCESS_TEST=given"};
  const std::vector<std::string> argv = {
      "/bin/sh", "-c", "echo \"$PSTRAIN_SUBPROCESS_TEST\" \"${HOME-unset}\""};
  absl::StatusOr<Child> child = Child::Start(argv, true, "", "", {}, &env);
  ASSERT_TRUE(child.ok()) << child.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  EXPECT_EQ(*child->ReadLine(deadline), "given unset");  // nothing of ours
  ASSERT_TRUE(child->Wait(deadline).ok());
  // Without one, ours.
  ASSERT_EQ(setenv("PSTRAIN_SUBPROCESS_TEST", "ours", 1), 0);
  absl::StatusOr<Child> inherits = Child::Start(
      {"/bin/sh", "-c", "echo \"$PSTRAIN_SUBPROCESS_TEST\""}, true);
  ASSERT_TRUE(inherits.ok()) << inherits.status();
  EXPECT_EQ(*inherits->ReadLine(deadline), "ours");
  ASSERT_TRUE(inherits->Wait(deadline).ok());
  unsetenv("PSTRAIN_SUBPROCESS_TEST");
}

TEST(Child, MemoryIsTheChildsNotTheParents) {
  // A parent holding 256 MiB must not make a small child look large (as
  // ru_maxrss would after fork + exec, or a sample taken before the exec).
  std::vector<char> big(256 << 20, 1);
  absl::StatusOr<Child> child = Child::Start({"/bin/sh", "-c", "read x"}, true);
  ASSERT_TRUE(child.ok()) << child.status();
  child->SampleMemory();  // at once: Start returns after the exec
  child->CloseStdin();
  absl::StatusOr<Finished> f = child->Wait(absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_GT(f->max_rss_bytes, 0);
  EXPECT_LT(f->max_rss_bytes, 64 << 20) << "parent touched " << int(big[7]);
}

// Started on given CPUs, the child runs on those only (read from its own
// /proc/self/status); without them it keeps this process's.
TEST(Child, RunsOnTheCpusItIsGiven) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  auto child_cpus = [](const std::vector<int>& cpus) -> std::string {
    absl::StatusOr<Child> child = Child::Start(
        {"/bin/sh", "-c", "grep '^Cpus_allowed_list:' /proc/self/status"}, true,
        "", "", cpus);
    if (!child.ok()) return child.status().ToString();
    absl::StatusOr<std::string> line =
        child->ReadLine(absl::Now() + absl::Seconds(30));
    child->CloseStdin();
    (void)child->Wait(absl::Now() + absl::Seconds(30));
    return line.ok() ? *line : line.status().ToString();
  };
  const int last = allowed.back();
  EXPECT_EQ(child_cpus({last}), absl::StrCat("Cpus_allowed_list:\t", last));
  if (allowed.size() >= 2) {
    EXPECT_NE(child_cpus({}), absl::StrCat("Cpus_allowed_list:\t", last));
  } else {
    std::printf("one allowed CPU: the unpinned case is not told apart\n");
  }
}

TEST(RunCapture, CapturesStdout) {
  absl::StatusOr<Finished> f =
      RunCapture({"/bin/echo", "hello"}, absl::Seconds(30));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->output, "hello\n");
  EXPECT_EQ(f->exit_code, 0);
}

TEST(RunCapture, KillsAChildPastItsDeadline) {
  absl::StatusOr<Finished> f =
      RunCapture({"/bin/sleep", "60"}, absl::Milliseconds(300));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDeadlineExceeded)
      << f.status();
}

TEST(RunCapture, MissingProgramExits127) {
  absl::StatusOr<Finished> f =
      RunCapture({"/nonexistent/program"}, absl::Seconds(30));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->exit_code, 127);
}

TEST(FreeLoopbackPort, ReturnsAPort) {
  absl::StatusOr<int> port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_LT(*port, 65536);
}

}  // namespace
}  // namespace pstrain::bench
