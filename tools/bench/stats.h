// Small helpers the benchmarks share: reports and list flags.
#ifndef PSTRAIN_TOOLS_BENCH_STATS_H_
#define PSTRAIN_TOOLS_BENCH_STATS_H_

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

// A comma-separated list of positive integers ("1,4,16"); an error naming
// --flag and the text otherwise.
absl::StatusOr<std::vector<int>> ParsePositiveList(absl::string_view flag,
                                                   absl::string_view text);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_STATS_H_
