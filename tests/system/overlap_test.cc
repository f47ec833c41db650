// worker.overlap (worker/ps/trainer.h) changes when chunks travel, never
// what they carry: a sync job with emulated compute ends with bit-identical
// weights with and without overlap, on every worker. Real in-process
// cluster: shards behind gRPC on loopback, workers as Trainer threads.
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"
#include "tests/harness/training_harness.h"

namespace pstrain {
namespace {

// MLP 16-32-24-4 (six tensors), momentum, small chunks so that every shard
// holds pieces of several layers and a push waits for several gates.
JobConfig MakeConfig(bool overlap, int64_t steps) {
  JobConfig config = DefaultJobConfig();
  config.mutable_job()->set_name("overlap");
  config.mutable_training()->set_mode(pstrain::v1::MODE_SYNC);
  config.mutable_job()->set_workers(3);
  config.mutable_job()->set_servers(2);
  config.mutable_training()->set_local_batch(8);
  config.mutable_training()->set_steps(steps);
  config.mutable_training()->mutable_optimizer()->set_kind(
      pstrain::v1::OptimizerConfig::MOMENTUM);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.05);
  config.mutable_model()->set_type(ModelConfig::MLP);
  config.mutable_model()->set_input_dim(16);
  SetList(config.mutable_model()->mutable_hidden(), {32, 24});
  config.mutable_model()->set_num_classes(4);
  config.mutable_model()->set_classifier(true);
  config.mutable_data()->set_source(DataConfig::SYNTHETIC);
  config.mutable_data()->set_num_features(16);
  config.mutable_data()->set_num_classes(4);
  config.mutable_data()->set_test_examples(0);
  config.mutable_evaluation()->set_every_steps(0);
  config.mutable_server()->set_chunk_bytes(256);
  config.mutable_worker()->set_compute_ms(6);
  config.mutable_worker()->set_overlap(overlap);
  config.mutable_network()->set_rpc_timeout_s(10);
  config.mutable_network()->set_barrier_timeout_s(20);
  FinalizeJobConfig(&config);
  return config;
}

TEST(OverlapTest, SyncWeightsAreBitIdenticalWithAndWithoutOverlap) {
  constexpr int64_t kSteps = 12;
  absl::StatusOr<std::vector<TensorList>> plain =
      RunParameterServerJob(MakeConfig(false, kSteps));
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<std::vector<TensorList>> overlapped =
      RunParameterServerJob(MakeConfig(true, kSteps));
  ASSERT_TRUE(overlapped.ok()) << overlapped.status();
  ASSERT_EQ(plain->size(), overlapped->size());
  absl::StatusOr<TensorList> initial =
      InitialParams(MakeConfig(false, kSteps).model());
  ASSERT_TRUE(initial.ok()) << initial.status();
  EXPECT_GT(MaxAbsDiff((*plain)[0], *initial), 0) << "training moved nothing";
  for (size_t r = 0; r < plain->size(); ++r) {
    ASSERT_EQ((*plain)[r].size(), 6u);
    EXPECT_EQ((*overlapped)[r], (*plain)[0]) << "worker " << r;
  }
}

}  // namespace
}  // namespace pstrain
