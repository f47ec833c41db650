// The work every training mode does on its own rank, whatever moves the
// gradients afterwards (parameter servers or a ring): the gradient of this
// rank's slice of the global batch, and evaluation of its slice of the test
// set. Shared by Trainer and AllReduceTrainer so the modes compute the same
// thing.
#ifndef PSTRAIN_WORKER_MODEL_LOCAL_STEP_H_
#define PSTRAIN_WORKER_MODEL_LOCAL_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "proto/pstrain.pb.h"
#include "worker/data/data.h"
#include "worker/model/model.h"

namespace pstrain {

using TensorList = std::vector<std::vector<float>>;

// Thread-compatible. Borrows `model` and `data`, which must outlive it.
class LocalStep {
 public:
  LocalStep(const JobConfig& config, uint32_t rank, Model* model,
            DataSource* data)
      : config_(config), rank_(rank), model_(model), data_(data) {}

  // Examples behind one gradient: local_batch x grad_accum_steps.
  int64_t slice() const {
    return config_.training().local_batch() *
           config_.training().grad_accum_steps();
  }

  // Gradient of the mean loss over this rank's slice of step `step` (ids
  // FirstExampleId(step, rank, workers, slice())) at the model's resident
  // parameters (Model::SetParams), accumulated over grad_accum_steps
  // micro-batches on the model's backend into model->gradient(): the first
  // micro-batch's gradient, plus each later one (ComputeBackend::Add), then
  // times 1 / grad_accum_steps (ComputeBackend::Scale) when that is > 1.
  // Only the micro-batches cross to the backend. Returns the summed loss
  // (mean loss x slice()). Then, when `stretch`, waits as worker.compute_ms
  // and the straggler models say (worker/model/straggler_model.h) (emulated
  // compute; the math always runs); a caller that emulates the time itself,
  // spread over the layers (Trainer with worker.overlap), passes false and uses
  // EmulatedCompute(). Row-sparse tensors (Model::row_gradient) are accumulated
  // the same way: the union of the micro-batches' rows, a row in several
  // summed, then scaled.
  absl::StatusOr<double> Gradient(int64_t step, bool stretch = true);

  // Row-sparse params()[tensor] (docs/sparse.md): the sorted unique rows
  // that Gradient(step) reads, the union of Model::RowIds over its
  // micro-batches; and those that Evaluate reads (empty for an empty test
  // slice). INVALID_ARGUMENT for a tensor that is not row-sparse.
  absl::StatusOr<std::vector<int64_t>> StepRowIds(int64_t step, int tensor);
  absl::StatusOr<std::vector<int64_t>> TestRowIds(int tensor);

  // What worker.compute_ms asks of this rank's step `step`: compute_ms,
  // times the straggler models' factor, plus a pause
  // (worker/model/straggler_model.h); zero when compute_ms is 0.
  absl::Duration EmulatedCompute(int64_t step) const;

  // Evaluates the model's resident parameters on this rank's slice of the
  // test set into m's eval fields (nothing when the slice is empty).
  // With `whole`: on the whole test set (training.clock model, where one
  // worker's evaluation stands for the model).
  absl::Status Evaluate(pstrain::v1::StepMetrics* m, bool whole = false);

 private:
  void StretchCompute(absl::Time start, int64_t step) const;

  const JobConfig& config_;
  const uint32_t rank_;
  Model* const model_;
  DataSource* const data_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODEL_LOCAL_STEP_H_
