// GenerationTrainer: what a worker trains with for one job generation,
// whatever the mode. The parameter-server trainer (worker/ps/trainer.h:
// pull, gradient, push) and the all-reduce trainer
// (worker/allreduce/allreduce_trainer.h: gradient, ring, local optimizer)
// both implement it, so WorkerNode runs one generation loop over either
// (worker/generation_loop.h); everything that differs between the modes is
// decided when the trainer is made (a TrainerFactory).
#ifndef PSTRAIN_WORKER_GENERATION_TRAINER_H_
#define PSTRAIN_WORKER_GENERATION_TRAINER_H_

#include <functional>

#include "absl/status/status.h"
#include "proto/pstrain.pb.h"
#include "worker/model/local_step.h"

namespace pstrain {

// Receives one record per step (step = start_step..steps-1) and a final
// evaluation record with step == steps. Returning an error stops training.
using StepCallback =
    std::function<absl::Status(const pstrain::v1::StepMetrics&)>;

// One rank's training in one job generation, from the step it was made for
// to the job's last step. Not thread-safe: one thread calls Run, once, and
// reads final_params after it.
class GenerationTrainer {
 public:
  virtual ~GenerationTrainer() = default;

  // Trains to the end of the job and evaluates: OK when every step and the
  // final evaluation were reported through `on_step` (whose error ends the
  // run and is returned). `should_stop` (may be null) is polled between
  // steps: true ends the run with CANCELLED. Any other error (a failed call
  // to a shard or ring neighbour, a checkpoint that cannot be written) ends
  // the run and is returned; the caller decides whether a new generation
  // follows.
  virtual absl::Status Run(const StepCallback& on_step,
                           const std::function<bool()>& should_stop) = 0;

  // The final weights, valid after Run returned OK; a row-sparse tensor's
  // entry is empty (its rows live on the shards or in the row replicas).
  virtual const TensorList& final_params() const = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_GENERATION_TRAINER_H_
