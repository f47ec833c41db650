// Asynchronous mode loses no update under contention: 16 workers (threads,
// each with its own PsClient) push known integer gradients concurrently to a
// model spread over 3 shards, and the final weights are exactly the initial
// weights minus the sum of every gradient (SGD, lr 1; integers are exact in
// float).
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "common/sharding.h"
#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"
#include "tests/harness/test_cluster.h"
#include "worker/ps/ps_client.h"

namespace pstrain {
namespace {

using pstrain::v1::InitRule;
using pstrain::v1::JobSpec;
using pstrain::v1::OptimizerConfig;
using pstrain::v1::TensorSpec;

constexpr int kWorkers = 16;
constexpr int kPushes = 40;  // clocks per worker
constexpr int kServers = 3;
constexpr uint64_t kChunkElems = 64;

TensorSpec Spec(const std::string& name, std::vector<int64_t> shape,
                InitRule::Kind kind, float value) {
  TensorSpec spec;
  spec.set_name(name);
  for (int64_t d : shape) spec.add_shape(d);
  spec.set_dtype(pstrain::v1::DTYPE_F32);
  spec.mutable_init()->set_kind(kind);
  spec.mutable_init()->set_value(value);
  return spec;
}

// Gradient of worker r at clock c for element i of tensor t: a small integer
// in [-1, 3]. Every push has non-zero entries, so a lost push changes the
// result; the clock enters squared so the totals differ between elements.
float Grad(int r, int c, int t, int64_t i) {
  return static_cast<float>((r * 7 + c * c * 3 + t * 11 + i) % 5) - 1.0f;
}

TEST(NoLostUpdatesTest, ConcurrentAsyncPushesAllLand) {
  const std::vector<TensorSpec> tensors = {
      Spec("dense/weight", {40, 25}, InitRule::ZEROS, 0.0f),
      Spec("dense/bias", {37}, InitRule::CONSTANT, 3.0f),
      Spec("scale", {}, InitRule::CONSTANT, -1.5f),
  };
  absl::StatusOr<pstrain::v1::ShardMap> map =
      BuildShardMap(tensors, kServers, kChunkElems);
  ASSERT_TRUE(map.ok()) << map.status();

  JobSpec job;
  job.mutable_config()->mutable_job()->set_name("no-lost-updates");
  job.mutable_config()->mutable_training()->set_mode(pstrain::v1::MODE_ASYNC);
  job.mutable_config()->mutable_training()->set_staleness(
      -1);  // unbounded: pulls never block
  job.mutable_config()->mutable_job()->set_workers(kWorkers);
  job.set_num_servers(kServers);
  job.mutable_config()->mutable_training()->set_steps(kPushes);
  OptimizerConfig* opt =
      job.mutable_config()->mutable_training()->mutable_optimizer();
  opt->set_kind(OptimizerConfig::SGD);
  opt->set_base_lr(1.0);
  opt->set_schedule(OptimizerConfig::CONSTANT);
  *job.mutable_shard_map() = *map;

  absl::StatusOr<std::unique_ptr<TestCluster>> started =
      TestCluster::Start(job);
  ASSERT_TRUE(started.ok()) << started.status();
  TestCluster& cluster = **started;
  ASSERT_EQ(cluster.num_shards(), kServers);
  // The model really spans the 3 shards, several chunks each.
  for (int s = 0; s < kServers; ++s) {
    EXPECT_GE(cluster.shard(s)->chunks().size(), 3u) << "shard " << s;
  }

  PsClientOptions options;
  options.rpc_timeout = absl::Seconds(20);
  options.barrier_timeout = absl::Seconds(20);

  absl::Notification go;
  std::vector<absl::Status> statuses(kWorkers);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<PsClient>> client =
          cluster.NewClient(options, r);
      if (!client.ok()) {
        statuses[r] = client.status();
        return;
      }
      TensorList grads(tensors.size());
      for (size_t t = 0; t < tensors.size(); ++t) {
        grads[t].resize(NumElements(tensors[t]));
      }
      go.WaitForNotification();
      for (int c = 0; c < kPushes; ++c) {
        TensorList params;
        std::unique_ptr<PsOp> pull = (*client)->StartPull(r, c, &params);
        absl::Status s = pull->Wait();
        if (!s.ok()) {
          statuses[r] = absl::Status(
              s.code(), absl::StrCat("pull clock ", c, ": ", s.message()));
          return;
        }
        for (size_t t = 0; t < grads.size(); ++t) {
          for (size_t i = 0; i < grads[t].size(); ++i) {
            grads[t][i] = Grad(r, c, t, i);
          }
        }
        std::unique_ptr<PsOp> push =
            (*client)->StartPush(r, c, /*num_samples=*/1, grads, pull->reads());
        s = push->Wait();
        if (!s.ok()) {
          statuses[r] = absl::Status(
              s.code(), absl::StrCat("push clock ", c, ": ", s.message()));
          return;
        }
      }
    });
  }
  go.Notify();
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kWorkers; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "worker " << r << ": " << statuses[r];
  }

  // Every shard applied every push, one optimizer step each.
  for (int s = 0; s < kServers; ++s) {
    const pstrain::v1::ShardStats stats = cluster.shard(s)->Stats();
    EXPECT_EQ(stats.pushes(), static_cast<uint64_t>(kWorkers * kPushes))
        << "shard " << s;
    EXPECT_EQ(stats.version(), static_cast<uint64_t>(kWorkers * kPushes))
        << "shard " << s;
  }

  absl::StatusOr<std::unique_ptr<PsClient>> reader = cluster.NewClient(options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  TensorList final_params;
  std::unique_ptr<PsOp> pull =
      (*reader)->StartPull(/*worker=*/0, /*clock=*/kPushes, &final_params);
  ASSERT_TRUE(pull->Wait().ok());
  for (int s = 0; s < kServers; ++s) {
    EXPECT_EQ(pull->reads()[s].version,
              static_cast<uint64_t>(kWorkers * kPushes));
    EXPECT_EQ(pull->reads()[s].min_clock, static_cast<uint64_t>(kPushes));
  }

  ASSERT_EQ(final_params.size(), tensors.size());
  int64_t mismatches = 0, moved = 0, total = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const int64_t n = NumElements(tensors[t]);
    ASSERT_EQ(final_params[t].size(), static_cast<size_t>(n));
    std::vector<float> expected(n);
    InitialValues(tensors[t], 0, n, expected.data());
    for (int64_t i = 0; i < n; ++i) {
      int64_t sum = 0;  // exact, in integers
      for (int r = 0; r < kWorkers; ++r) {
        for (int c = 0; c < kPushes; ++c) {
          sum += static_cast<int64_t>(Grad(r, c, t, i));
        }
      }
      expected[i] -= static_cast<float>(sum);
      moved += sum != 0;
      ++total;
      if (final_params[t][i] != expected[i] && ++mismatches <= 10) {
        ADD_FAILURE() << tensors[t].name() << "[" << i << "]: got "
                      << final_params[t][i] << ", want " << expected[i];
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  // The check is not vacuous: every element moved away from its init.
  EXPECT_EQ(moved, total);
}

}  // namespace
}  // namespace pstrain
