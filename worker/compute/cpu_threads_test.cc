// The CPU backend's thread settings: cgroup v2 CPU quotas, the CPUs a
// process may use, the matrix products' threads (psctl run splits a
// host's cores between its workers), and how long they spin when idle.
#include <cblas.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"

namespace pstrain {
namespace {

double ProcessCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

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

// The test's environment does not set OPENBLAS_THREAD_TIMEOUT (bazel test
// passes a clean one), so OpenBLAS read none when it was loaded: the
// default is set and read; a setting of the environment is read as it is.
TEST(LimitOpenBlasSpin, SetsTheDefaultOrReadsTheEnvironments) {
  ASSERT_EQ(getenv("OPENBLAS_THREAD_TIMEOUT"), nullptr);
  EXPECT_EQ(*LimitOpenBlasSpin(), kOpenBlasThreadTimeout);
  EXPECT_EQ(std::string(getenv("OPENBLAS_THREAD_TIMEOUT")),
            std::to_string(kOpenBlasThreadTimeout));
  EXPECT_EQ(*LimitOpenBlasSpin(), kOpenBlasThreadTimeout);  // again: same
  setenv("OPENBLAS_THREAD_TIMEOUT", "7", 1);
  EXPECT_EQ(*LimitOpenBlasSpin(), 7);
  // What OpenBLAS makes of values outside its range: its own for 0, the
  // nearest bound otherwise.
  setenv("OPENBLAS_THREAD_TIMEOUT", "0", 1);
  EXPECT_EQ(*LimitOpenBlasSpin(), kOpenBlasOwnThreadTimeout);
  setenv("OPENBLAS_THREAD_TIMEOUT", "2", 1);
  EXPECT_EQ(*LimitOpenBlasSpin(), 4);
  unsetenv("OPENBLAS_THREAD_TIMEOUT");
  EXPECT_EQ(*LimitOpenBlasSpin(), kOpenBlasThreadTimeout);
  // An exponent given (ps_worker --openblas_thread_timeout) wins over the
  // environment and is left in it.
  setenv("OPENBLAS_THREAD_TIMEOUT", "7", 1);
  EXPECT_EQ(*LimitOpenBlasSpin(24), 24);
  EXPECT_EQ(std::string(getenv("OPENBLAS_THREAD_TIMEOUT")), "24");
  unsetenv("OPENBLAS_THREAD_TIMEOUT");
  EXPECT_EQ(*LimitOpenBlasSpin(), kOpenBlasThreadTimeout);
}

// CPU seconds this process uses in the 0.3 s after three products of
// 512 x 512 matrices on two threads, while its main thread sleeps.
double IdleCpuAfterProducts() {
  EXPECT_EQ(SetCpuComputeThreads(2), 2);
  constexpr int kN = 512;  // large enough for OpenBLAS to use both threads
  std::vector<float> a(kN * kN, 0.5f), b(kN * kN, 0.25f), c(kN * kN);
  for (int i = 0; i < 3; ++i) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f,
                a.data(), kN, b.data(), kN, 0.0f, c.data(), kN);
  }
  EXPECT_EQ(c[0], kN * 0.125f);
  const double before = ProcessCpuSeconds();
  usleep(300 * 1000);
  const double idle_cpu = ProcessCpuSeconds() - before;
  unsetenv("OPENBLAS_NUM_THREADS");
  SetCpuComputeThreads(0);
  return idle_cpu;
}

// With OpenBLAS's own timeout (2^28 cycles, about 0.1 s here) the idle
// helper thread spins through about 0.1 s of the 0.3 s; limited, it sleeps
// within a millisecond. A loaded machine can only lower a spinning thread's
// share, never raise a sleeping one's, so the bound holds under load.
TEST(LimitOpenBlasSpin, IdleThreadsSleepSoonAfterAProduct) {
  ASSERT_EQ(*LimitOpenBlasSpin(kOpenBlasOwnThreadTimeout),
            kOpenBlasOwnThreadTimeout);
  const double spinning = IdleCpuAfterProducts();
  unsetenv("OPENBLAS_THREAD_TIMEOUT");
  ASSERT_EQ(*LimitOpenBlasSpin(), kOpenBlasThreadTimeout);
  const double limited = IdleCpuAfterProducts();
  EXPECT_LT(limited, 0.03) << "CPU seconds while idle for 0.3 s";
  // What a spinning helper took here, for the reader (a loaded machine
  // gives it less, so it is not asserted).
  std::printf("idle CPU seconds: 2^28 cycles %.3f, 2^%d %.3f\n", spinning,
              kOpenBlasThreadTimeout, limited);
}

}  // namespace
}  // namespace pstrain
