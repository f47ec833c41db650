// Where the workers' examples come from. Examples are addressed by a global
// id, so the global batch of step t is the same whatever the number of
// workers: worker `rank` of `world` with local batch b at step t gets ids
// [t*world*b + rank*b, t*world*b + (rank+1)*b) (FirstExampleId).
#ifndef PSTRAIN_WORKER_DATA_H_
#define PSTRAIN_WORKER_DATA_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "worker/model.h"

namespace pstrain {

// A deterministic example source: every example is a pure function of
// (config, stream, id), so any worker can produce any id. Thread-compatible.
//
// "synthetic": standard-normal features and a random teacher fixed by
// config.seed (a linear map plus a small tanh network). Classification
// (num_classes >= 2): label = argmax of the teacher's logits, replaced by a
// uniformly random label with probability `noise`. Regression
// (num_classes == 1): target = teacher output + noise * N(0, 1).
// If config.targets is non-empty (the "scalar" model), examples have no
// features (dim 0) and example id has target targets[id % targets.size()].
class DataSource {
 public:
  // Invalid configs are INVALID_ARGUMENT naming the field (e.g. data.source).
  static absl::StatusOr<std::unique_ptr<DataSource>> Create(
      const DataConfig& config);
  virtual ~DataSource() = default;

  virtual int64_t num_features() const = 0;
  virtual int64_t num_classes() const = 0;  // 1 = regression

  // Training examples first_id .. first_id + n - 1 (n >= 0).
  virtual absl::StatusOr<Batch> TrainBatch(uint64_t first_id, int64_t n) = 0;

  // Held-out set: test ids [0, test_examples), drawn from a stream separate
  // from training. Worker `rank` of `world` gets the contiguous slice
  // [test_examples * rank / world, test_examples * (rank + 1) / world).
  virtual absl::StatusOr<Batch> TestSlice(int rank, int world) = 0;
};

// First global example id of worker `rank` at `step`: step*world*b + rank*b.
uint64_t FirstExampleId(uint64_t step, int rank, int world,
                        int64_t local_batch);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DATA_H_
