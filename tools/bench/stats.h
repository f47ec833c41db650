// Small helpers every benchmark report uses.
#ifndef PSTRAIN_TOOLS_BENCH_STATS_H_
#define PSTRAIN_TOOLS_BENCH_STATS_H_

#include <string>
#include <vector>

namespace pstrain::bench {

// The median of the values that are not NaN (a round that measured
// nothing); NaN when none is left.
double Median(std::vector<double> values);

// The three load averages of /proc/loadavg, e.g. "1.69 1.99 2.61".
std::string LoadAverage();

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_STATS_H_
