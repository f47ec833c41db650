// The CPU backend's thread settings: cgroup v2 CPU quotas, the CPUs a
// process may use, and the matrix products' threads (psctl run splits a
// host's cores between its workers).
#include <sched.h>
#include <stdlib.h>

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"

namespace pstrain {
namespace {

TEST(ParseCpuMax, QuotaInCpusRoundedUpOrNone) {
  EXPECT_EQ(*ParseCpuMax("max 100000\n"), 0);
  EXPECT_EQ(*ParseCpuMax("100000 100000"), 1);
  EXPECT_EQ(*ParseCpuMax("150000 100000\n"), 2);
  EXPECT_EQ(*ParseCpuMax("400000 100000"), 4);
  EXPECT_EQ(*ParseCpuMax("1000 100000"), 1);
  for (const char* bad : {"", "max", "100000", "-1 100000", "0 100000", "max 0",
                          "abc 100000", "1 2 3"}) {
    const absl::StatusOr<int> q = ParseCpuMax(bad);
    EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(q.status().message().find("cpu.max"), std::string::npos);
  }
}

TEST(UsableCpus, AtLeastOneAndNoMoreThanTheAffinityMask) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cpus = UsableCpus();
  EXPECT_GE(cpus, 1);
  EXPECT_LE(cpus, CPU_COUNT(&set));
}

// The setting takes effect and shows in the backend's name (logged by the
// worker at start-up); 0 returns to every usable CPU.
TEST(SetCpuComputeThreads, SetsTheBackendsThreads) {
  EXPECT_EQ(SetCpuComputeThreads(1), 1);
  absl::StatusOr<std::unique_ptr<ComputeBackend>> cpu = CreateCpuBackend();
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->name(), "cpu (OpenBLAS, 1 threads)");
  unsetenv("OPENBLAS_NUM_THREADS");
  const int all = SetCpuComputeThreads(0);
  EXPECT_GE(all, 1);
  EXPECT_LE(all, UsableCpus());
}

// 0 keeps what OPENBLAS_NUM_THREADS asked for (OpenBLAS applies it when it
// starts; here the setting before stands in for it). On a machine with
// more than one usable CPU, "kept" differs from automatic.
TEST(SetCpuComputeThreads, AutomaticKeepsOpenBlasNumThreads) {
  unsetenv("OPENBLAS_NUM_THREADS");
  const int automatic = SetCpuComputeThreads(0);
  ASSERT_EQ(SetCpuComputeThreads(1), 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  EXPECT_EQ(SetCpuComputeThreads(0), 1);
  setenv("OPENBLAS_NUM_THREADS", "0", 1);  // not positive: automatic
  EXPECT_EQ(SetCpuComputeThreads(0), automatic);
  unsetenv("OPENBLAS_NUM_THREADS");
}

}  // namespace
}  // namespace pstrain
