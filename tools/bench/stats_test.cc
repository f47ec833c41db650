// The benchmarks' shared helpers: medians that skip NaN, CPU busy shares
// and list flags.
#include "tools/bench/stats.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
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

TEST(RoundRatios, EachRoundsOwnRatioAndTheirMedian) {
  // Round 2 lacks the numerator, round 3 has a zero denominator.
  const RoundRatios r =
      RatiosWithinRounds({2, 3, kNaN, 4, 10}, {4, 2, 1, 0, 5});
  ASSERT_EQ(r.rounds.size(), 5u);
  EXPECT_EQ(r.rounds[0], 0.5);
  EXPECT_EQ(r.rounds[1], 1.5);
  EXPECT_TRUE(std::isnan(r.rounds[2]));
  EXPECT_TRUE(std::isnan(r.rounds[3]));
  EXPECT_EQ(r.rounds[4], 2);
  EXPECT_EQ(r.median, 1.5);  // of 0.5, 1.5, 2
  // Inverted: b / a, a time whose ratio is read as a speed-up.
  const RoundRatios inv = RatiosWithinRounds({2, 4}, {4, 2}, true);
  EXPECT_EQ(inv.rounds, (std::vector<double>{2, 0.5}));
  EXPECT_EQ(inv.median, 1.25);
  EXPECT_TRUE(std::isnan(RatiosWithinRounds({kNaN}, {1}).median));
}

TEST(RoundRatios, RoundsMeetingAGoal) {
  const RoundRatios r = RatiosWithinRounds({0.4, 0.5, kNaN, 0.6}, {1, 1, 1, 1});
  // The median (0.5) meets >= 0.5; one of the three measured rounds does not.
  EXPECT_EQ(r.median, 0.5);
  RoundsMet m = CountRoundsMet(r, ">=", 0.5);
  EXPECT_EQ(m.met, 2);
  EXPECT_EQ(m.measured, 3);
  m = CountRoundsMet(r, "<=", 0.45);
  EXPECT_EQ(m.met, 1);
  EXPECT_EQ(m.measured, 3);
  // No goal: no round meets one; measured once: no rounds at all.
  EXPECT_EQ(CountRoundsMet(r, "", 0).met, 0);
  m = CountRoundsMet(RoundRatios{1.2}, "<=", 1.3);
  EXPECT_EQ(m.met, 0);
  EXPECT_EQ(m.measured, 0);
}

TEST(SteadyRate, ColdStepsApartMedianOfTheWarmOnes) {
  // 10 bytes: a cold step of 1 s, then warm steps of 0.5, 0.1, 0.2 s.
  const SteadyRate r = SteadyRateOf(10, {1.0, 0.5, 0.1, 0.2}, 1, 0);
  EXPECT_DOUBLE_EQ(r.cold_bytes_per_s, 10);
  EXPECT_DOUBLE_EQ(r.warm_bytes_per_s, 50);  // median of 20, 100, 50
  EXPECT_EQ(r.warm_steps, 3);
  const SteadyRate none = SteadyRateOf(10, {1.0}, 1, 0);
  EXPECT_TRUE(std::isnan(none.warm_bytes_per_s));
  EXPECT_EQ(none.warm_steps, 0);
}

TEST(SteadyRate, SettlingStepsCountInNeitherFigure) {
  // A cold step of 1 s, two settling steps of 2 and 5 s, then 0.5, 0.1, 0.2.
  const SteadyRate r = SteadyRateOf(10, {1.0, 2.0, 5.0, 0.5, 0.1, 0.2}, 1, 2);
  EXPECT_DOUBLE_EQ(r.cold_bytes_per_s, 10);
  EXPECT_DOUBLE_EQ(r.warm_bytes_per_s, 50);
  EXPECT_EQ(r.warm_steps, 3);
  // The bench's layout: StepsTimed(w) steps leave w warm ones.
  const std::vector<double> timed(StepsTimed(4), 0.5);
  EXPECT_EQ(SettledRateOf(10, timed).warm_steps, 4);
  EXPECT_DOUBLE_EQ(SettledRateOf(10, timed).warm_bytes_per_s, 20);
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

TEST(CpuTimes, ARunningChildsSpinAddsToThisProcesssTime) {
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // spins for 50 ms of its own CPU time, says so, waits
    close(done[0]);
    timespec t;
    do {
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    } while (t.tv_sec == 0 && t.tv_nsec < 50000000);
    char c = 1;
    (void)!write(done[1], &c, 1);
    pause();
    _exit(0);
  }
  close(done[1]);
  char c = 0;
  ASSERT_EQ(read(done[0], &c, 1), 1);
  close(done[0]);
  const CpuTimes self = ReadCpuTimes();
  const CpuTimes both = ReadCpuTimesWith(child);
  // The child's 50 ms on top of at least what this process had used.
  EXPECT_GE(both.busy, self.busy + 50000000u);
  EXPECT_GE(both.total, self.total);
  // The list form: the same child, and the same child twice.
  const std::vector<pid_t> once = {child}, twice = {child, child};
  EXPECT_GE(ReadCpuTimesWith(once).busy, self.busy + 50000000u);
  EXPECT_GE(ReadCpuTimesWith(twice).busy, self.busy + 100000000u);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  // Reaped: its clock is gone, and the read says it could not measure.
  EXPECT_EQ(ReadCpuTimesWith(child).total, 0u);
  EXPECT_EQ(ReadCpuTimesWith(once).total, 0u);
}

// Touching fresh anonymous pages faults once per page.
TEST(MinorFaults, FreshPagesCountOncePerPage) {
  constexpr size_t kPages = 256;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const uint64_t before = ReadMinorFaults();
  for (size_t i = 0; i < kPages; ++i) static_cast<char*>(p)[i * page] = 1;
  const uint64_t touched = ReadMinorFaults() - before;
  for (size_t i = 0; i < kPages; ++i) static_cast<char*>(p)[i * page] = 2;
  const uint64_t again = ReadMinorFaults() - before - touched;
  munmap(p, kPages * page);
  EXPECT_GE(touched, kPages / 2);  // the kernel may map some pages ahead
  EXPECT_LT(again, kPages / 8);
}

// The same count read for a process by pid: this one's, through /proc.
TEST(MinorFaults, OfAProcessByPid) {
  const uint64_t self = ReadMinorFaults();
  const uint64_t by_pid = ReadMinorFaultsOf(getpid());
  EXPECT_GT(self, 0u);
  EXPECT_GE(by_pid, self);               // read later: not fewer
  EXPECT_EQ(ReadMinorFaultsOf(-1), 0u);  // no such process
}

TEST(ParseProcStat, CountsFieldsFromTheLastParenthesis) {
  // A command name with spaces and a ')' of its own; utime 250, stime 70.
  const std::string line =
      "4242 (ps worker) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 70 0 0 "
      "20 0 9 0 12345 100000 2000 18446744073709551615";
  absl::StatusOr<ProcStat> st = ParseProcStat(line, "/proc/4242/stat");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->cpu_ticks, 320u);
  EXPECT_EQ(st->minor_faults, 900u);
  absl::StatusOr<ProcStat> zombie =
      ParseProcStat("7 (w) Z 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 9", "z");
  ASSERT_TRUE(zombie.ok()) << zombie.status();
  EXPECT_EQ(zombie->state, 'Z');
  EXPECT_EQ(zombie->cpu_ticks, 7u);
}

TEST(ParseProcStat, ThisProcessCountsItsOwnCpu) {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  absl::StatusOr<ProcStat> st = ParseProcStat(line, "/proc/self/stat");
  ASSERT_TRUE(st.ok()) << st.status() << " in " << line;
  EXPECT_EQ(st->state, 'R');  // reading its own stat
}

TEST(ParseProcStat, NamesTheSourceOfABadLine) {
  for (const char* bad : {"", "12 (x S 1", "12 (x) S 1 2 3",
                          "12 (x) S 1 2 3 4 5 6 7 8 9 10 u 3 4",
                          "12 (x) SS 1 2 3 4 5 6 7 8 9 10 3 4"}) {
    absl::StatusOr<ProcStat> st = ParseProcStat(bad, "/proc/12/stat");
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(st.status().message(), "/proc/12/stat: "))
        << st.status();
  }
}

TEST(CsvDataRows, CountsCompleteLinesBelowTheHeader) {
  EXPECT_EQ(CsvDataRows(""), 0);
  EXPECT_EQ(CsvDataRows("step,wall_s\n"), 0);
  EXPECT_EQ(CsvDataRows("step,wall_s\n0,0.1\n1,0.2\n"), 2);
  // A row still being written is not counted.
  EXPECT_EQ(CsvDataRows("step,wall_s\n0,0.1\n1,0.2"), 1);
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
