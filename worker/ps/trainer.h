// The worker's training loop, independent of how it was started: pull the
// weights for clock t, compute the gradient of the local slice (with
// gradient accumulation), push it, report; at the end pull the final weights
// and evaluate this rank's slice of the test set.
//
// Per step, between host and compute backend: the pull decodes the weights
// into a HostBuffer (pinned on CUDA), which goes to the backend once
// (Model::SetParams); the micro-batches go in; the gradient is accumulated
// on the backend and comes out once, into a second HostBuffer that the push
// encodes its chunks from. No staging copies for weights or gradients.
#ifndef PSTRAIN_WORKER_PS_TRAINER_H_
#define PSTRAIN_WORKER_PS_TRAINER_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "common/job_config.h"
#include "proto/pstrain.pb.h"
#include "worker/data/data.h"
#include "worker/model/local_step.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"

namespace pstrain {

struct TrainerOptions {
  uint32_t rank = 0;
  JobConfig config = DefaultJobConfig();  // workers, steps, local_batch,
                                          // grad_accum_steps, eval
  // The first step (JobSpec.start_step): a job resumed from a checkpoint
  // continues there; data ids derive from the step, so nothing else moves.
  int64_t start_step = 0;
};

// Wall clock in Unix seconds (StepMetrics.end_unix_s).
double UnixSeconds();

// Receives one record per step (step = start_step..steps-1) and a final
// evaluation record with step == steps. Returning an error stops training.
using StepCallback =
    std::function<absl::Status(const pstrain::v1::StepMetrics&)>;

class Trainer {
 public:
  // Borrows `client`, `model` and `data`; they must outlive the trainer.
  Trainer(TrainerOptions options, PsClient* client, Model* model,
          DataSource* data)
      : options_(std::move(options)),
        client_(client),
        model_(model),
        data_(data) {}

  // Runs the whole job for this rank. `should_stop` (may be null) is polled
  // between steps: when it returns true the loop ends early with CANCELLED.
  absl::Status Run(const StepCallback& on_step,
                   const std::function<bool()>& should_stop);

  // Weights after the final pull (valid after Run succeeds).
  const TensorList& final_params() const { return params_; }

 private:
  const TrainerOptions options_;
  PsClient* const client_;
  Model* const model_;
  DataSource* const data_;
  TensorList params_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PS_TRAINER_H_
