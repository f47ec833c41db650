// The worked example of our design notes, over real gRPC: one weight w = 2.0,
// per-example loss (w - t)^2, targets 1, 3, 5, 7; worker A gets 1 and 3,
// worker B gets 5 and 7; SGD lr 0.1; sync mode with 2 workers. The averaged
// gradient is -4 and both workers then pull w = 2.4.
#include <gtest/gtest.h>

#include <thread>

#include "common/job_config.h"
#include "tests/harness/test_cluster.h"
#include "worker/data/data.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"

namespace pstrain {
namespace {

JobConfig WorkedExampleConfig() {
  JobConfig c = DefaultJobConfig();
  c.mutable_job()->set_workers(2);
  c.mutable_job()->set_servers(1);
  c.mutable_training()->set_mode(v1::MODE_SYNC);
  c.mutable_training()->mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
  c.mutable_training()->mutable_optimizer()->set_base_lr(0.1);
  c.mutable_training()->set_local_batch(2);
  c.mutable_training()->set_steps(1);
  c.mutable_model()->set_type(ModelConfig::SCALAR);
  c.mutable_model()->set_num_classes(1);
  c.mutable_model()->set_classifier(false);
  c.mutable_model()->set_init_value(2.0f);
  c.mutable_data()->set_num_classes(1);
  SetList(c.mutable_data()->mutable_targets(), {1, 3, 5, 7});
  FinalizeJobConfig(&c);
  return c;
}

TEST(WorkedExampleTest, TwoWorkersAverageToMinusFourAndPull2Point4) {
  const JobConfig config = WorkedExampleConfig();
  auto cluster = TestCluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  // Each worker: pull, compute its local gradient, push; then pull step 1.
  double local_grad[2];
  double targets_seen[2][2];
  TensorList final_params[2];
  absl::Status status[2];
  auto worker = [&](int rank) {
    auto run = [&]() -> absl::Status {
      auto client = (*cluster)->NewClient({}, rank);
      if (!client.ok()) return client.status();
      auto model = Model::Create(config.model());
      auto data = DataSource::Create(config.data());
      if (!model.ok()) return model.status();
      if (!data.ok()) return data.status();
      TensorList params, grads;
      auto pull = (*client)->StartPull(rank, 0, &params);
      if (absl::Status s = pull->Wait(); !s.ok()) return s;
      if (params[0][0] != 2.0f)
        return absl::InternalError("initial w is not 2");
      auto batch = (*data)->TrainBatch(FirstExampleId(0, rank, 2, 2), 2);
      if (!batch.ok()) return batch.status();
      targets_seen[rank][0] = batch->y[0];
      targets_seen[rank][1] = batch->y[1];
      auto loss = (*model)->LossAndGradient(params, *batch, &grads);
      if (!loss.ok()) return loss.status();
      local_grad[rank] = grads[0][0];
      auto push = (*client)->StartPush(rank, 0, batch->n, grads, pull->reads());
      if (absl::Status s = push->Wait(); !s.ok()) return s;
      auto pull1 = (*client)->StartPull(rank, 1, &final_params[rank]);
      return pull1->Wait();
    };
    status[rank] = run();
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];

  EXPECT_EQ(targets_seen[0][0], 1);
  EXPECT_EQ(targets_seen[0][1], 3);
  EXPECT_EQ(targets_seen[1][0], 5);
  EXPECT_EQ(targets_seen[1][1], 7);
  EXPECT_DOUBLE_EQ(local_grad[0], 0.0);   // mean of 2 and -2
  EXPECT_DOUBLE_EQ(local_grad[1], -8.0);  // mean of -6 and -10
  // The server applied the average (0 + -8) / 2 = -4: w = 2 - 0.1 * -4.
  EXPECT_FLOAT_EQ(final_params[0][0][0], 2.4f);
  EXPECT_EQ(final_params[0][0][0], final_params[1][0][0]);
  EXPECT_FLOAT_EQ((2.0f - final_params[0][0][0]) / 0.1f, -4.0f);
  EXPECT_EQ((*cluster)->shard(0)->Stats().version(), 1u);
}

}  // namespace
}  // namespace pstrain
