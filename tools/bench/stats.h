// Small helpers the benchmarks share: reports and list flags.
#ifndef PSTRAIN_TOOLS_BENCH_STATS_H_
#define PSTRAIN_TOOLS_BENCH_STATS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain::bench {

// The median of the values that are not NaN (a round that measured
// nothing); NaN when none is left.
double Median(std::vector<double> values);

// A ratio taken within each round of a benchmark (interleaved rounds, so
// that both figures of a round saw the same machine): the median over the
// rounds, and each round's own (NaN where the round lacks either figure).
// A figure measured once has a median and no rounds.
struct RoundRatios {
  double median = __builtin_nan("");
  std::vector<double> rounds;
};
// a[k] / b[k] for each round k (b[k] / a[k] with `invert`) where both are
// positive numbers; NaN for the others. a and b: one value per round, the
// same number.
RoundRatios RatiosWithinRounds(const std::vector<double>& a,
                               const std::vector<double>& b,
                               bool invert = false);
// Of `ratios`' rounds that have a ratio, how many meet the goal `op` `goal`
// (op ">=" or "<="; any other op meets none): a goal whose median is met
// may still fail in some rounds, and a reader of one run sees how firm it is.
struct RoundsMet {
  int met = 0;
  int measured = 0;
};
RoundsMet CountRoundsMet(const RoundRatios& ratios, absl::string_view op,
                         double goal);

// Steady state of a transfer timed step by step: the first `cold` steps'
// seconds (connections, first-touch pages) apart, the next `settle` steps
// in neither figure, the rest warm. warm_bytes_per_s is the median over the
// warm steps of bytes / seconds (NaN when no warm step has a positive
// time); cold_bytes_per_s the same over the cold steps.
struct SteadyRate {
  double cold_bytes_per_s = __builtin_nan("");
  double warm_bytes_per_s = __builtin_nan("");
  int warm_steps = 0;
};
SteadyRate SteadyRateOf(double bytes, const std::vector<double>& seconds,
                        int cold, int settle);

// The steps after a steady figure's cold first one that count in neither
// figure: in them a fresh cluster's heap and gRPC's read buffers still grow
// (page faults, each dear in this VM), and a 4 MB pull took 14-23 ms where
// it takes 1-2 ms a step or two later (docs/performance-log.md, "Three
// settling steps"). The real-job rows skip the same steps
// (kRealJobFirstStep).
inline constexpr int kSettleSteps = 3;
// The steps a steady figure of `warm` warm steps times: the cold one, the
// settling ones, then the warm ones.
constexpr int StepsTimed(int warm) { return 1 + kSettleSteps + warm; }
// SteadyRateOf of such steps.
inline SteadyRate SettledRateOf(double bytes,
                                const std::vector<double>& seconds) {
  return SteadyRateOf(bytes, seconds, 1, kSettleSteps);
}

// The three load averages of /proc/loadavg, e.g. "1.69 1.99 2.61".
std::string LoadAverage();

// The CPUs this process may run on (sched_getaffinity; 1 if unknown).
int HostCores();

// This process's CPU time (all its threads, user and system) and the time
// all the CPUs it may run on had meanwhile (wall time x their number), in
// nanoseconds since some start: a row's client, servers and streams all run
// in the benchmark's process, so the share of the CPUs busy during a row is
// BusyShare of the difference. Zero where the clocks cannot be read.
struct CpuTimes {
  uint64_t busy = 0;
  uint64_t total = 0;
};
CpuTimes ReadCpuTimes();
// The same with the CPU time of process `other` added to this process's (a
// server this process started, running meanwhile; its CPU-time clock,
// clock_getcpuclockid: all its threads, in nanoseconds). Zero where either
// clock cannot be read (e.g. `other` has been reaped).
CpuTimes ReadCpuTimesWith(pid_t other);
// The same with every process of `others` added.
CpuTimes ReadCpuTimesWith(const std::vector<pid_t>& others);
// The same for the children this process has waited for (getrusage
// RUSAGE_CHILDREN, user and system, descendants they waited for included):
// the difference over a job whose processes were started and waited for in
// between is the CPU time of the job's processes.
CpuTimes ReadChildrenCpuTimes();
// Minor page faults of this process so far (getrusage RUSAGE_SELF
// ru_minflt; 0 if unknown). A fault per 4 KiB where a buffer lands in fresh
// pages: the difference over a phase shows it (docs/performance-log.md, "One
// malloc arena in every worker").
uint64_t ReadMinorFaults();
// The same of process `pid` (/proc/PID/stat, field 10; 0 if unknown).
uint64_t ReadMinorFaultsOf(pid_t pid);
// `sum` + (b - a).
CpuTimes AddCpuDelta(const CpuTimes& sum, const CpuTimes& a, const CpuTimes& b);
// The share of the CPUs' time that was busy in `t` (1: every core busy all
// the time); NaN when no time passed.
double BusyShare(const CpuTimes& t);

// The CPU time (user + system, all threads, in clock ticks) in the text of
// /proc/PID/stat, its minor page faults, and its state letter ('Z' for a
// process that exited and was not reaped yet). The command name may hold spaces
// and parentheses: the fields are counted from its last ')'. INVALID_ARGUMENT
// naming `source` when the text is not such a line.
struct ProcStat {
  char state = '?';
  uint64_t cpu_ticks = 0;
  uint64_t minor_faults = 0;
};
absl::StatusOr<ProcStat> ParseProcStat(absl::string_view text,
                                       absl::string_view source);

// The number of data rows in a CSV text with a header line: its complete
// lines ('\n'-terminated) less the header; 0 for an empty text.
int CsvDataRows(absl::string_view text);

// A comma-separated list of positive integers ("1,4,16"); an error naming
// --flag and the text otherwise.
absl::StatusOr<std::vector<int>> ParsePositiveList(absl::string_view flag,
                                                   absl::string_view text);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_STATS_H_
