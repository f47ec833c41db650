// Stale-synchronous parallel (MODE_ASYNC with staleness s) over real gRPC:
// worker threads with their own clients train a real model against a
// two-shard in-process cluster, and no push may ever be more than s clocks
// stale; plus a deterministic check that a worker more than s clocks ahead
// blocks until the slowest one catches up.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"
#include "tests/harness/sanitizer.h"
#include "tests/harness/test_cluster.h"
#include "tests/harness/training_harness.h"
#include "worker/data/data.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"

namespace pstrain {
namespace {

constexpr int kWorkers = 4;
constexpr uint64_t kSteps = 30;
constexpr int64_t kLocalBatch = 8;

JobConfig SspConfig(int workers, int64_t staleness) {
  return SmallSoftmaxJob(pstrain::v1::MODE_ASYNC, staleness, workers,
                         kLocalBatch, kSteps);
}

uint64_t MinClock(const std::vector<ShardRead>& reads) {
  uint64_t m = UINT64_MAX;
  for (const ShardRead& r : reads) m = std::min(m, r.min_clock);
  return m;
}

struct WorkerResult {
  absl::Status status;
  uint64_t steps_done = 0;
  uint64_t max_client_staleness = 0;
  // Set when a pull's reads violated the bound (c - min_clock > s).
  std::string violation;
};

class SspTrainingTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(SspTrainingTest, StalenessStaysWithinBound) {
  const int64_t s = GetParam();
  const JobConfig config = SspConfig(kWorkers, s);
  absl::StatusOr<std::unique_ptr<TestCluster>> cluster =
      TestCluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_EQ((*cluster)->num_shards(), 2);

  PsClientOptions options;
  options.rpc_timeout = absl::Seconds(10);
  options.barrier_timeout = absl::Seconds(10);
  std::vector<WorkerResult> results(kWorkers);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorkers; ++rank) {
    threads.emplace_back([&, rank] {
      WorkerResult& out = results[rank];
      absl::StatusOr<std::unique_ptr<PsClient>> client =
          (*cluster)->NewClient(options, rank);
      if (!client.ok()) {
        out.status = client.status();
        return;
      }
      absl::StatusOr<Learner> learner = Learner::Create(config);
      if (!learner.ok()) {
        out.status = learner.status();
        return;
      }
      std::mt19937 rng(1234 + rank);
      std::uniform_int_distribution<int> delay_us(0, 3000);
      // Worker 3 is a straggler, about three times slower.
      const int slowdown = rank == kWorkers - 1 ? 3 : 1;
      TensorList params, grads;
      for (uint64_t c = 0; c < kSteps; ++c) {
        std::unique_ptr<PsOp> pull = (*client)->StartPull(rank, c, &params);
        out.status = pull->Wait();
        if (!out.status.ok()) {
          out.status = absl::Status(
              out.status.code(),
              absl::StrCat("pull clock ", c, ": ", out.status.message()));
          return;
        }
        const std::vector<ShardRead> reads = pull->reads();
        const uint64_t min_clock = MinClock(reads);
        if (min_clock > c) {
          out.violation = absl::StrCat("clock ", c, " read min_clock ",
                                       min_clock, " (ahead of itself)");
          return;
        }
        const uint64_t staleness = c - min_clock;
        out.max_client_staleness =
            std::max(out.max_client_staleness, staleness);
        if (s >= 0 && staleness > static_cast<uint64_t>(s) &&
            out.violation.empty()) {
          out.violation =
              absl::StrCat("clock ", c, " read min_clock ", min_clock,
                           ": staleness ", staleness, " > ", s);
        }
        out.status =
            learner->Gradient(params, c, rank, kWorkers, kLocalBatch, &grads);
        if (!out.status.ok()) return;
        std::this_thread::sleep_for(
            std::chrono::microseconds(slowdown * delay_us(rng)));
        std::unique_ptr<PsOp> push =
            (*client)->StartPush(rank, c, kLocalBatch, grads, reads);
        out.status = push->Wait();
        if (!out.status.ok()) {
          out.status = absl::Status(
              out.status.code(),
              absl::StrCat("push clock ", c, ": ", out.status.message()));
          return;
        }
        ++out.steps_done;
      }
    });
  }
  for (std::thread& t : threads) t.join();

  uint64_t client_max = 0;
  for (int rank = 0; rank < kWorkers; ++rank) {
    SCOPED_TRACE(absl::StrCat("worker ", rank));
    EXPECT_TRUE(results[rank].status.ok()) << results[rank].status;
    EXPECT_EQ(results[rank].violation, "");
    EXPECT_EQ(results[rank].steps_done, kSteps);
    client_max = std::max(client_max, results[rank].max_client_staleness);
  }
  if (s >= 1) {
    EXPECT_GE(client_max, 1u) << "the fast workers never ran ahead";
  } else {
    EXPECT_EQ(client_max, 0u);
  }

  for (int i = 0; i < (*cluster)->num_shards(); ++i) {
    const pstrain::v1::ShardStats stats = (*cluster)->shard(i)->Stats();
    SCOPED_TRACE(absl::StrCat("shard ", i, ": ", stats.ShortDebugString()));
    std::printf("s=%lld shard %d: %s\n", static_cast<long long>(s), i,
                stats.ShortDebugString().c_str());
    EXPECT_EQ(stats.pushes(), kWorkers * kSteps);
    EXPECT_EQ(stats.version(), kWorkers * kSteps);  // async: one per push
    EXPECT_LE(stats.staleness_max(), static_cast<uint64_t>(s));
    EXPECT_LE(static_cast<uint64_t>(stats.staleness_histogram_size()),
              static_cast<uint64_t>(s) + 1);
    if (s >= 1) {
      EXPECT_GE(stats.staleness_max(), 1u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Staleness, SspTrainingTest, ::testing::Values(0, 1, 3),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "S" + std::to_string(info.param);
                         });

// Pull then push `clock` for `worker` with the model's real gradient.
absl::Status Step(PsClient& client, Learner& learner, uint32_t worker,
                  uint64_t clock, int world) {
  TensorList params, grads;
  std::unique_ptr<PsOp> pull = client.StartPull(worker, clock, &params);
  absl::Status status = pull->Wait();
  if (!status.ok()) return status;
  status = learner.Gradient(params, clock, worker, world, kLocalBatch, &grads);
  if (!status.ok()) return status;
  return client.StartPush(worker, clock, kLocalBatch, grads, pull->reads())
      ->Wait();
}

TEST(SspBlockingTest, WorkerMoreThanSAheadBlocksUntilSlowestCatchesUp) {
  const JobConfig config = SspConfig(/*workers=*/2, /*staleness=*/1);
  absl::StatusOr<std::unique_ptr<TestCluster>> cluster =
      TestCluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  // A pull's gRPC deadline is barrier_timeout + rpc_timeout, so both are
  // short for the client whose pull must time out. The shard answers a tenth
  // of that (at most 1 s) before the deadline (common/grpc_util.h
  // ServerDeadline): 2 s leave 200 ms for the answer; under a sanitizer 10 s
  // leave 1 s.
  PsClientOptions short_options;
  short_options.barrier_timeout = absl::Seconds(kSanitizerSlowdown);
  short_options.rpc_timeout = absl::Seconds(kSanitizerSlowdown);
  PsClientOptions long_options;
  long_options.barrier_timeout = absl::Seconds(20);
  long_options.rpc_timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<PsClient>> fast =
      (*cluster)->NewClient(long_options);
  ASSERT_TRUE(fast.ok()) << fast.status();
  absl::StatusOr<std::unique_ptr<PsClient>> fast_short =
      (*cluster)->NewClient(short_options);
  ASSERT_TRUE(fast_short.ok()) << fast_short.status();
  absl::StatusOr<std::unique_ptr<PsClient>> slow =
      (*cluster)->NewClient(long_options, /*rank=*/1);
  ASSERT_TRUE(slow.ok()) << slow.status();
  absl::StatusOr<Learner> fast_learner = Learner::Create(config);
  ASSERT_TRUE(fast_learner.ok()) << fast_learner.status();
  absl::StatusOr<Learner> slow_learner = Learner::Create(config);
  ASSERT_TRUE(slow_learner.ok()) << slow_learner.status();

  // Worker 0 completes clocks 0 and 1 (within s = 1 of worker 1, at 0).
  for (uint64_t c = 0; c < 2; ++c) {
    ASSERT_TRUE(Step(**fast, *fast_learner, 0, c, 2).ok()) << "clock " << c;
  }

  // Clock 2 needs worker 1 to have pushed clock 0: the pull times out.
  {
    TensorList params;
    const absl::Time start = absl::Now();
    std::unique_ptr<PsOp> pull = (*fast_short)->StartPull(0, 2, &params);
    const absl::Status status = pull->Wait();
    const absl::Duration took = absl::Now() - start;
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    // The shard answers just before the client's deadline, naming who is
    // behind (worker 1 at clock 0).
    EXPECT_NE(status.message().find("1@0"), std::string::npos) << status;
    EXPECT_GE(took, absl::Milliseconds(150));
    EXPECT_LT(took, absl::Seconds(5 * kSanitizerSlowdown));
  }

  // Now block for real, and release the pull with worker 1's first step.
  std::atomic<bool> released{false};
  bool saw_released = false;
  absl::Status blocked_status = absl::UnknownError("not run");
  std::vector<ShardRead> blocked_reads;
  TensorList blocked_params;
  std::thread puller([&] {
    std::unique_ptr<PsOp> pull = (*fast)->StartPull(0, 2, &blocked_params);
    blocked_status = pull->Wait();
    saw_released = released.load();
    if (blocked_status.ok()) blocked_reads = pull->reads();
  });
  absl::SleepFor(absl::Milliseconds(200));  // let the pull reach the barrier
  released.store(true);
  ASSERT_TRUE(Step(**slow, *slow_learner, 1, 0, 2).ok());
  puller.join();

  ASSERT_TRUE(blocked_status.ok()) << blocked_status;
  EXPECT_TRUE(saw_released) << "the pull at clock 2 did not wait for worker 1";
  ASSERT_EQ(blocked_reads.size(), 2u);
  for (const ShardRead& r : blocked_reads) {
    EXPECT_EQ(r.min_clock, 1u);
    EXPECT_EQ(r.version, 3u);  // 2 pushes of worker 0, 1 of worker 1
  }

  // Worker 0's push of clock 2 is 1 clock stale, within the bound.
  TensorList grads;
  ASSERT_TRUE(
      fast_learner->Gradient(blocked_params, 2, 0, 2, kLocalBatch, &grads)
          .ok());
  ASSERT_TRUE(
      (*fast)->StartPush(0, 2, kLocalBatch, grads, blocked_reads)->Wait().ok());
  for (int i = 0; i < (*cluster)->num_shards(); ++i) {
    const pstrain::v1::ShardStats stats = (*cluster)->shard(i)->Stats();
    EXPECT_EQ(stats.pushes(), 4u);
    EXPECT_EQ(stats.staleness_max(), 1u);
    EXPECT_GT(stats.barrier_wait_s(), 0.0);
  }
}

}  // namespace
}  // namespace pstrain
