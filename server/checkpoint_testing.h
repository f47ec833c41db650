// Test support for checkpoints: a small model spread over K in-process
// shards, training driven by hand with gradients that depend only on
// (tensor, element, worker, clock), so runs with different shard layouts
// see the same updates; and the whole model's state gathered by tensor.
#ifndef PSTRAIN_SERVER_CHECKPOINT_TESTING_H_
#define PSTRAIN_SERVER_CHECKPOINT_TESTING_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "proto/pstrain.pb.h"
#include "server/shard.h"

namespace pstrain {

struct TestJob {
  pstrain::v1::OptimizerConfig optimizer;
  bool sync = true;
  uint32_t num_workers = 0;
  pstrain::v1::ShardMap map;
  std::vector<ShardOptions> options;  // per shard
  std::vector<std::unique_ptr<Shard>> shards;
};

// "layer0/weight" [7, 5] (uniform), "layer0/bias" [5] (zeros),
// "layer1/weight" [5, 3] (normal): 55 elements.
std::vector<pstrain::v1::TensorSpec> TestTensors();

// A job of `num_shards` shards cutting tensors into `chunk_elems`-element
// chunks, optimizer `kind` (lr 0.05, weight decay 0.01, step schedule).
absl::StatusOr<TestJob> MakeTestJob(pstrain::v1::OptimizerConfig::Kind kind,
                                    bool sync, uint32_t num_workers,
                                    uint32_t num_shards, uint64_t chunk_elems);

// In [-1, 1], times 1e-6 for "layer1/weight".
float TestGradient(const std::string& tensor, uint64_t element, uint32_t worker,
                   uint64_t clock);

// Worker `worker` pushes its clock-`clock` gradient to every shard (read at
// min clock `clock`: staleness 0).
absl::Status PushToAll(TestJob& job, uint32_t worker, uint64_t clock);
// Every worker pushes clocks [from, to) in lock-step.
absl::Status RunSteps(TestJob& job, uint64_t from, uint64_t to);

// The whole model's state, by tensor: weights, slots (slot-major over the
// tensor), and per shard (version, clocks), from Shard::Snapshot().
struct FullState {
  std::map<std::string, std::vector<float>> weights;
  std::map<std::string, std::vector<float>> slots;
  std::vector<uint64_t> versions;
  std::vector<std::vector<uint64_t>> clocks;
};
absl::StatusOr<FullState> Gather(const TestJob& job);

// Every shard's Snapshot(), by shard.
absl::StatusOr<std::vector<ShardState>> SnapshotAll(const TestJob& job);
// The manifest of `job` at cut `step` (files empty).
CheckpointManifest TestManifest(const TestJob& job, uint64_t step);
// Restores every shard of `job` from the checkpoint in `dir`
// (CheckpointReader::RestoreShard).
absl::Status RestoreAll(CheckpointEnv* env, const std::string& dir,
                        TestJob& job);

// Whether two float vectors are equal bit for bit.
bool BitEqual(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHECKPOINT_TESTING_H_
