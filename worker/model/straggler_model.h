// The emulated compute time of one worker's step (worker.compute_ms and the
// straggler models of the `worker` config section), as a pure function of
// the config, the data seed, the rank and the step, so runs are
// reproducible and the models are testable without sleeping:
//
//  - persistent: rank worker.straggler_rank is straggler_factor times as
//    slow on every step;
//  - transient: on each step, each rank is slowed with probability
//    worker.transient_straggler_p, by a factor drawn from a Pareto law with
//    minimum worker.transient_straggler_factor and shape
//    kTransientParetoShape (heavy-tailed: median 1.41x, mean 2x the
//    minimum), capped at kTransientCap times the minimum so one step stays
//    bounded. The draws come from a hash of (data.seed, rank, step): the same
//    job slows the same (rank, step) pairs by the same factors in every mode,
//    and a repeat with another data seed draws anew;
//  - pause: rank worker.pause_rank sleeps worker.pause_s seconds once, on
//    step worker.pause_at_step (a rerun of that step after a rollback
//    pauses again).
#ifndef PSTRAIN_WORKER_MODEL_STRAGGLER_MODEL_H_
#define PSTRAIN_WORKER_MODEL_STRAGGLER_MODEL_H_

#include <cstdint>

#include "absl/time/time.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

inline constexpr double kTransientParetoShape = 2.0;
inline constexpr double kTransientCap = 10.0;

// What the straggler models do to one (rank, step).
struct StepSlowdown {
  // Multiplies the step's compute time (persistent x transient); >= 1.
  double factor = 1.0;
  // Added once the compute is done (the pause); >= 0.
  absl::Duration pause = absl::ZeroDuration();
};

// The slow-down of `rank`'s step `step` under `w`, with `seed` the job's
// data.seed. Deterministic.
StepSlowdown SlowdownFor(const pstrain::v1::WorkerConfig& w, uint64_t seed,
                         uint32_t rank, int64_t step);

// The transient model's draw for (seed, rank, step): 1 when the step is
// not slowed, else the Pareto factor. Exposed for tests.
double TransientFactor(double p, double min_factor, uint64_t seed,
                       uint32_t rank, int64_t step);

// The compute time `rank`'s step `step` takes: `base` (compute_ms, or the
// measured time when compute_ms is 0) times the factor, plus the pause.
absl::Duration EmulatedStepTime(const pstrain::v1::WorkerConfig& w,
                                uint64_t seed, uint32_t rank, int64_t step,
                                absl::Duration base);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODEL_STRAGGLER_MODEL_H_
