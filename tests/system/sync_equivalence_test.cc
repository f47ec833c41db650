// Synchronous (BSP) data parallelism is exact: N workers with local batch b
// train the same weights as one worker with batch N*b (and gradient
// accumulation splits a worker's slice without changing the result). Every
// run here is a real in-process cluster: shards behind gRPC servers on
// loopback, each worker a thread with its own Trainer, Model, DataSource and
// PsClient.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"
#include "tests/harness/test_cluster.h"
#include "tests/harness/training_harness.h"
#include "worker/data/data.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"
#include "worker/ps/trainer.h"

namespace pstrain {
namespace {

using pstrain::v1::OptimizerConfig;

constexpr int64_t kLocalBatch = 8;  // b
constexpr int64_t kSteps = 20;
constexpr double kTolerance = 1e-5;

struct OptimizerCase {
  std::string name;
  OptimizerConfig::Kind kind;
  double lr;
  bool nesterov;
};

// A small synthetic MLP classification job: 16 inputs, one hidden layer of
// 32, 4 classes; evaluation off (no test examples).
JobConfig MakeConfig(const OptimizerCase& opt, int workers, int servers,
                     int64_t local_batch, int64_t grad_accum_steps) {
  JobConfig config = DefaultJobConfig();
  config.mutable_job()->set_name("sync-equivalence");
  config.mutable_training()->set_mode(pstrain::v1::MODE_SYNC);
  config.mutable_training()->set_staleness(0);
  config.mutable_job()->set_workers(workers);
  config.mutable_job()->set_servers(servers);
  config.mutable_training()->set_local_batch(local_batch);
  config.mutable_training()->set_grad_accum_steps(grad_accum_steps);
  config.mutable_training()->set_steps(kSteps);
  config.mutable_training()->mutable_optimizer()->set_kind(opt.kind);
  config.mutable_training()->mutable_optimizer()->set_base_lr(opt.lr);
  config.mutable_training()->mutable_optimizer()->set_nesterov(opt.nesterov);
  config.mutable_model()->set_type(ModelConfig::MLP);
  config.mutable_model()->set_input_dim(16);
  SetList(config.mutable_model()->mutable_hidden(), {32});
  config.mutable_model()->set_num_classes(4);
  config.mutable_model()->set_activation(ModelConfig::RELU);
  config.mutable_model()->set_classifier(true);
  config.mutable_model()->set_seed(3);
  config.mutable_data()->set_source(DataConfig::SYNTHETIC);
  config.mutable_data()->set_num_features(16);
  config.mutable_data()->set_num_classes(4);
  config.mutable_data()->set_seed(11);
  config.mutable_data()->set_test_examples(0);
  config.mutable_evaluation()->set_every_steps(0);
  config.mutable_server()->set_chunk_bytes(
      256);  // 64 elements: several chunks per shard
  config.mutable_network()->set_rpc_timeout_s(10);
  config.mutable_network()->set_barrier_timeout_s(20);
  FinalizeJobConfig(&config);
  return config;
}

// All workers of a sync job read the same final weights, bit for bit.
void ExpectWorkersIdentical(const std::vector<TensorList>& finals) {
  ASSERT_FALSE(finals.empty());
  ASSERT_FALSE(finals[0].empty());
  for (size_t r = 1; r < finals.size(); ++r) {
    EXPECT_EQ(finals[r], finals[0])
        << "worker " << r << " differs from worker 0";
  }
}

class SyncEquivalenceTest : public ::testing::TestWithParam<OptimizerCase> {};

TEST_P(SyncEquivalenceTest, FourWorkersMatchOneWorkerWithFourTimesTheBatch) {
  const OptimizerCase& opt = GetParam();
  absl::StatusOr<std::vector<TensorList>> multi = RunParameterServerJob(
      MakeConfig(opt, /*workers=*/4, /*servers=*/2, kLocalBatch, 1));
  ASSERT_TRUE(multi.ok()) << multi.status();
  ASSERT_EQ(multi->size(), 4u);
  ExpectWorkersIdentical(*multi);

  // Training actually moved the weights (otherwise equality is vacuous).
  const TensorList init =
      *InitialParams(MakeConfig(opt, 4, 2, kLocalBatch, 1).model());
  EXPECT_GT(MaxAbsDiff((*multi)[0], init), 1e-3);

  for (int servers : {2, 1}) {
    SCOPED_TRACE(absl::StrCat("single worker on ", servers, " server(s)"));
    absl::StatusOr<std::vector<TensorList>> single = RunParameterServerJob(
        MakeConfig(opt, /*workers=*/1, servers, 4 * kLocalBatch, 1));
    ASSERT_TRUE(single.ok()) << single.status();
    ASSERT_EQ(single->size(), 1u);
    const double diff = MaxAbsDiff((*multi)[0], (*single)[0]);
    EXPECT_LE(diff, kTolerance);
    std::printf("[%s] 4x%lld vs 1x%lld on %d server(s): max |diff| = %.3g\n",
                opt.name.c_str(), static_cast<long long>(kLocalBatch),
                static_cast<long long>(4 * kLocalBatch), servers, diff);
  }
}

TEST_P(SyncEquivalenceTest, GradAccumulationMatchesLargerBatch) {
  const OptimizerCase& opt = GetParam();
  // 2 workers x b x accumulation 2  ==  1 worker x 4b.
  absl::StatusOr<std::vector<TensorList>> accum = RunParameterServerJob(
      MakeConfig(opt, /*workers=*/2, /*servers=*/2, kLocalBatch, 2));
  ASSERT_TRUE(accum.ok()) << accum.status();
  ASSERT_EQ(accum->size(), 2u);
  ExpectWorkersIdentical(*accum);
  absl::StatusOr<std::vector<TensorList>> single = RunParameterServerJob(
      MakeConfig(opt, /*workers=*/1, /*servers=*/2, 4 * kLocalBatch, 1));
  ASSERT_TRUE(single.ok()) << single.status();
  const double diff = MaxAbsDiff((*accum)[0], (*single)[0]);
  EXPECT_LE(diff, kTolerance);
  std::printf("[%s] 2x%lldx2 vs 1x%lld: max |diff| = %.3g\n", opt.name.c_str(),
              static_cast<long long>(kLocalBatch),
              static_cast<long long>(4 * kLocalBatch), diff);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, SyncEquivalenceTest,
    ::testing::Values(
        OptimizerCase{"sgd", OptimizerConfig::SGD, 0.1, false},
        OptimizerCase{"adam", OptimizerConfig::ADAM, 0.01, false},
        OptimizerCase{"nesterov", OptimizerConfig::MOMENTUM, 0.05, true},
        OptimizerCase{"adagrad", OptimizerConfig::ADAGRAD, 0.05, false}),
    [](const ::testing::TestParamInfo<OptimizerCase>& info) {
      return info.param.name;
    });

// Negative control: the comparison is sensitive. The same 4 x b job against
// one worker whose batch is only 2b (different examples per step) must not
// match.
TEST(SyncEquivalenceControlTest, DifferentGlobalBatchDiffers) {
  for (const OptimizerCase& opt :
       {OptimizerCase{"sgd", OptimizerConfig::SGD, 0.1, false},
        OptimizerCase{"adam", OptimizerConfig::ADAM, 0.01, false}}) {
    SCOPED_TRACE(opt.name);
    absl::StatusOr<std::vector<TensorList>> multi = RunParameterServerJob(
        MakeConfig(opt, /*workers=*/4, /*servers=*/2, kLocalBatch, 1));
    ASSERT_TRUE(multi.ok()) << multi.status();
    absl::StatusOr<std::vector<TensorList>> single = RunParameterServerJob(
        MakeConfig(opt, /*workers=*/1, /*servers=*/2, 2 * kLocalBatch, 1));
    ASSERT_TRUE(single.ok()) << single.status();
    const double diff = MaxAbsDiff((*multi)[0], (*single)[0]);
    EXPECT_GT(diff, 1e-4);
    std::printf("[%s] control 4x%lld vs 1x%lld: max |diff| = %.3g\n",
                opt.name.c_str(), static_cast<long long>(kLocalBatch),
                static_cast<long long>(2 * kLocalBatch), diff);
  }
}

// Runs `one` and `split` (the same job over more streams): every worker of
// `split` ends with the same weights, equal bit for bit to `one`'s, and
// training moved them.
void ExpectSplitTrainsTheSameWeights(const JobConfig& one,
                                     const JobConfig& split) {
  ASSERT_TRUE(ValidateJobConfig(split).ok()) << ValidateJobConfig(split);
  absl::StatusOr<std::vector<TensorList>> a = RunParameterServerJob(one);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<std::vector<TensorList>> b = RunParameterServerJob(split);
  ASSERT_TRUE(b.ok()) << b.status();
  ExpectWorkersIdentical(*b);
  EXPECT_EQ((*b)[0], (*a)[0]);
  EXPECT_GT(MaxAbsDiff((*b)[0], *InitialParams(one.model())), 1e-3);
}

// network.push_streams splits each shard's push over that many streams
// (connections) at once; the shards sum each chunk once and commit the
// push with its last chunk, so the weights are those of one stream per
// push, bit for bit, and every worker reads them.
TEST(SyncPushStreamsTest, SplitPushesTrainTheSameWeightsBitForBit) {
  const OptimizerCase opt{"adam", OptimizerConfig::ADAM, 0.01, false};
  JobConfig one = MakeConfig(opt, /*workers=*/3, /*servers=*/2, kLocalBatch, 1);
  one.mutable_network()->set_push_streams(1);
  JobConfig split = one;
  split.mutable_network()->set_push_streams(3);
  ASSERT_EQ(PushStreams(split), 3);
  ExpectSplitTrainsTheSameWeights(one, split);
}

// Pulls split over streams (network.pull_streams; each part reads the
// weights on its own) train the same weights as single-stream pulls.
TEST(SyncPushStreamsTest, SplitPullsTrainTheSameWeightsBitForBit) {
  const OptimizerCase opt{"adam", OptimizerConfig::ADAM, 0.01, false};
  JobConfig one = MakeConfig(opt, /*workers=*/3, /*servers=*/2, kLocalBatch, 1);
  JobConfig split = one;
  split.mutable_network()->set_pull_streams(3);
  ASSERT_EQ(PullStreams(split), 3);
  ExpectSplitTrainsTheSameWeights(one, split);
}

}  // namespace
}  // namespace pstrain
