// The worker's training loop, independent of how it was started: pull the
// weights for clock t, compute the gradient of the local slice (with
// gradient accumulation), push it, report; at the end pull the final weights
// and evaluate this rank's slice of the test set.
//
// Per step, between host and compute backend: the pull decodes the weights
// into a HostBuffer (pinned on CUDA), which goes to the backend once
// (Model::SetParams); the micro-batches go in; the gradient is accumulated
// on the backend and comes out once, into a second HostBuffer that the push
// encodes its chunks from. No staging copies for weights or gradients. On
// the CPU backend neither crosses: the model computes on the pulled buffer
// where it is (Model::ShareParams) and the push encodes from the model's own
// gradient, except while standing in for a dead rank (a stand-in computes on
// the weights of the step before while the next pull writes that buffer, and
// pushes from the second buffer).
//
// With worker.overlap and emulated compute (worker.compute_ms), a step
// overlaps communication and computation chunk by chunk (the shard map's
// chunks, rows of a layer's weights): the emulated forward time of each
// chunk starts as soon as its weights have arrived (the pull opens a
// TensorGate entry per chunk), and after the math the emulated backward
// time runs last layer first while the push streams each chunk's gradient
// as soon as its share is over (PsClient::StartPush with a gate). Values are
// those of the plain step (sync runs stay bit-identical); pull_s is then the
// time until the last weights arrived, push_s the push's wall time (both
// overlap compute_s), and the step time is the wall time between reports.
//
// Row-sparse tensors (TensorSpec.row_sparse, docs/sparse.md: embedding
// tables never held whole): each step asks the model which rows its slice
// reads (LocalStep::StepRowIds), pulls exactly those with
// PsClient::StartPullRows at the step's clock alongside the dense pull,
// hands them to the model (Model::SetRows), and pushes the row gradient
// (Model::row_gradient, summed per id over the micro-batches) with
// StartPushRows alongside the dense push, stamped with the row pull's reads;
// the shards apply the job's consistency rule to rows as to dense chunks.
// An evaluation pulls the rows its test slice reads as well. Bytes per step
// scale with the rows touched, not with the table. Such a model runs
// without worker.overlap. Standing in for a dead rank (elastic sync), the
// trainer pulls the rows the rank's slice reads through the rank's client
// and pushes the rank's row gradient beside its dense one. A model without
// row-sparse tensors makes no row calls: its steps are those of a dense
// job, bit for bit.
//
// training.clock model (mode async; RunModelClock): the loop runs past
// `steps` until a pull shows every shard at N x steps pushes (the servers
// release held reads then), and each record carries the model step of its
// push (StepMetrics.model_step: (version - 1) / N from the first shard's
// answer). Evaluations are of the whole test set, when the pulled weights
// (version / N) enter the next multiple of evaluation.every_steps; the last
// record (`finished`) evaluates the final weights. The validation refuses
// it with overlap, row-sparse tensors, checkpoints and recovery.
#ifndef PSTRAIN_WORKER_PS_TRAINER_H_
#define PSTRAIN_WORKER_PS_TRAINER_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/job_config.h"
#include "proto/pstrain.pb.h"
#include "worker/data/data.h"
#include "worker/generation_trainer.h"
#include "worker/model/local_step.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"
#include "worker/ps/tensor_gate.h"

namespace pstrain {

// training.on_failure: elastic, mode sync: a dead rank this worker stands in
// for (docs/failures-and-recovery.md, "Elastic workers"). Each step, after its
// own push, the trainer computes the rank's gradient from the same weights (the
// same model, the rank's data slice) and pushes it through `client`, which
// carries the rank's session id; the rank's records go to `on_step`. The caller
// registered the rank and owns what `client` points to.
struct StandIn {
  uint32_t rank = 0;
  int64_t first_step = 0;  // the first step computed for the rank
  PsClient* client = nullptr;
  StepCallback on_step;
  // Handover (coordinator/elastic.h; may be null): called between steps
  // with the first step not pushed for the rank; true when the rank was
  // handed back (the trainer then stops computing it), false to go on.
  std::function<absl::StatusOr<bool>(int64_t next_step)> release;
};
// Called on the training thread while the model holds the weights of step
// `held` (its push done, the next pull in flight, polled every 50 ms): the
// ranks to stand in for from now on, already registered; usually none. A
// stand-in whose first_step <= held gets that step computed at once (the
// step its dead process may not have pushed everywhere: the shards answer
// a step they already have with its original result). An error ends
// training.
using AdoptFn =
    std::function<absl::StatusOr<std::vector<StandIn>>(int64_t held)>;

struct TrainerOptions {
  uint32_t rank = 0;
  JobConfig config = DefaultJobConfig();  // workers, steps, local_batch,
                                          // grad_accum_steps, eval
  // The first step (JobSpec.start_step): a job resumed from a checkpoint
  // continues there; data ids derive from the step, so nothing else moves.
  int64_t start_step = 0;
  // Elastic sync only (null otherwise): see AdoptFn. Steps then run
  // without worker.overlap.
  AdoptFn adopt;
};

// Wall clock in Unix seconds (StepMetrics.end_unix_s).
double UnixSeconds();

// The parameter-server modes' GenerationTrainer.
class Trainer : public GenerationTrainer {
 public:
  // Borrows `client`, `model` and `data`; they must outlive the trainer.
  Trainer(TrainerOptions options, PsClient* client, Model* model,
          DataSource* data);

  // Runs the whole job for this rank. `should_stop` (may be null) is polled
  // between steps: when it returns true the loop ends early with CANCELLED.
  absl::Status Run(const StepCallback& on_step,
                   const std::function<bool()>& should_stop) override;

  // Weights after the final pull (valid after Run succeeds); a row-sparse
  // tensor's entry is empty (its rows are on the shards).
  const TensorList& final_params() const override { return params_; }

 private:
  // A step's host buffers: the pull decodes into `pulled` (`pull_into`,
  // read as `weights`), the gradient is downloaded into `pushed` (`grads`),
  // views by tensor in model_->params() order.
  struct StepBuffers {
    HostBuffer pulled, pushed;
    MutableTensorViews pull_into;
    TensorViews weights, grads;
  };
  absl::StatusOr<StepBuffers> AllocateStepBuffers() const;
  // The gradient the step's push encodes, after its compute: with `in_place`
  // on a backend whose memory is the host's, views of the model's own
  // (Model::gradient; nothing writes it before the next step's compute);
  // otherwise downloaded into `pushed` (pinned on CUDA), which `grads` view.
  absl::StatusOr<TensorViews> GradientToPush(const TensorViews& grads,
                                             float* pushed,
                                             bool in_place) const;

  // training.clock model in async (see the top of this file).
  absl::Status RunModelClock(const StepCallback& on_step,
                             const std::function<bool()>& should_stop);

  // One step with worker.overlap (see the top of this file).
  absl::Status OverlappedStep(int64_t step, LocalStep* local,
                              const MutableTensorViews& pull_into,
                              const TensorViews& weights,
                              const TensorViews& grads, float* pushed,
                              pstrain::v1::StepMetrics* m);

  // Stand-ins (elastic sync). Waits for `pull` and `pull_rows` (may be
  // null) while polling options_.adopt with the weights of step `held` (-1:
  // none yet).
  absl::Status AwaitPull(PsOp* pull, PsOp* pull_rows, int64_t held,
                         const std::vector<ShardRead>& reads,
                         const TensorViews& grads, float* pushed);
  // Rank `s`'s step `step` from the model's resident weights (read as
  // `reads`): its gradient pushed, or at step == steps its evaluation; then
  // its record. `pushed` backs `grads` and must be free.
  absl::Status StandInStep(const StandIn& s, int64_t step,
                           const std::vector<ShardRead>& reads,
                           const TensorViews& grads, float* pushed);

  // Row-sparse tensors: one request per tensor of sparse_ (in that order)
  // naming the rows that step `step`'s gradient reads (with `train`), the
  // evaluation's test slice (with `test`), or both.
  absl::StatusOr<std::vector<RowSet>> RowRequests(LocalStep* local,
                                                  int64_t step, bool train,
                                                  bool test) const;
  // Makes the rows a StartPullRows of RowRequests brought the model's.
  absl::Status SetPulledRows(std::vector<RowSet>* pulled);
  // The model's row gradients (moved out of it), one per tensor of sparse_.
  absl::StatusOr<std::vector<RowSet>> TakeRowGradients();

  const TrainerOptions options_;
  std::vector<int> sparse_;  // indices of the row-sparse params()
  std::vector<StandIn> stand_ins_;
  PsClient* const client_;
  Model* const model_;
  DataSource* const data_;
  TensorList params_;
  std::unique_ptr<TensorGate> arrived_, ready_;  // overlap only
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PS_TRAINER_H_
