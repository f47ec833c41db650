// Helpers shared by the equivalence tests: run whole jobs in one process
// (workers as threads, shards behind real gRPC on loopback) and compare
// weights.
#ifndef PSTRAIN_TESTS_HARNESS_TRAINING_HARNESS_H_
#define PSTRAIN_TESTS_HARNESS_TRAINING_HARNESS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "worker/data/data.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"

namespace pstrain {

// A softmax regression 16 -> 4 (68 parameters) in 16-element chunks over two
// shards, base_lr 0.1: `workers` workers of local batch `local_batch` for
// `steps` steps in `mode` with training.staleness `staleness`. Finalized.
JobConfig SmallSoftmaxJob(pstrain::v1::ConsistencyMode mode, int64_t staleness,
                          int workers, int64_t local_batch, uint64_t steps);

// Runs `body(rank)` on one thread per rank and joins them; returns the first
// error, prefixed with its rank.
absl::Status OnThreads(int n, const std::function<absl::Status(int)>& body);

// A parameter-server job (config.training().mode() sync or async) on a
// TestCluster with config.job().workers() Trainer threads, each pushing over
// PushStreams(config) streams per shard as workers do; the final weights
// each worker pulled.
absl::StatusOr<std::vector<TensorList>> RunParameterServerJob(
    const JobConfig& config);

// One worker's own model and data, for tests that drive pulls and pushes by
// hand. Thread-compatible.
class Learner {
 public:
  static absl::StatusOr<Learner> Create(const JobConfig& config);

  // Gradient of worker `rank`'s `local_batch` examples of `step` among
  // `world` workers (FirstExampleId); INTERNAL when the loss is not finite.
  absl::Status Gradient(const TensorList& params, uint64_t step, int rank,
                        int world, int64_t local_batch, TensorList* grads);

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<DataSource> data_;
};

// Largest element-wise |a - b|; +inf when the shapes differ.
double MaxAbsDiff(const TensorList& a, const TensorList& b);

// The initial weights of `model` (what every shard starts from).
absl::StatusOr<TensorList> InitialParams(const ModelConfig& model);

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_HARNESS_TRAINING_HARNESS_H_
