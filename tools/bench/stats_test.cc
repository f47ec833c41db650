// The benchmarks' shared helpers: medians that skip NaN, CPU busy shares
// and list flags.
#include "tools/bench/stats.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain::bench {
namespace {

constexpr double kNaN = __builtin_nan("");

TEST(Median, SkipsNaNAndAveragesTheMiddleTwo) {
  EXPECT_EQ(Median({3, kNaN, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(Median({kNaN})));
  EXPECT_TRUE(std::isnan(Median({})));
}

TEST(CpuTimes, BusyShareOfTheTicksBetweenReads) {
  CpuTimes sum = AddCpuDelta({}, {100, 400}, {130, 440});
  sum = AddCpuDelta(sum, {200, 500}, {210, 560});
  EXPECT_EQ(sum.busy, 40u);
  EXPECT_EQ(sum.total, 100u);
  EXPECT_EQ(BusyShare(sum), 0.4);
  // A read that failed (zeros) or went backwards adds nothing.
  EXPECT_EQ(AddCpuDelta(sum, {100, 400}, {}).total, 100u);
  EXPECT_TRUE(std::isnan(BusyShare({})));
}

TEST(CpuTimes, ThisProcessSpinningIsBusy) {
  const CpuTimes start = ReadCpuTimes();
  ASSERT_GT(start.total, 0u);
  // One thread spinning for 50 ms of its own CPU time.
  CpuTimes now = start;
  while (now.busy - start.busy < 50000000u) now = ReadCpuTimes();
  const double share = BusyShare(AddCpuDelta({}, start, now));
  // One thread is at most one of the CPUs' worth (a little over for the
  // clocks' skew).
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  EXPECT_GT(share, 0.0);
  EXPECT_LE(share, 1.0 / CPU_COUNT(&cpus) + 0.02);
}

TEST(CpuTimes, AWaitedChildsSpinCountsAsChildrenTime) {
  const CpuTimes before = ReadChildrenCpuTimes();
  ASSERT_GT(before.total, 0u);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // spins for 50 ms of its own CPU time
    timespec t;
    do {
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    } while (t.tv_sec == 0 && t.tv_nsec < 50000000);
    _exit(0);
  }
  // Not yet waited for: not counted.
  EXPECT_EQ(ReadChildrenCpuTimes().busy, before.busy);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const CpuTimes after = ReadChildrenCpuTimes();
  // getrusage counts in ticks or microseconds: at least most of the 50 ms.
  EXPECT_GE(after.busy - before.busy, 40000000u);
  const double share = BusyShare(AddCpuDelta({}, before, after));
  EXPECT_GT(share, 0.0);
  EXPECT_LE(share, 1.0);
}

TEST(ParsePositiveList, AcceptsPositiveIntegersAndNamesTheFlagOtherwise) {
  absl::StatusOr<std::vector<int>> ok = ParsePositiveList("mib", "1,4,16");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, (std::vector<int>{1, 4, 16}));
  for (const char* bad : {"", "1,,2", "0", "2,-1", "x", "4 MiB"}) {
    absl::StatusOr<std::vector<int>> r = ParsePositiveList("ranks", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(
        r.status().message(),
        absl::StrCat("--ranks: expected positive integers, got '", bad, "'"));
  }
}

}  // namespace
}  // namespace pstrain::bench
