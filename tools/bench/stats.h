// Small helpers the benchmarks share: reports and list flags.
#ifndef PSTRAIN_TOOLS_BENCH_STATS_H_
#define PSTRAIN_TOOLS_BENCH_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain::bench {

// The median of the values that are not NaN (a round that measured
// nothing); NaN when none is left.
double Median(std::vector<double> values);

// The three load averages of /proc/loadavg, e.g. "1.69 1.99 2.61".
std::string LoadAverage();

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
// The same for the children this process has waited for (getrusage
// RUSAGE_CHILDREN, user and system, descendants they waited for included):
// the difference over a job whose processes were started and waited for in
// between is the CPU time of the job's processes.
CpuTimes ReadChildrenCpuTimes();
// `sum` + (b - a).
CpuTimes AddCpuDelta(const CpuTimes& sum, const CpuTimes& a, const CpuTimes& b);
// The share of the CPUs' time that was busy in `t` (1: every core busy all
// the time); NaN when no time passed.
double BusyShare(const CpuTimes& t);

// A comma-separated list of positive integers ("1,4,16"); an error naming
// --flag and the text otherwise.
absl::StatusOr<std::vector<int>> ParsePositiveList(absl::string_view flag,
                                                   absl::string_view text);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_STATS_H_
