// The figures of `psctl compare`, as pure functions of one run's data (see
// common/run_record.h). Each function documents its definition; the
// report repeats them for its readers.
#ifndef PSTRAIN_TOOLS_REPORT_REPORT_MATH_H_
#define PSTRAIN_TOOLS_REPORT_REPORT_MATH_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/run_record.h"
#include "nlohmann/json.hpp"

namespace pstrain {

// Nearest-rank percentile of a histogram whose bucket i counts value i: the
// smallest i whose cumulative count reaches ceil(p * total) (at least 1).
// `p` in [0, 1]; nullopt for an empty or all-zero histogram.
std::optional<int64_t> HistogramPercentile(const std::vector<uint64_t>& hist,
                                           double p);
// The largest value with a non-zero count; nullopt when there is none.
std::optional<int64_t> HistogramMax(const std::vector<uint64_t>& hist);

// A quality goal on the evaluation rows of metrics.csv.
struct Target {
  enum Kind { kNone, kAccuracy, kLoss };
  Kind kind = kNone;
  double value = 0;  // eval_accuracy >= value, or eval_loss <= value
};

struct TargetHit {
  int64_t step = 0;   // the row's step: updates behind the evaluated weights
  double wall_s = 0;  // the row's wall time since training started
};

// The first row (in file order) whose evaluation meets `target`; nullopt if
// none does or the target is kNone.
std::optional<TargetHit> TimeToTarget(const std::vector<MetricsRow>& rows,
                                      const Target& target);

// Median (mean of the middle two for an even count), minimum and maximum.
// Infinite values (a target not reached) sort last. nullopt when empty.
struct Spread {
  double median = 0;
  double min = 0;
  double max = 0;
  int count = 0;
};
std::optional<Spread> MedianSpread(std::vector<double> values);

// total / (workers * steps); 0 when either is 0.
double PerWorkerPerStep(uint64_t total_bytes, int workers, int64_t steps);

// The mean share of a worker's wall time spent blocked on the consistency
// barrier: barrier_wait_s / (servers * workers * wall_s). Every shard adds
// up the waits of all pulls, and a worker's pull waits on all shards at
// once, so the shards' sum counts each worker's wait `servers` times.
// nullopt without servers, workers or wall time (all-reduce has no barrier
// on a shard).
std::optional<double> BarrierWaitShare(double barrier_wait_s, int servers,
                                       int workers, double wall_s);

// Mean over training rows (those with a loss) of pull_s + push_s, each a
// worker mean: communication time per step. nullopt without training rows.
std::optional<double> MeanCommPerStep(const std::vector<MetricsRow>& rows);

// The share of the wire a run used: its effective rate, (bytes sent +
// received) per worker per step / communication seconds per step, over the
// wire's rate (bytes per second). nullopt when either rate is not positive.
std::optional<double> WireShare(double bytes_per_worker_step,
                                std::optional<double> comm_s_per_step,
                                double wire_bytes_per_s);

// Hardware efficiency: wall seconds per step, wall_s / steps (a step is one
// clock: every worker computes one slice of the global batch). nullopt
// without steps or wall time.
std::optional<double> SecondsPerStep(double wall_s, int64_t steps);

// Steady-state wall seconds per step: the median of the steps' own
// durations, wall_s(s) - wall_s(s - 1) over consecutive training rows (those
// with a loss) with s - 1 >= `warmup` (so the first `warmup` steps, with
// their connections and first allocations, are left out). The median, not
// the mean: a step that also ran an evaluation, or one the machine's load
// stretched, does not move it; so it is the speed of a typical step, not
// the time a run takes (wall_s / steps), and it leaves out occasional slow
// steps (transient stragglers) on purpose. nullopt without two consecutive
// training rows after the warm-up.
std::optional<double> SteadySecondsPerStepMedian(
    const std::vector<MetricsRow>& rows, int64_t warmup);

// The warm-up `psctl compare` skips for that figure: a fifth of the steps,
// at most 5 (25 steps: 5; 8 steps: 1; fewer than 5: none).
int64_t SteadyWarmupSteps(int64_t steps);

// Optimizer updates per step: one in sync (backup workers too) and
// all-reduce; one per worker's push, `workers`, in async.
int64_t UpdatesPerStep(const std::string& mode, int workers);

// Time to target as the product of the two efficiencies, and the ratios of
// a mode against a reference: time = (s / step) x (steps to target), so
// time_ratio = hardware_ratio x statistical_ratio exactly.
struct EfficiencyRatio {
  double hardware = 0;     // (s / step) / reference's
  double statistical = 0;  // (steps to target) / reference's
  double time = 0;         // hardware x statistical
};
// nullopt when any input is not finite and positive (a target not reached
// has no ratio).
std::optional<EfficiencyRatio> CompareEfficiency(double s_per_step,
                                                 double steps_to_target,
                                                 double ref_s_per_step,
                                                 double ref_steps_to_target);

// Calls `fn(mode, repeat)` for every repeat of every mode of a compare.json
// text (psctl compare's data), in file order. INVALID_ARGUMENT naming
// `source` when the text is not a compare.json or a mode lacks its name or
// repeats; the first error `fn` returns ends the walk and is returned.
absl::Status ForEachCompareRepeat(
    const std::string& text, const std::string& source,
    const std::function<absl::Status(const std::string& mode,
                                     const nlohmann::json& repeat)>& fn);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_REPORT_MATH_H_
