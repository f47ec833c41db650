// The worker's training loop in mode allreduce: every rank holds a full
// replica of the weights and the optimizer state. Per step: compute the
// gradient of the local slice (with gradient accumulation), all-reduce the
// sample-weighted gradients, divide by the total sample count, apply the
// optimizer locally, report. At the end evaluate this rank's test slice.
//
// What crosses between host and backend per step: the weights in once from
// pinned memory (Model::ShareParams, num_params floats, for the evaluation
// and every micro-batch; on the CPU backend the model computes on them where
// they are, no copy), the micro-batches in, and the all-reduced gradient out
// once (num_params + 1 floats, into pinned memory on CUDA, so one DMA). The
// gradient is accumulated and weighted on the backend; with a reducer that
// sums on the device (NCCL) it is reduced in place there, where only the
// sample count (one float) goes in; with the ring it is downloaded first and
// reduced in that host buffer, except on the CPU backend, where the ring
// reduces the model's gradient where it is. The optimizer runs on the host
// (common/optimizer, shared with the shards so the modes are bit-equivalent),
// which is why the reduced gradient comes out and the new weights go back
// in; an optimizer on the device would remove both.
//
// It reproduces sync (BSP) parameter-server training: the same initial
// weights (common/model_spec.h), the same gradient average weighted by
// sample counts, and the same optimizer code with the same conventions as a
// sync shard (schedule step = update count = step). All-reduced values are
// bit-identical on every rank and the optimizer is deterministic, so the
// replicas stay bit-identical.
//
// Row-sparse tables (model.type wide_deep, docs/sparse.md): each rank keeps
// a replica of every table (worker/allreduce/row_replicas.h); a step reads
// its rows from it and exchanges the row gradients as allreduce.sparse says
// (the whole table's gradient in the ring all-reduce, or an all-gather of
// the rows), then updates the touched rows as a sync shard does. Such a job
// has no checkpoints (the job's validation refuses them).
//
// Checkpoints and resume (worker/allreduce/checkpointing.h): rank 0 writes
// the replica's state after the step that completes each cut; a resumed job
// loads it on every rank and starts at its step (options.start_step), with
// data ids derived from step and rank as always, so it ends bit-identical to
// the undisturbed job.
#ifndef PSTRAIN_WORKER_ALLREDUCE_ALLREDUCE_TRAINER_H_
#define PSTRAIN_WORKER_ALLREDUCE_ALLREDUCE_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "common/optimizer.h"
#include "proto/pstrain.pb.h"
#include "worker/allreduce/allreducer.h"
#include "worker/allreduce/checkpointing.h"
#include "worker/allreduce/row_replicas.h"
#include "worker/data/data.h"
#include "worker/generation_trainer.h"
#include "worker/model/local_step.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"
#include "worker/ps/trainer.h"

namespace pstrain {

// Mode allreduce's GenerationTrainer.
class AllReduceTrainer : public GenerationTrainer {
 public:
  // Borrows `reducer`, `model` and `data`; they must outlive the trainer.
  // options.config gives workers, steps, batch, accumulation, evaluation,
  // the optimizer and worker.compute_ms / straggler settings. Starts from
  // the model's initial weights at step 0, or, when checkpoint.resume_from
  // is set, from that checkpoint (read here: its errors, e.g. a checkpoint
  // of another model, are returned and nothing starts) at
  // options.start_step, which must be the checkpoint's step.
  // INVALID_ARGUMENT for a bad optimizer.
  static absl::StatusOr<std::unique_ptr<AllReduceTrainer>> Create(
      TrainerOptions options, AllReducer* reducer, Model* model,
      DataSource* data, AllReduceCheckpointOptions checkpoint = {});

  // Runs the job for this rank from options.start_step, reporting like
  // Trainer::Run: one record per step (compute_s: gradient; pull_s: all-reduce
  // plus optimizer, i.e. gradient ready to next weights ready, the PS modes'
  // pull + push; push_s: 0; on rank 0, `checkpoint` names the checkpoint
  // written after the step), then a final evaluation record with step == steps.
  // A checkpoint that cannot be written fails the run. Closes the reducer after
  // the last step. `should_stop` (may be null) is polled between steps: true
  // ends the loop with CANCELLED.
  absl::Status Run(const StepCallback& on_step,
                   const std::function<bool()>& should_stop) override;

  // This replica's weights (the final ones after Run succeeds); a
  // row-sparse table's entry is empty (see rows()).
  const TensorList& params() const { return params_; }
  const TensorList& final_params() const override { return params_; }
  // The replicas of the row-sparse tables (empty() for a dense model).
  RowReplicas* rows() const { return rows_.get(); }

 private:
  AllReduceTrainer(TrainerOptions options, AllReducer* reducer, Model* model,
                   DataSource* data, std::unique_ptr<Optimizer> optimizer,
                   AllReduceCheckpointOptions checkpoint);

  // The gradient exchange and update of one step (dense tensors, and rows
  // when the model has row-sparse tables).
  absl::Status ExchangeAndApply(int64_t step, int64_t samples);

  // Rank 0: writes the checkpoint of cut `cut` from weights_ and slots_;
  // returns its directory ("" when it was already complete on disk).
  absl::StatusOr<std::string> SaveCheckpoint(uint64_t cut);

  // weights_ -= optimizer update with the mean gradient at `mean`
  // (num_dense_params floats, tensors back to back), at schedule step
  // `step`.
  void ApplyOptimizer(int64_t step, const float* mean);

  const TrainerOptions options_;
  AllReducer* const reducer_;
  Model* const model_;
  DataSource* const data_;
  const std::unique_ptr<Optimizer> optimizer_;
  const AllReduceCheckpointOptions checkpoint_;
  std::unique_ptr<RowReplicas> rows_;  // set by Create
  TensorList params_;  // initial, then final weights (Run copies them back)
  std::vector<std::vector<float>> slots_;  // per tensor, Optimizer layout
  // On the host, pinned on CUDA, during Run: the replica's weights
  // (num_params floats) and the reduced gradient (num_params + 1; not used
  // for a dense model on the CPU backend, reduced in the model's gradient).
  HostBuffer weights_, reduced_;
};

// Replaces `grads` on every rank by the sample-weighted mean over all ranks,
// sum_r n_r g_r / sum_r n_r (a sync shard's average), where this rank's
// gradient stands for n_r = `samples` > 0 examples. All-reduces the vector
// [g * n_r ..., n_r] in `scratch` (resized as needed), so one collective
// carries both sums. Every rank passes the same shapes; the results are
// bit-identical on every rank.
absl::Status AllReduceWeightedMean(AllReducer* reducer, uint64_t step,
                                   uint64_t samples, TensorList* grads,
                                   std::vector<float>* scratch);

// The same for the model's gradient where it lies (Model::gradient(), the
// mean gradient of this rank's `samples` > 0 examples): weighted by the
// sample count and, with the count in the spare float, summed over all
// ranks: on the device when `reducer` sums there, then downloaded into
// `host`; on a backend whose memory is the host's (the CPU backend) in the
// gradient itself; else in `host` after one download. Returns where the
// sample-weighted mean gradient then lies (tensors back to back, the total
// sample count last): `host` (num_dense_params + 1 floats, from the model's
// backend) or the model's gradient. With the CPU backend the numbers are
// those of the host version above, bit for bit.
absl::StatusOr<const float*> AllReduceWeightedMeanOfModel(AllReducer* reducer,
                                                          uint64_t step,
                                                          uint64_t samples,
                                                          Model* model,
                                                          HostBuffer* host);

// FNV-1a of every weight's bytes, in tensor order: replicas that agree bit
// for bit have equal fingerprints (logged by each worker at the end).
uint64_t ParamsFingerprint(const TensorList& params);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_ALLREDUCE_TRAINER_H_
