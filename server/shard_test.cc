// Unit tests of Shard, called directly (no gRPC): the BSP step, the weighted
// average, blocking pulls, SSP gating, rejected pushes, Close() and Stats();
// and the optional rules: backup workers (sync), the staleness-aware
// learning rate and DC-ASGD delay compensation (async).
#include "server/shard.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "common/tensor_codec.h"
#include "coordinator/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"
#include "server/chunk_fingerprint.h"

namespace pstrain {
namespace {

using pstrain::v1::ChunkData;
using pstrain::v1::PushHeader;
using ::testing::HasSubstr;
using ::testing::Not;

// A short deadline for pulls that are expected to block.
constexpr absl::Duration kShortWait = absl::Milliseconds(50);
// A deadline for pulls that are expected to complete (generous, never hit).
constexpr absl::Duration kLongWait = absl::Seconds(20);

// softmax 8 -> 3: "softmax/weight" (24 elements) and "softmax/bias" (3).
// With 64-byte chunks (16 elements) the shard holds three chunks: 16 + 8 of
// the weight and the bias.
JobConfig SmallConfig(pstrain::v1::ConsistencyMode mode, int workers,
                      int64_t staleness) {
  JobConfig config = DefaultJobConfig();
  config.mutable_job()->set_workers(workers);
  config.mutable_job()->set_servers(1);
  config.mutable_training()->set_mode(mode);
  config.mutable_training()->set_staleness(staleness);
  config.mutable_model()->set_type(ModelConfig::SOFTMAX);
  config.mutable_model()->set_input_dim(8);
  config.mutable_model()->set_num_classes(3);
  config.mutable_model()->clear_hidden();
  config.mutable_data()->set_num_features(8);
  config.mutable_data()->set_num_classes(3);
  config.mutable_server()->set_chunk_bytes(64);
  config.mutable_training()->set_steps(1000);
  config.mutable_training()->mutable_optimizer()->set_base_lr(
      1.0);  // SGD: w_new = w - g exactly
  FinalizeJobConfig(&config);
  return config;
}

std::unique_ptr<Shard> MakeShard(const JobConfig& config) {
  absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(config);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<Shard>> shard =
      Shard::Create(ShardOptionsFromJob(*job, 0));
  EXPECT_TRUE(shard.ok()) << shard.status();
  if (!shard.ok()) return nullptr;
  return *std::move(shard);
}

// Pushes `grad` (in the shard's flat layout) for every chunk of the shard.
absl::StatusOr<PushResult> PushGrad(
    Shard& shard, uint32_t worker, uint64_t clock, uint64_t read_min_clock,
    uint64_t num_samples, const std::vector<float>& grad,
    pstrain::v1::DType dtype = pstrain::v1::DTYPE_F32) {
  EXPECT_EQ(grad.size(), shard.num_elements());
  std::vector<ChunkData> data(shard.chunks().size());
  std::vector<const ChunkData*> ptrs;
  for (size_t i = 0; i < shard.chunks().size(); ++i) {
    const LocalChunk& lc = shard.chunks()[i];
    EncodeChunk(lc.tensor, lc.index, grad.data() + lc.local_offset, lc.length,
                &data[i], dtype);
    ptrs.push_back(&data[i]);
  }
  PushHeader header;
  header.set_worker(worker);
  header.set_clock(clock);
  header.set_read_version(0);
  header.set_read_min_clock(read_min_clock);
  header.set_num_samples(num_samples);
  return shard.Push(header, ptrs);
}

// A gradient whose every element is `value`.
std::vector<float> Constant(const Shard& shard, float value) {
  return std::vector<float>(shard.num_elements(), value);
}

// Current weights, read by a pull at clock 0 (never blocks).
std::vector<float> Weights(Shard& shard, uint32_t worker = 0) {
  absl::StatusOr<PullResult> r = shard.Pull(worker, 0, absl::Now() + kLongWait);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->values : std::vector<float>();
}

TEST(ShardTest, LayoutHasSeveralChunks) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_SYNC, 2, 0));
  ASSERT_NE(shard, nullptr);
  EXPECT_EQ(shard->num_elements(), 27u);
  EXPECT_EQ(shard->chunks().size(), 3u);
}

TEST(ShardTest, SyncStepCompletesOnlyWhenEveryWorkerPushed) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_SYNC, 3, 0));
  ASSERT_NE(shard, nullptr);
  const std::vector<float> w0 = Weights(*shard);

  for (uint32_t worker : {2u, 0u}) {
    absl::StatusOr<PushResult> r =
        PushGrad(*shard, worker, 0, 0, 8, Constant(*shard, 0.5f));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->applied);
    EXPECT_EQ(r->version, 0u);
    EXPECT_EQ(shard->Stats().version(), 0u);
    EXPECT_EQ(Weights(*shard, 1), w0) << "weights moved before the barrier";
  }
  absl::StatusOr<PushResult> last =
      PushGrad(*shard, 1, 0, 0, 8, Constant(*shard, 0.5f));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_TRUE(last->applied);
  EXPECT_EQ(last->version, 1u);
  EXPECT_EQ(last->staleness, 0u);

  const std::vector<float> w1 = Weights(*shard);
  ASSERT_EQ(w1.size(), w0.size());
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_EQ(w1[i], w0[i] - 0.5f) << i;

  const pstrain::v1::ShardStats stats = shard->Stats();
  EXPECT_EQ(stats.version(), 1u);
  EXPECT_EQ(stats.pushes(), 3u);
  EXPECT_EQ(stats.staleness_max(), 0u);
}

TEST(ShardTest, SyncAveragesWeightedBySampleCount) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_SYNC, 3, 0));
  ASSERT_NE(shard, nullptr);
  const std::vector<float> w0 = Weights(*shard);
  const size_t n = shard->num_elements();

  // Sample counts 1, 3, 4 (weights 1/8, 3/8, 1/2) and small dyadic gradients:
  // every intermediate is exact in float and double.
  const uint64_t samples[3] = {1, 3, 4};
  std::vector<std::vector<float>> grads(3, std::vector<float>(n));
  for (size_t i = 0; i < n; ++i) {
    grads[0][i] = static_cast<float>(i % 5) - 2.0f;
    grads[1][i] = 0.25f * static_cast<float>(i % 7);
    grads[2][i] = -1.5f + static_cast<float>(i % 3);
  }
  std::vector<float> expected(n), unweighted(n);
  for (size_t i = 0; i < n; ++i) {
    double num = 0, den = 0;
    for (int r = 0; r < 3; ++r) {
      num += static_cast<double>(samples[r]) * grads[r][i];
      den += static_cast<double>(samples[r]);
    }
    expected[i] = w0[i] - static_cast<float>(num / den);
    unweighted[i] = w0[i] - (grads[0][i] + grads[1][i] + grads[2][i]) / 3.0f;
  }
  ASSERT_NE(expected, unweighted) << "test data cannot tell the averages apart";

  // Arrival order differs from rank order.
  for (uint32_t worker : {2u, 0u, 1u}) {
    absl::StatusOr<PushResult> r =
        PushGrad(*shard, worker, 0, 0, samples[worker], grads[worker]);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  EXPECT_EQ(Weights(*shard), expected);
}

TEST(ShardTest, SyncPullBlocksUntilStepCompletes) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_SYNC, 2, 0));
  ASSERT_NE(shard, nullptr);
  const std::vector<float> w0 = Weights(*shard);
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 4, Constant(*shard, 1.0f)).ok());

  // Worker 0 wants clock 1; worker 1 has not pushed clock 0 yet.
  absl::StatusOr<PullResult> early =
      shard->Pull(0, 1, absl::Now() + kShortWait);
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(early.status().message(), HasSubstr("1@0"));
  EXPECT_THAT(early.status().message(), Not(HasSubstr("0@")));
  EXPECT_GT(shard->Stats().barrier_wait_s(), 0.0);

  std::atomic<bool> released{false};
  bool saw_released = false;
  absl::StatusOr<PullResult> late = absl::UnknownError("not run");
  std::thread puller([&] {
    late = shard->Pull(0, 1, absl::Now() + kLongWait);
    saw_released = released.load();
  });
  absl::SleepFor(absl::Milliseconds(50));  // let the pull block
  released.store(true);
  ASSERT_TRUE(PushGrad(*shard, 1, 0, 0, 4, Constant(*shard, 1.0f)).ok());
  puller.join();

  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(saw_released) << "the pull returned before the step completed";
  EXPECT_EQ(late->version, 1u);
  EXPECT_EQ(late->min_clock, 1u);
  ASSERT_EQ(late->values.size(), w0.size());
  for (size_t i = 0; i < w0.size(); ++i) {
    EXPECT_EQ(late->values[i], w0[i] - 1.0f) << i;
  }
}

TEST(ShardTest, AsyncReadsItsOwnWrites) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_ASYNC, 2, 2));
  ASSERT_NE(shard, nullptr);
  const std::vector<float> w0 = Weights(*shard);

  absl::StatusOr<PushResult> r =
      PushGrad(*shard, 0, 0, 0, 4, Constant(*shard, 0.25f));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(r->version, 1u);

  // Worker 0's next pull (clock 1) sees its own update, without waiting for
  // worker 1.
  absl::StatusOr<PullResult> mine = shard->Pull(0, 1, absl::Now() + kShortWait);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->version, 1u);
  EXPECT_EQ(mine->min_clock, 0u);
  ASSERT_EQ(mine->values.size(), w0.size());
  for (size_t i = 0; i < w0.size(); ++i) {
    EXPECT_EQ(mine->values[i], w0[i] - 0.25f) << i;
  }
  // The update is applied on arrival: another worker sees it too.
  EXPECT_EQ(Weights(*shard, 1), mine->values);

  // A second push is applied on top, at once.
  ASSERT_TRUE(PushGrad(*shard, 0, 1, 0, 4, Constant(*shard, 0.25f)).ok());
  absl::StatusOr<PullResult> again =
      shard->Pull(0, 2, absl::Now() + kShortWait);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->version, 2u);
  for (size_t i = 0; i < w0.size(); ++i) {
    EXPECT_EQ(again->values[i], (w0[i] - 0.25f) - 0.25f) << i;
  }
}

class SspGatingTest : public ::testing::TestWithParam<int64_t> {};

// Worker 0 runs ahead while worker 1 never pushes: worker 0's pull at clock
// c is allowed iff s < 0 or c <= s (the slowest worker, at clock 0, must have
// pushed c - s clocks). Then worker 1 pushes once and the blocked pull passes.
TEST_P(SspGatingTest, PullAllowedOnlyWithinStaleness) {
  const int64_t s = GetParam();
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_ASYNC, 2, s));
  ASSERT_NE(shard, nullptr);

  constexpr uint64_t kClocks = 5;
  uint64_t blocked_at = kClocks;
  for (uint64_t c = 0; c < kClocks; ++c) {
    const bool allowed = s < 0 || c <= static_cast<uint64_t>(s);
    absl::StatusOr<PullResult> r = shard->Pull(0, c, absl::Now() + kShortWait);
    if (!allowed) {
      ASSERT_FALSE(r.ok()) << "s=" << s << " clock " << c;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
      EXPECT_THAT(r.status().message(), HasSubstr("1@0"));
      blocked_at = c;
      break;
    }
    ASSERT_TRUE(r.ok()) << "s=" << s << " clock " << c << ": " << r.status();
    EXPECT_EQ(r->min_clock, 0u);
    EXPECT_EQ(r->version, c);
    absl::StatusOr<PushResult> p =
        PushGrad(*shard, 0, c, r->min_clock, 2, Constant(*shard, 0.125f));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->staleness, c);
  }
  if (s < 0) {
    EXPECT_EQ(blocked_at, kClocks) << "unbounded staleness never blocks";
    EXPECT_EQ(shard->Stats().staleness_max(), kClocks - 1);
    return;
  }
  ASSERT_EQ(blocked_at, static_cast<uint64_t>(s) + 1);
  EXPECT_EQ(shard->Stats().staleness_max(), static_cast<uint64_t>(s));

  // Worker 1 completes clock 0: worker 0 may now read clock s + 1, and no
  // further.
  ASSERT_TRUE(PushGrad(*shard, 1, 0, 0, 2, Constant(*shard, 0.125f)).ok());
  absl::StatusOr<PullResult> r =
      shard->Pull(0, blocked_at, absl::Now() + kShortWait);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->min_clock, 1u);
  EXPECT_EQ(r->version, blocked_at + 1);
  ASSERT_TRUE(
      PushGrad(*shard, 0, blocked_at, r->min_clock, 2, Constant(*shard, 0.f))
          .ok());
  absl::StatusOr<PullResult> next =
      shard->Pull(0, blocked_at + 1, absl::Now() + kShortWait);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(next.status().message(), HasSubstr("1@1"));
}

// training.clock model: once N x steps pushes are in, a pull is served at
// once whatever the slowest clock (the straggler whose clock it waits for has
// seen the model done and stopped), and each push's schedule step is the
// model step. Worker 1 pushes once; worker 0 pushes clocks 0-2, the last of
// which is the 4th push (2 workers x 2 steps); its pull at clock 3 needs
// worker 1 at clock 2 under s = 1, but the model is done.
TEST(SspModelClockTest, ModelClockReleasesHeldReadsWhenTheModelIsDone) {
  for (bool model_clock : {false, true}) {
    JobConfig config = SmallConfig(pstrain::v1::MODE_ASYNC, 2, 1);
    config.mutable_training()->set_steps(2);
    if (model_clock) {
      config.mutable_training()->set_clock(
          pstrain::v1::TrainingConfig::CLOCK_MODEL);
    }
    FinalizeJobConfig(&config);
    std::unique_ptr<Shard> shard = MakeShard(config);
    ASSERT_NE(shard, nullptr);
    ASSERT_TRUE(PushGrad(*shard, 1, 0, 0, 2, Constant(*shard, 0.125f)).ok());
    for (uint64_t c = 0; c < 3; ++c) {
      absl::StatusOr<PullResult> r =
          shard->Pull(0, c, absl::Now() + kShortWait);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(
          PushGrad(*shard, 0, c, r->min_clock, 2, Constant(*shard, 0.125f))
              .ok());
    }
    absl::StatusOr<PullResult> last =
        shard->Pull(0, 3, absl::Now() + kShortWait);
    if (model_clock) {
      ASSERT_TRUE(last.ok()) << last.status();
      EXPECT_EQ(last->version, 4u);
    } else {
      EXPECT_EQ(last.status().code(), absl::StatusCode::kDeadlineExceeded);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Staleness, SspGatingTest, ::testing::Values(0, 1, -1),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return info.param < 0
                                      ? std::string("Unbounded")
                                      : "S" + std::to_string(info.param);
                         });

TEST(ShardTest, PushWithWrongClockIsRejectedAndChangesNothing) {
  for (auto mode : {pstrain::v1::MODE_SYNC, pstrain::v1::MODE_ASYNC}) {
    SCOPED_TRACE(pstrain::v1::ConsistencyMode_Name(mode));
    std::unique_ptr<Shard> shard = MakeShard(SmallConfig(mode, 2, 1));
    ASSERT_NE(shard, nullptr);
    const std::vector<float> w0 = Weights(*shard);

    // Ahead of the worker's next clock.
    absl::StatusOr<PushResult> ahead =
        PushGrad(*shard, 0, 1, 0, 4, Constant(*shard, 3.0f));
    ASSERT_FALSE(ahead.ok());
    EXPECT_EQ(ahead.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(Weights(*shard), w0);
    EXPECT_EQ(shard->Stats().pushes(), 0u);
    EXPECT_EQ(shard->Stats().version(), 0u);

    // A good push, then a replay of the same clock with another gradient.
    ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 4, Constant(*shard, 1.0f)).ok());
    const std::vector<float> w_after = Weights(*shard);
    const uint64_t version_after = shard->Stats().version();
    absl::StatusOr<PushResult> replay =
        PushGrad(*shard, 0, 0, 0, 4, Constant(*shard, 7.0f));
    ASSERT_FALSE(replay.ok());
    EXPECT_EQ(replay.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(Weights(*shard), w_after);
    EXPECT_EQ(shard->Stats().version(), version_after);
    EXPECT_EQ(shard->Stats().pushes(), 1u);

    // Worker 1 completes the step (sync) or its own clock (async). The
    // rejected gradient must not have leaked into the update.
    ASSERT_TRUE(PushGrad(*shard, 1, 0, 0, 4, Constant(*shard, 1.0f)).ok());
    const std::vector<float> w2 = Weights(*shard);
    ASSERT_EQ(w2.size(), w0.size());
    for (size_t i = 0; i < w0.size(); ++i) {
      if (mode == pstrain::v1::MODE_SYNC) {
        EXPECT_EQ(w2[i], w0[i] - 1.0f) << i;
      } else {
        EXPECT_EQ(w2[i], (w0[i] - 1.0f) - 1.0f) << i;
      }
    }
    EXPECT_EQ(shard->Stats().pushes(), 2u);
  }
}

TEST(ShardTest, PullAheadOfOwnClockIsRejected) {
  for (auto mode : {pstrain::v1::MODE_SYNC, pstrain::v1::MODE_ASYNC}) {
    SCOPED_TRACE(pstrain::v1::ConsistencyMode_Name(mode));
    std::unique_ptr<Shard> shard = MakeShard(SmallConfig(mode, 2, -1));
    ASSERT_NE(shard, nullptr);
    const absl::Time start = absl::Now();
    absl::StatusOr<PullResult> r = shard->Pull(0, 1, absl::Now() + kLongWait);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "must not wait";

    ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 1, Constant(*shard, 0.f)).ok());
    absl::StatusOr<PullResult> two = shard->Pull(0, 2, absl::Now() + kLongWait);
    ASSERT_FALSE(two.ok());
    EXPECT_EQ(two.status().code(), absl::StatusCode::kFailedPrecondition);
    // Worker 1 has pushed nothing: clock 1 is ahead of it as well.
    absl::StatusOr<PullResult> other =
        shard->Pull(1, 1, absl::Now() + kLongWait);
    ASSERT_FALSE(other.ok());
    EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST(ShardTest, CloseReleasesBlockedPull) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_SYNC, 2, 0));
  ASSERT_NE(shard, nullptr);
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 1, Constant(*shard, 1.0f)).ok());

  std::atomic<bool> closed{false};
  bool saw_closed = false;
  absl::StatusOr<PullResult> r = absl::UnknownError("not run");
  std::thread puller([&] {
    r = shard->Pull(0, 1, absl::InfiniteFuture());
    saw_closed = closed.load();
  });
  absl::SleepFor(absl::Milliseconds(50));  // let the pull block
  closed.store(true);
  shard->Close();
  puller.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(saw_closed);

  // Later operations fail the same way; Close is idempotent.
  shard->Close();
  absl::StatusOr<PullResult> after = shard->Pull(1, 0, absl::InfiniteFuture());
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<PushResult> push =
      PushGrad(*shard, 1, 0, 0, 1, Constant(*shard, 1.0f));
  ASSERT_FALSE(push.ok());
  EXPECT_EQ(push.status().code(), absl::StatusCode::kUnavailable);
}

TEST(ShardTest, StatsHistogramMeanAndMax) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_ASYNC, 1, -1));
  ASSERT_NE(shard, nullptr);
  pstrain::v1::ShardStats empty = shard->Stats();
  EXPECT_EQ(empty.shard(), 0u);
  EXPECT_EQ(empty.pushes(), 0u);
  EXPECT_EQ(empty.staleness_max(), 0u);
  EXPECT_EQ(empty.staleness_mean(), 0.0);
  EXPECT_EQ(empty.staleness_histogram_size(), 0);
  EXPECT_EQ(empty.num_elements(), 27u);

  // Staleness clock - read_min_clock: 0, 1, 0, 2, 2.
  const uint64_t read_min[] = {0, 0, 2, 1, 2};
  for (uint64_t c = 0; c < 5; ++c) {
    absl::StatusOr<PushResult> r =
        PushGrad(*shard, 0, c, read_min[c], 1, Constant(*shard, 0.f));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->staleness, c - read_min[c]);
  }
  pstrain::v1::ShardStats stats = shard->Stats();
  EXPECT_EQ(stats.pushes(), 5u);
  EXPECT_EQ(stats.version(), 5u);
  EXPECT_EQ(stats.staleness_max(), 2u);
  EXPECT_DOUBLE_EQ(stats.staleness_mean(), 1.0);
  EXPECT_THAT(stats.staleness_histogram(), ::testing::ElementsAre(2, 1, 2));

  // read_min_clock ahead of the clock is invalid and not recorded.
  absl::StatusOr<PushResult> bad =
      PushGrad(*shard, 0, 5, 6, 1, Constant(*shard, 0.f));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard->Stats().pushes(), 5u);

  // Staleness beyond the last bucket (63) lands in it.
  for (uint64_t c = 5; c <= 100; ++c) {
    ASSERT_TRUE(PushGrad(*shard, 0, c, 0, 1, Constant(*shard, 0.f)).ok());
  }
  stats = shard->Stats();
  EXPECT_EQ(stats.pushes(), 101u);
  EXPECT_EQ(stats.staleness_max(), 100u);
  ASSERT_EQ(stats.staleness_histogram_size(), 64);
  EXPECT_EQ(stats.staleness_histogram(63), 100u - 63u + 1u);  // 63..100
  EXPECT_EQ(stats.staleness_histogram(5), 1u);
  uint64_t total = 0;
  for (uint64_t h : stats.staleness_histogram()) total += h;
  EXPECT_EQ(total, 101u);
}

// Bit-for-bit equality (EXPECT_EQ on vectors of floats compares with ==).
bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every chunk of `a` and `b` holds bit-identical optimizer slots and the
// same fixed-point exponent (Snapshot).
void ExpectSameSlotsAndExponents(Shard& a, Shard& b) {
  absl::StatusOr<ShardState> sa = a.Snapshot();
  absl::StatusOr<ShardState> sb = b.Snapshot();
  ASSERT_TRUE(sa.ok()) << sa.status();
  ASSERT_TRUE(sb.ok()) << sb.status();
  ASSERT_EQ(sa->chunks.size(), sb->chunks.size());
  for (size_t k = 0; k < sa->chunks.size(); ++k) {
    EXPECT_TRUE(BitIdentical(sa->chunks[k].slots, sb->chunks[k].slots)) << k;
    EXPECT_EQ(sa->chunks[k].exponent, sb->chunks[k].exponent) << k;
  }
}

// A pull that must not block; copies the weights.
PullResult MustPull(Shard& shard, uint32_t worker, uint64_t clock) {
  absl::StatusOr<PullResult> r =
      shard.Pull(worker, clock, absl::Now() + kShortWait);
  EXPECT_TRUE(r.ok()) << "worker " << worker << " clock " << clock << ": "
                      << r.status();
  return r.ok() ? *std::move(r) : PullResult();
}

// ---------------------------------------------------------------------------
// Sync with backup workers.

// A push its step no longer waits for (a backup worker's, late): accepted,
// dropped, applied nowhere, the weights still bit for bit `weights`. Its
// result, for further checks.
PushResult MustDrop(Shard& shard, uint32_t worker, uint64_t clock,
                    uint64_t read_min_clock, uint64_t num_samples,
                    const std::vector<float>& grad,
                    const std::vector<float>& weights) {
  absl::StatusOr<PushResult> r =
      PushGrad(shard, worker, clock, read_min_clock, num_samples, grad);
  EXPECT_TRUE(r.ok()) << "worker " << worker << " clock " << clock << ": "
                      << r.status();
  if (!r.ok()) return PushResult();
  EXPECT_TRUE(r->dropped);
  EXPECT_FALSE(r->applied);
  EXPECT_TRUE(BitIdentical(Weights(shard), weights));
  return *r;
}

JobConfig BackupConfig(int workers, int64_t backup) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, workers, 0);
  config.mutable_training()->set_backup_workers(backup);
  return config;
}

// Dyadic test gradients: every weighted average below is exact.
std::vector<float> PatternGrad(size_t n, int which) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    switch (which % 4) {
      case 0:
        g[i] = static_cast<float>(i % 5) - 2.0f;
        break;
      case 1:
        g[i] = 0.25f * static_cast<float>(i % 7);
        break;
      case 2:
        g[i] = -1.5f + static_cast<float>(i % 3);
        break;
      default:
        g[i] = 0.5f * static_cast<float>(i % 4) - 0.75f;
        break;
    }
  }
  return g;
}

// w - (sum_r samples_r * g_r) / (sum_r samples_r), computed independently.
std::vector<float> AfterWeightedStep(
    const std::vector<float>& w, const std::vector<uint64_t>& samples,
    const std::vector<std::vector<float>>& grads) {
  std::vector<float> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    double num = 0, den = 0;
    for (size_t r = 0; r < grads.size(); ++r) {
      num += static_cast<double>(samples[r]) * grads[r][i];
      den += static_cast<double>(samples[r]);
    }
    out[i] = w[i] - static_cast<float>(num / den);
  }
  return out;
}

TEST(BackupWorkersTest, StepAppliesWithFirstNMinusBAndDropsTheLatePush) {
  std::unique_ptr<Shard> shard = MakeShard(BackupConfig(4, 1));
  ASSERT_NE(shard, nullptr);
  const size_t n = shard->num_elements();
  const std::vector<float> w0 = Weights(*shard);

  // Workers 2, 0, 3 arrive first (not in rank order); worker 1 is late.
  const std::vector<uint32_t> first = {2, 0, 3};
  const std::vector<uint64_t> samples = {4, 1, 3};
  std::vector<std::vector<float>> grads;
  for (uint32_t w : first) grads.push_back(PatternGrad(n, w));
  const std::vector<float> late_grad(n, 64.0f);
  const std::vector<float> expected = AfterWeightedStep(w0, samples, grads);
  std::vector<std::vector<float>> with_late = grads;
  with_late.push_back(late_grad);
  ASSERT_NE(expected, AfterWeightedStep(w0, {4, 1, 3, 2}, with_late));
  ASSERT_NE(expected, AfterWeightedStep(w0, {1, 1, 1}, grads))
      << "test data cannot tell the weighted average from the plain one";

  for (size_t k = 0; k < first.size(); ++k) {
    absl::StatusOr<PushResult> r =
        PushGrad(*shard, first[k], 0, 0, samples[k], grads[k]);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->dropped);
    EXPECT_EQ(r->applied, k == 2) << "push " << k;
    EXPECT_EQ(r->version, k == 2 ? 1u : 0u) << "push " << k;
  }
  const std::vector<float> w1 = Weights(*shard);
  EXPECT_EQ(w1, expected);

  // The fast workers read step 1 at once; the straggler does not make their
  // reads look stale.
  const PullResult fast = MustPull(*shard, 0, 1);
  EXPECT_EQ(fast.version, 1u);
  EXPECT_EQ(fast.min_clock, 1u);

  // Worker 1's push for step 0 is late: accepted, dropped, changes nothing.
  const PushResult late = MustDrop(*shard, 1, 0, 0, 2, late_grad, w1);
  EXPECT_EQ(late.version, 1u);
  EXPECT_EQ(late.staleness, 0u);
  EXPECT_EQ(late.apply_seconds, 0.0);

  pstrain::v1::ShardStats stats = shard->Stats();
  EXPECT_EQ(stats.version(), 1u);
  EXPECT_EQ(stats.pushes(), 4u);
  EXPECT_EQ(stats.dropped_pushes(), 1u);
  EXPECT_EQ(stats.staleness_max(), 0u);
  EXPECT_THAT(stats.staleness_histogram(), ::testing::ElementsAre(4));

  // Its clock advanced: it pulls clock 1 without waiting. A retry of the
  // same push gets the same answer (idempotent, issue 11); another push for
  // clock 0 is rejected like any wrong clock.
  const PullResult next = MustPull(*shard, 1, 1);
  EXPECT_EQ(next.version, 1u);
  EXPECT_EQ(next.min_clock, 1u);
  EXPECT_TRUE(BitIdentical(next.values, w1));
  const PushResult retry = MustDrop(*shard, 1, 0, 0, 2, late_grad, w1);
  EXPECT_EQ(retry.version, 1u);
  EXPECT_EQ(shard->Stats().pushes(), 4u);
  absl::StatusOr<PushResult> replay = PushGrad(*shard, 1, 0, 0, 3, late_grad);
  ASSERT_FALSE(replay.ok());
  EXPECT_EQ(replay.status().code(), absl::StatusCode::kFailedPrecondition);

  // Step 1: the former straggler is among the first three this time, and
  // worker 3 is the one dropped.
  const std::vector<uint32_t> second = {1, 0, 2};
  const std::vector<uint64_t> samples1 = {1, 1, 2};  // dyadic weights
  std::vector<std::vector<float>> grads1;
  for (uint32_t w : second) grads1.push_back(PatternGrad(n, w + 1));
  for (size_t k = 0; k < second.size(); ++k) {
    absl::StatusOr<PushResult> r =
        PushGrad(*shard, second[k], 1, 1, samples1[k], grads1[k]);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->applied, k == 2);
  }
  const std::vector<float> w2 = Weights(*shard);
  EXPECT_EQ(w2, AfterWeightedStep(w1, samples1, grads1));
  MustDrop(*shard, 3, 1, 1, 2, Constant(*shard, 5.0f), w2);
  stats = shard->Stats();
  EXPECT_EQ(stats.version(), 2u);
  EXPECT_EQ(stats.pushes(), 8u);
  EXPECT_EQ(stats.dropped_pushes(), 2u);
}

// A push for step t that arrives after step t + 1 started accumulating is
// dropped without disturbing step t + 1; a worker two steps behind keeps
// being dropped until it catches up, then counts again.
TEST(BackupWorkersTest, LatePushDuringNextStepLeavesItUntouched) {
  std::unique_ptr<Shard> shard = MakeShard(BackupConfig(3, 1));
  ASSERT_NE(shard, nullptr);
  const size_t n = shard->num_elements();
  const std::vector<float> w0 = Weights(*shard);

  // Worker 2 read clock 0 and is slow.
  EXPECT_EQ(MustPull(*shard, 2, 0).version, 0u);
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 1, PatternGrad(n, 0)).ok());
  ASSERT_TRUE(PushGrad(*shard, 1, 0, 0, 3, PatternGrad(n, 1)).ok());
  const std::vector<float> w1 =
      AfterWeightedStep(w0, {1, 3}, {PatternGrad(n, 0), PatternGrad(n, 1)});
  EXPECT_EQ(Weights(*shard), w1);

  // Step 1 starts accumulating (worker 0), then worker 2's step-0 push lands.
  ASSERT_TRUE(PushGrad(*shard, 0, 1, 1, 2, PatternGrad(n, 2)).ok());
  const PushResult late =
      MustDrop(*shard, 2, 0, 0, 8, Constant(*shard, 100.0f), w1);
  EXPECT_EQ(late.version, 1u);

  // Worker 1 completes step 1 with worker 0: the late gradient is not in it.
  absl::StatusOr<PushResult> done =
      PushGrad(*shard, 1, 1, 1, 6, PatternGrad(n, 3));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->applied);
  const std::vector<float> w2 =
      AfterWeightedStep(w1, {2, 6}, {PatternGrad(n, 2), PatternGrad(n, 3)});
  EXPECT_EQ(Weights(*shard), w2);

  // Worker 2 reads clock 1 (the latest weights, after step 1) and its push
  // for clock 1 is late again.
  const PullResult r1 = MustPull(*shard, 2, 1);
  EXPECT_EQ(r1.version, 2u);
  EXPECT_EQ(r1.min_clock, 1u);  // capped at the reader's clock
  const PushResult late_again =
      MustDrop(*shard, 2, 1, r1.min_clock, 8, Constant(*shard, 100.0f), w2);
  EXPECT_EQ(late_again.staleness, 0u);

  // Caught up: worker 2's clock-2 push is among the first two of step 2 and
  // worker 1's is dropped.
  const PullResult r2 = MustPull(*shard, 2, 2);
  EXPECT_EQ(r2.version, 2u);
  ASSERT_TRUE(PushGrad(*shard, 2, 2, r2.min_clock, 1, PatternGrad(n, 1)).ok());
  absl::StatusOr<PushResult> step2 =
      PushGrad(*shard, 0, 2, 2, 1, PatternGrad(n, 0));
  ASSERT_TRUE(step2.ok()) << step2.status();
  EXPECT_TRUE(step2->applied);
  // Rank order: worker 0 then worker 2.
  const std::vector<float> w3 =
      AfterWeightedStep(w2, {1, 1}, {PatternGrad(n, 0), PatternGrad(n, 1)});
  EXPECT_EQ(Weights(*shard), w3);
  MustDrop(*shard, 1, 2, 2, 1, Constant(*shard, 100.0f), w3);

  const pstrain::v1::ShardStats stats = shard->Stats();
  EXPECT_EQ(stats.version(), 3u);
  EXPECT_EQ(stats.pushes(), 9u);
  EXPECT_EQ(stats.dropped_pushes(), 3u);
  EXPECT_EQ(stats.staleness_max(), 0u);
}

TEST(BackupWorkersTest, WithoutBackupWorkersNothingIsDropped) {
  std::unique_ptr<Shard> shard = MakeShard(BackupConfig(2, 0));
  ASSERT_NE(shard, nullptr);
  absl::StatusOr<PushResult> r =
      PushGrad(*shard, 0, 0, 0, 1, Constant(*shard, 1.0f));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->applied);
  EXPECT_FALSE(r->dropped);
  EXPECT_EQ(shard->Stats().version(), 0u);
  EXPECT_EQ(shard->Stats().dropped_pushes(), 0u);
}

TEST(ShardRulesTest, CreateRejectsRulesOutsideTheirMode) {
  struct Case {
    const char* name;
    pstrain::v1::ConsistencyMode mode;
    uint32_t backup_workers;
    bool staleness_aware_lr;
    double dc_lambda;
  };
  const Case cases[] = {
      {"backup in async", pstrain::v1::MODE_ASYNC, 1, false, 0},
      {"backup = workers", pstrain::v1::MODE_SYNC, 3, false, 0},
      {"staleness-aware lr in sync", pstrain::v1::MODE_SYNC, 0, true, 0},
      {"dc_lambda in sync", pstrain::v1::MODE_SYNC, 0, false, 0.5},
      {"negative dc_lambda", pstrain::v1::MODE_ASYNC, 0, false, -0.5},
      {"NaN dc_lambda", pstrain::v1::MODE_ASYNC, 0, false, std::nan("")},
      {"infinite dc_lambda", pstrain::v1::MODE_ASYNC, 0, false, INFINITY},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<pstrain::v1::JobSpec> job =
        MakeJobSpec(SmallConfig(c.mode, 3, 0));
    ASSERT_TRUE(job.ok()) << job.status();
    job->mutable_config()->mutable_training()->set_backup_workers(
        c.backup_workers);
    job->mutable_config()->mutable_training()->set_staleness_aware_lr(
        c.staleness_aware_lr);
    job->mutable_config()->mutable_training()->set_dc_lambda(c.dc_lambda);
    absl::StatusOr<std::unique_ptr<Shard>> shard =
        Shard::Create(ShardOptionsFromJob(*job, 0));
    ASSERT_FALSE(shard.ok());
    EXPECT_EQ(shard.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// ---------------------------------------------------------------------------
// Async: staleness-aware learning rate.

JobConfig AsyncRulesConfig(bool staleness_aware_lr, double dc_lambda) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_ASYNC, 2, -1);
  config.mutable_training()->set_staleness_aware_lr(staleness_aware_lr);
  config.mutable_training()->set_dc_lambda(dc_lambda);
  return config;
}

// Worker 0 runs ahead of worker 1 (which never pushes) under s = inf, so its
// push of clock c is exactly c clocks stale; with SGD at lr 1 it moves every
// weight by g / max(c, 1) (g = 0.5: all steps exact in float).
TEST(StalenessAwareLrTest, SgdStepIsLrOverStaleness) {
  for (bool aware : {true, false}) {
    SCOPED_TRACE(aware ? "staleness-aware" : "plain");
    std::unique_ptr<Shard> shard = MakeShard(AsyncRulesConfig(aware, 0));
    ASSERT_NE(shard, nullptr);
    const float g = 0.5f;
    for (uint64_t c = 0; c < 5; ++c) {
      const PullResult read = MustPull(*shard, 0, c);
      ASSERT_EQ(read.min_clock, 0u);
      absl::StatusOr<PushResult> r =
          PushGrad(*shard, 0, c, read.min_clock, 1, Constant(*shard, g));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->staleness, c);
      const float step =
          aware ? g / static_cast<float>(std::max<uint64_t>(c, 1)) : g;
      if (c == 3) continue;  // lr / 3 is not exact in float
      const std::vector<float> after = Weights(*shard);
      for (size_t i = 0; i < after.size(); ++i) {
        ASSERT_EQ(after[i], read.values[i] - step)
            << "clock " << c << " element " << i;
      }
    }
  }
}

// training.async_lr_per_push: one push applies exactly lr / N x its
// gradient, and one clock of N async pushes (s = 0, every worker reading the
// same weights) at lr / N each moves the weights as far as one sync step of
// their mean at lr; at the full rate (the default) N times as far. SGD at
// lr 1, worker w's gradient 0.25 (w + 1): each step is exact in float.
TEST(AsyncLrPerPushTest, ScaledClockOfPushesEqualsOneSyncStep) {
  const int n = 4;
  auto grad = [](uint32_t w) { return 0.25f * static_cast<float>(w + 1); };
  const float mean = (0.25f + 0.5f + 0.75f + 1.0f) / n;  // 0.625
  std::vector<float> start;
  std::vector<float> moved[3];  // sync, async scaled, async full
  for (int variant = 0; variant < 3; ++variant) {
    JobConfig config = SmallConfig(
        variant == 0 ? pstrain::v1::MODE_SYNC : pstrain::v1::MODE_ASYNC, n, 0);
    if (variant == 1) {
      config.mutable_training()->set_async_lr_per_push(
          pstrain::v1::TrainingConfig::SCALED);
    }
    std::unique_ptr<Shard> shard = MakeShard(config);
    ASSERT_NE(shard, nullptr);
    std::vector<PullResult> reads;
    for (uint32_t w = 0; w < n; ++w) reads.push_back(MustPull(*shard, w, 0));
    for (uint32_t w = 0; w < n; ++w) {
      ASSERT_EQ(reads[w].values, reads[0].values);
      absl::StatusOr<PushResult> r = PushGrad(*shard, w, 0, reads[w].min_clock,
                                              32, Constant(*shard, grad(w)));
      ASSERT_TRUE(r.ok()) << r.status();
      if (variant == 1) {
        // One push: exactly lr / N x its gradient.
        const std::vector<float> after = Weights(*shard);
        const std::vector<float>& before = w == 0 ? reads[0].values : moved[1];
        for (size_t i = 0; i < after.size(); ++i) {
          ASSERT_EQ(after[i], before[i] - grad(w) / n) << w << " " << i;
        }
        moved[1] = after;
      }
    }
    start = reads[0].values;
    moved[variant] = Weights(*shard);
  }
  // The clock: four roundings of the random initial weights against one,
  // so equal within float rounding (4 ulps), not bit for bit.
  for (size_t i = 0; i < start.size(); ++i) {
    EXPECT_EQ(moved[0][i], start[i] - mean) << i;
    EXPECT_FLOAT_EQ(moved[1][i], moved[0][i]) << i;
    EXPECT_FLOAT_EQ(moved[2][i], start[i] - n * mean) << i;
  }
}

// Adam's step is invariant to the gradient's scale: only scaling the learning
// rate (not the gradient) halves the step of a push 2 clocks stale.
TEST(StalenessAwareLrTest, ScalesAdamLearningRateNotGradient) {
  std::vector<float> delta[2];
  for (bool aware : {false, true}) {
    JobConfig config = AsyncRulesConfig(aware, 0);
    config.mutable_training()->mutable_optimizer()->set_kind(
        pstrain::v1::OptimizerConfig::ADAM);
    config.mutable_training()->mutable_optimizer()->set_base_lr(0.01);
    std::unique_ptr<Shard> shard = MakeShard(config);
    ASSERT_NE(shard, nullptr);
    // Two zero gradients (no movement), then g = 2 with staleness 2.
    for (uint64_t c = 0; c < 2; ++c) {
      ASSERT_TRUE(PushGrad(*shard, 0, c, 0, 1, Constant(*shard, 0.f)).ok());
    }
    const std::vector<float> before = Weights(*shard);
    absl::StatusOr<PushResult> r =
        PushGrad(*shard, 0, 2, 0, 1, Constant(*shard, 2.0f));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->staleness, 2u);
    const std::vector<float> after = Weights(*shard);
    for (size_t i = 0; i < after.size(); ++i) {
      delta[aware].push_back(after[i] - before[i]);
    }
  }
  // m = 0.1 g and v = 0.001 g^2 after one non-zero gradient, bias
  // corrected at t = 3 (the third update of the chunk).
  const double mhat = 0.1 * 2.0 / (1 - std::pow(0.9, 3));
  const double vhat = 0.001 * 4.0 / (1 - std::pow(0.999, 3));
  const double full = -0.01 * mhat / (std::sqrt(vhat) + 1e-8);
  ASSERT_FALSE(delta[0].empty());
  for (size_t i = 0; i < delta[0].size(); ++i) {
    EXPECT_NEAR(delta[0][i], full, 1e-6) << i;
    EXPECT_NEAR(delta[1][i], full / 2, 1e-6) << i;
  }
}

// ---------------------------------------------------------------------------
// Async: DC-ASGD delay compensation.

// g' = g + lambda * g * g * (w_now - w_read), then SGD at lr 1: w_now - g'.
std::vector<float> DcExpected(const std::vector<float>& w_now,
                              const std::vector<float>& w_read,
                              const std::vector<float>& g, double lambda) {
  std::vector<float> out(w_now.size());
  for (size_t i = 0; i < w_now.size(); ++i) {
    const double d = static_cast<double>(w_now[i]) - w_read[i];
    const double gc = g[i] + lambda * g[i] * g[i] * d;
    out[i] = static_cast<float>(w_now[i] - gc);
  }
  return out;
}

TEST(DcAsgdTest, CompensatesForUpdatesSinceTheWorkersRead) {
  constexpr double kLambda = 0.5;
  std::unique_ptr<Shard> shard = MakeShard(AsyncRulesConfig(false, kLambda));
  ASSERT_NE(shard, nullptr);
  const size_t n = shard->num_elements();

  // Both workers read w0; worker 0's push comes first and is not delayed.
  const std::vector<float> w0 = MustPull(*shard, 1, 0).values;
  ASSERT_TRUE(BitIdentical(MustPull(*shard, 0, 0).values, w0));
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 1, Constant(*shard, 0.5f)).ok());
  const std::vector<float> w1 = MustPull(*shard, 0, 1).values;
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(w1[i], w0[i] - 0.5f) << i;

  // Worker 1's gradient was computed at w0 and lands on w1 (every element
  // moved by about -0.5): g' = g + 0.5 * g^2 * (w1 - w0) ~ g - 0.25 g^2.
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = 0.25f * static_cast<float>(i % 9) - 1;
  ASSERT_TRUE(PushGrad(*shard, 1, 0, 0, 1, g).ok());
  const std::vector<float> w2 = MustPull(*shard, 1, 1).values;
  const std::vector<float> expected = DcExpected(w1, w0, g, kLambda);
  const std::vector<float> uncompensated = DcExpected(w1, w0, g, 0);
  int differs = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(w2[i], expected[i], 1e-6) << i;
    if (std::abs(expected[i] - uncompensated[i]) > 1e-3) ++differs;
  }
  EXPECT_GT(differs, static_cast<int>(n / 2))
      << "test data cannot tell compensation from none";
  // Hand-computed spot checks: w1 - w0 = -0.5 up to rounding, so
  // g = 1 -> g' = 0.75, g = -1 -> g' = -1.25, g = 0 -> g' = 0.
  ASSERT_EQ(g[8], 1.0f);
  EXPECT_NEAR(w2[8], w1[8] - 0.75f, 1e-6);
  ASSERT_EQ(g[0], -1.0f);
  EXPECT_NEAR(w2[0], w1[0] + 1.25f, 1e-6);
  ASSERT_EQ(g[4], 0.0f);
  EXPECT_EQ(w2[4], w1[4]);

  // Worker 0 read w1 (its pull at clock 1), but w2 is current now; worker 1
  // read w2 just now, so its next push needs no compensation.
  ASSERT_TRUE(PushGrad(*shard, 1, 1, 0, 1, g).ok());
  const std::vector<float> w3 = MustPull(*shard, 1, 2).values;
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(w3[i], w2[i] - g[i]) << i;
  ASSERT_TRUE(PushGrad(*shard, 0, 1, 0, 1, g).ok());
  const std::vector<float> w4 = MustPull(*shard, 1, 2).values;
  const std::vector<float> expected4 = DcExpected(w3, w1, g, kLambda);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(w4[i], expected4[i], 1e-6) << i;
}

// lambda = 0 is plain async SGD, bit for bit, on the same pushes.
TEST(DcAsgdTest, LambdaZeroEqualsPlainAsync) {
  for (double lambda : {0.0, 0.5}) {
    JobConfig config = AsyncRulesConfig(false, 0);
    std::unique_ptr<Shard> plain = MakeShard(config);
    config.mutable_training()->set_dc_lambda(lambda);
    std::unique_ptr<Shard> dc = MakeShard(config);
    ASSERT_NE(plain, nullptr);
    ASSERT_NE(dc, nullptr);
    const size_t n = plain->num_elements();
    // Interleaved: each worker reads, then the other pushes before it does.
    for (uint64_t c = 0; c < 4; ++c) {
      for (Shard* s : {plain.get(), dc.get()}) {
        MustPull(*s, 0, c);
        MustPull(*s, 1, c);
        ASSERT_TRUE(PushGrad(*s, 0, c, c, 1, PatternGrad(n, c)).ok());
        ASSERT_TRUE(PushGrad(*s, 1, c, c, 1, PatternGrad(n, c + 1)).ok());
      }
    }
    const std::vector<float> a = MustPull(*plain, 0, 4).values;
    const std::vector<float> b = MustPull(*dc, 0, 4).values;
    if (lambda == 0) {
      EXPECT_TRUE(BitIdentical(a, b));
    } else {
      EXPECT_NE(a, b) << "lambda 0.5 compensated nothing";
    }
  }
}

// ---------------------------------------------------------------------------
// Data path: the exact sync sum, apply threads, copy-on-write pulls.

std::unique_ptr<Shard> MakeShardWithThreads(const JobConfig& config,
                                            int threads) {
  absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(config);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return nullptr;
  ShardOptions options = ShardOptionsFromJob(*job, 0);
  options.apply_threads = threads;
  absl::StatusOr<std::unique_ptr<Shard>> shard = Shard::Create(options);
  EXPECT_TRUE(shard.ok()) << shard.status();
  return shard.ok() ? *std::move(shard) : nullptr;
}

// Non-dyadic gradients spanning many magnitudes, so rounding would show.
std::vector<float> RandomGrad(size_t n, uint32_t seed) {
  std::vector<float> g(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const double u = static_cast<double>(x >> 11) / 9007199254740992.0;
    g[i] = static_cast<float>((u - 0.5) * std::pow(10.0, (x % 9) - 6.0));
  }
  return g;
}

// Sync with 3 workers and Adam: arrival order and the number of apply
// threads change nothing, bit for bit, over several steps.
TEST(DataPathTest, SyncIsIndependentOfArrivalOrderAndThreads) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 3, 0);
  config.mutable_training()->mutable_optimizer()->set_kind(
      pstrain::v1::OptimizerConfig::ADAM);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.01);
  std::unique_ptr<Shard> a = MakeShardWithThreads(config, 1);
  std::unique_ptr<Shard> b = MakeShardWithThreads(config, 3);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const size_t n = a->num_elements();
  const uint64_t samples[3] = {5, 3, 8};
  for (uint64_t step = 0; step < 4; ++step) {
    const std::vector<uint32_t> order_a = {0, 1, 2};
    const std::vector<uint32_t> order_b = {2, 0, 1};
    for (size_t k = 0; k < 3; ++k) {
      const uint32_t wa = order_a[k], wb = order_b[k];
      ASSERT_TRUE(PushGrad(*a, wa, step, step, samples[wa],
                           RandomGrad(n, step * 3 + wa))
                      .ok());
      ASSERT_TRUE(PushGrad(*b, wb, step, step, samples[wb],
                           RandomGrad(n, step * 3 + wb))
                      .ok());
    }
    ASSERT_TRUE(BitIdentical(Weights(*a), Weights(*b))) << "step " << step;
  }
  EXPECT_EQ(a->Stats().version(), 4u);
  EXPECT_EQ(a->clipped_elements(), 0u);
}

// The sync sum is exact to far below float resolution: one worker's step
// equals the optimizer run on the gradient itself.
TEST(DataPathTest, SyncSingleWorkerStepEqualsPlainOptimizer) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 1, 0);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.1);
  std::unique_ptr<Shard> shard = MakeShard(config);
  ASSERT_NE(shard, nullptr);
  const std::vector<float> w0 = Weights(*shard);
  const std::vector<float> g = RandomGrad(shard->num_elements(), 7);
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 32, g).ok());
  const std::vector<float> w1 = Weights(*shard);
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(w1[i], w0[i] - 0.1f * g[i]) << i;
  }
}

// The same with terms beyond the fast conversions' range (2^51 after
// scaling; 2^21 in the first step) in one chunk and small ones elsewhere:
// both the vectorised and the scalar paths give the exact result.
TEST(DataPathTest, SyncFastAndScalarConversionsAgree) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 1, 0);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.5);
  std::unique_ptr<Shard> shard = MakeShard(config);
  ASSERT_NE(shard, nullptr);
  const std::vector<float> w0 = Weights(*shard);
  std::vector<float> g = RandomGrad(shard->num_elements(), 9);
  g[3] = 3e6f;  // chunk 0: scalar sum and conversion
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 1, g).ok());
  EXPECT_EQ(shard->clipped_elements(), 0u);
  const std::vector<float> w1 = Weights(*shard);
  for (size_t i = 0; i < g.size(); ++i) {
    // The first step's scale is 2^-30 (E = 32, one worker: 62 bits).
    const float applied = static_cast<float>(
        static_cast<double>(std::llrint(static_cast<double>(g[i]) * 0x1p30)) *
        0x1p-30);
    EXPECT_EQ(w1[i], w0[i] - 0.5f * applied) << i;
  }
}

// Async with apply threads equals one thread, bit for bit.
TEST(DataPathTest, AsyncApplyThreadsChangeNothing) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_ASYNC, 2, -1);
  config.mutable_training()->mutable_optimizer()->set_kind(
      pstrain::v1::OptimizerConfig::MOMENTUM);
  config.mutable_training()->mutable_optimizer()->set_momentum(0.9);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.05);
  std::unique_ptr<Shard> a = MakeShardWithThreads(config, 1);
  std::unique_ptr<Shard> b = MakeShardWithThreads(config, 3);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (uint64_t c = 0; c < 3; ++c) {
    for (uint32_t w : {0u, 1u}) {
      const std::vector<float> g = RandomGrad(a->num_elements(), c * 2 + w);
      ASSERT_TRUE(PushGrad(*a, w, c, 0, 4, g).ok());
      ASSERT_TRUE(PushGrad(*b, w, c, 0, 4, g).ok());
    }
  }
  EXPECT_TRUE(BitIdentical(Weights(*a), Weights(*b)));
}

// A term beyond the accumulator's range (here above 2^32 in the first step)
// is clipped and counted, never wrapped around.
TEST(DataPathTest, HugeSyncTermIsClippedAndCounted) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_SYNC, 1, 0));
  ASSERT_NE(shard, nullptr);
  const std::vector<float> w0 = Weights(*shard);
  std::vector<float> g(shard->num_elements(), 0.0f);
  g[0] = 1e10f;
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 1, g).ok());
  EXPECT_EQ(shard->clipped_elements(), 1u);
  const std::vector<float> w1 = Weights(*shard);
  EXPECT_LT(w1[0], w0[0] - 4e9f);  // moved by about 2^32, the right way
  for (size_t i = 1; i < g.size(); ++i) EXPECT_EQ(w1[i], w0[i]) << i;
}

// A pull's pinned weights stay as read while pushes update the shard, and
// the next pull sees the update.
TEST(DataPathTest, PulledWeightsAreASnapshot) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_ASYNC, 1, -1));
  ASSERT_NE(shard, nullptr);
  absl::StatusOr<PulledWeights> held =
      shard->PullWeights(0, 0, absl::Now() + kLongWait);
  ASSERT_TRUE(held.ok()) << held.status();
  std::vector<float> before;
  for (size_t k = 0; k < shard->chunks().size(); ++k) {
    before.insert(before.end(), held->chunk(k),
                  held->chunk(k) + shard->chunks()[k].length);
  }
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 1, Constant(*shard, 0.5f)).ok());
  std::vector<float> still;
  for (size_t k = 0; k < shard->chunks().size(); ++k) {
    still.insert(still.end(), held->chunk(k),
                 held->chunk(k) + shard->chunks()[k].length);
  }
  EXPECT_TRUE(BitIdentical(still, before));
  const std::vector<float> now = Weights(*shard);
  for (size_t i = 0; i < now.size(); ++i) {
    EXPECT_EQ(now[i], before[i] - 0.5f) << i;
  }
}

// A chunk pin (what a pull's gRPC slice holds) outlives the PulledWeights
// it came from: the pinned values stay as read while pushes update the
// shard, and the shard writes in place again once the pin is dropped.
TEST(DataPathTest, ChunkPinOutlivesThePull) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_ASYNC, 1, -1));
  ASSERT_NE(shard, nullptr);
  std::shared_ptr<void> pin;
  const float* pinned = nullptr;
  std::vector<float> before;
  {
    absl::StatusOr<PulledWeights> held =
        shard->PullWeights(0, 0, absl::Now() + kLongWait);
    ASSERT_TRUE(held.ok()) << held.status();
    pin = held->Pin(0);
    pinned = held->chunk(0);
    EXPECT_EQ(pin.get(), pinned);
    before.assign(pinned, pinned + shard->chunks()[0].length);
  }
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 1, Constant(*shard, 0.5f)).ok());
  EXPECT_TRUE(BitIdentical(
      std::vector<float>(pinned, pinned + shard->chunks()[0].length), before));
  EXPECT_EQ(Weights(*shard)[0], before[0] - 0.5f);
  // Only the pinned chunk was copied (ShardStats counts it).
  EXPECT_EQ(shard->Stats().chunks_copied_on_write(), 1u);
  pin.reset();
  absl::StatusOr<PulledWeights> next =
      shard->PullWeights(0, 1, absl::Now() + kLongWait);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->chunk(0)[0], before[0] - 0.5f);
  next = PulledWeights();  // nothing held: the next update copies nothing
  ASSERT_TRUE(PushGrad(*shard, 0, 1, 1, 1, Constant(*shard, 0.5f)).ok());
  EXPECT_EQ(Weights(*shard)[0], before[0] - 1.0f);
  EXPECT_EQ(shard->Stats().chunks_copied_on_write(), 1u);
}

// A pull's wait ends CANCELLED once its `cancelled` flag is set and
// WakePulls runs (the service's OnCancel), not at its deadline; a flag set
// before the call ends it at once; a readable pull is not held up by it.
// The shard is unchanged and the step then completes as usual.
TEST(DataPathTest, CancelledPullStopsWaiting) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_SYNC, 2, 0));
  ASSERT_NE(shard, nullptr);
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 1, Constant(*shard, 0.5f)).ok());
  const absl::Time far = absl::Now() + absl::Hours(1);

  std::atomic<bool> cancelled{true};
  absl::StatusOr<PulledWeights> early =
      shard->PullWeights(0, 1, far, &cancelled);
  EXPECT_TRUE(absl::IsCancelled(early.status())) << early.status();
  EXPECT_TRUE(shard->PullWeights(1, 0, far, &cancelled).ok());  // readable

  cancelled = false;
  absl::StatusOr<PulledWeights> waited;
  std::thread puller(
      [&] { waited = shard->PullWeights(0, 1, far, &cancelled); });
  // Whether the wake comes before or during the wait, the pull ends.
  cancelled = true;
  shard->WakePulls();
  puller.join();
  EXPECT_TRUE(absl::IsCancelled(waited.status())) << waited.status();
  EXPECT_NE(waited.status().message().find("cancelled"), std::string::npos);
  EXPECT_EQ(shard->Stats().version(), 0u);

  ASSERT_TRUE(PushGrad(*shard, 1, 0, 0, 1, Constant(*shard, 0.5f)).ok());
  std::atomic<bool> not_cancelled{false};
  absl::StatusOr<PulledWeights> next =
      shard->PullWeights(0, 1, absl::Now() + kLongWait, &not_cancelled);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->version, 1u);
}

// Pulls racing with pushes always read one whole version: with SGD lr 1 and
// a gradient of ones, version v's weights are w0 with 1 subtracted v times
// (in float). Several apply threads write while readers hold snapshots.
TEST(DataPathTest, ConcurrentPullsSeeWholeVersions) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_ASYNC, 1, -1);
  std::unique_ptr<Shard> shard = MakeShardWithThreads(config, 3);
  ASSERT_NE(shard, nullptr);
  constexpr uint64_t kPushes = 200;
  std::vector<std::vector<float>> want(kPushes + 1, Weights(*shard));
  for (uint64_t v = 1; v <= kPushes; ++v) {
    for (float& x : want[v]) x = want[v - 1][&x - want[v].data()] - 1.0f;
  }
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        absl::StatusOr<PulledWeights> p =
            shard->PullWeights(0, 0, absl::Now() + kLongWait);
        if (!p.ok()) continue;
        const std::vector<float>& expected = want[p->version];
        for (size_t k = 0; k < shard->chunks().size(); ++k) {
          const LocalChunk& lc = shard->chunks()[k];
          for (uint64_t i = 0; i < lc.length; ++i) {
            if (p->chunk(k)[i] != expected[lc.local_offset + i]) ++torn;
          }
        }
        ++reads;
      }
    });
  }
  for (uint64_t c = 0; c < kPushes; ++c) {
    ASSERT_TRUE(PushGrad(*shard, 0, c, 0, 1, Constant(*shard, 1.0f)).ok());
  }
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0) << "over " << reads.load() << " pulls";
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(Weights(*shard), want[kPushes]);
}

// ---- Low-precision wire (network.wire_dtype) ------------------------------

class WireDtypeTest
    : public testing::TestWithParam<
          std::tuple<pstrain::v1::DType, pstrain::v1::ConsistencyMode>> {};

// A push of 16-bit values applies exactly as the fp32 push of the same
// (rounded) values: fp32 master weights and optimizer state, the exact sync
// sum, bit for bit, over several steps with two workers and Adam.
TEST_P(WireDtypeTest, PushAppliesAsTheFp32PushOfTheRoundedValues) {
  const auto [dtype, mode] = GetParam();
  JobConfig config =
      SmallConfig(mode, 2, mode == pstrain::v1::MODE_ASYNC ? -1 : 0);
  config.mutable_training()->mutable_optimizer()->set_kind(
      pstrain::v1::OptimizerConfig::ADAM);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.01);
  std::unique_ptr<Shard> fp32 = MakeShard(config);
  config.mutable_network()->set_wire_dtype(dtype);
  std::unique_ptr<Shard> low = MakeShard(config);
  ASSERT_NE(fp32, nullptr);
  ASSERT_NE(low, nullptr);
  EXPECT_EQ(low->wire_dtype(), dtype);
  const size_t n = low->num_elements();
  bool rounding_changed_something = false;
  for (uint64_t step = 0; step < 4; ++step) {
    for (uint32_t w : {1u, 0u}) {
      const std::vector<float> g = RandomGrad(n, step * 2 + w);
      std::vector<float> rounded = g;
      RoundToWire(dtype, rounded.data(), rounded.size());
      rounding_changed_something |= rounded != g;
      absl::StatusOr<PushResult> a =
          PushGrad(*low, w, step, 0, 3 + w, g, dtype);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(PushGrad(*fp32, w, step, 0, 3 + w, rounded).ok());
    }
    ASSERT_TRUE(BitIdentical(Weights(*low), Weights(*fp32))) << "step " << step;
  }
  EXPECT_TRUE(rounding_changed_something);
  EXPECT_EQ(low->Stats().version(), fp32->Stats().version());
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndModes, WireDtypeTest,
    testing::Combine(
        testing::Values(pstrain::v1::DTYPE_BF16, pstrain::v1::DTYPE_F16),
        testing::Values(pstrain::v1::MODE_SYNC, pstrain::v1::MODE_ASYNC)));

TEST(WireDtypeTest, ChunkInAnotherDtypeIsRejectedAndChangesNothing) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 1, 0);
  config.mutable_network()->set_wire_dtype(pstrain::v1::DTYPE_BF16);
  std::unique_ptr<Shard> shard = MakeShard(config);
  ASSERT_NE(shard, nullptr);
  const std::vector<float> w0 = Weights(*shard);
  for (pstrain::v1::DType wrong :
       {pstrain::v1::DTYPE_F32, pstrain::v1::DTYPE_F16}) {
    absl::StatusOr<PushResult> r =
        PushGrad(*shard, 0, 0, 0, 4, Constant(*shard, 0.5f), wrong);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr(pstrain::v1::DType_Name(wrong) +
                          " does not match the job's wire dtype DTYPE_BF16"));
    EXPECT_EQ(shard->Stats().version(), 0u);
    EXPECT_EQ(Weights(*shard), w0);
  }
  // Clock 0 is still open: the rejected pushes advanced nothing.
  absl::StatusOr<PushResult> ok = PushGrad(
      *shard, 0, 0, 0, 4, Constant(*shard, 0.5f), pstrain::v1::DTYPE_BF16);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->applied);
}

// A finite gradient beyond fp16's range travels as +-65504 (saturated,
// common/low_precision.h) and applies as the fp32 push of 65504; an
// infinite one stays infinite and is refused as non-finite, changing
// nothing.
TEST(WireDtypeTest, Fp16GradientBeyondItsRangeSaturates) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 1, 0);
  std::unique_ptr<Shard> fp32 = MakeShard(config);
  config.mutable_network()->set_wire_dtype(pstrain::v1::DTYPE_F16);
  std::unique_ptr<Shard> shard = MakeShard(config);
  ASSERT_NE(fp32, nullptr);
  ASSERT_NE(shard, nullptr);
  absl::StatusOr<PushResult> r =
      PushGrad(*shard, 0, 0, 0, 4,
               Constant(*shard, std::numeric_limits<float>::infinity()),
               pstrain::v1::DTYPE_F16);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("not finite"));
  EXPECT_EQ(shard->Stats().version(), 0u);
  r = PushGrad(*shard, 0, 0, 0, 4, Constant(*shard, 1e5f),
               pstrain::v1::DTYPE_F16);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(PushGrad(*fp32, 0, 0, 0, 4, Constant(*fp32, 65504.0f)).ok());
  EXPECT_TRUE(BitIdentical(Weights(*shard), Weights(*fp32)));
}

TEST(WireDtypeTest, CreateRejectsADtypeThatCannotTravel) {
  absl::StatusOr<pstrain::v1::JobSpec> job =
      MakeJobSpec(SmallConfig(pstrain::v1::MODE_SYNC, 1, 0));
  ASSERT_TRUE(job.ok()) << job.status();
  ShardOptions options = ShardOptionsFromJob(*job, 0);
  EXPECT_EQ(options.wire_dtype, pstrain::v1::DTYPE_F32);  // unset: fp32
  options.wire_dtype = static_cast<pstrain::v1::DType>(9);
  absl::StatusOr<std::unique_ptr<Shard>> shard = Shard::Create(options);
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

// Elastic workers (SetMembership): a departed rank stops holding the
// async staleness bound back; a joined rank's clock moves to its start.
TEST(ShardTest, ElasticMembershipDropsDeadRankAndMovesJoinedClock) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_ASYNC, 2, /*staleness=*/0));
  ASSERT_NE(shard, nullptr);
  const std::vector<float> g = Constant(*shard, 0.0f);
  ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, 1, g).ok());
  // Worker 1 has not pushed clock 0: worker 0 cannot read clock 1.
  EXPECT_EQ(shard->Pull(0, 1, absl::Now() + kShortWait).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  shard->SetMembership({false, true}, {0, 0});
  absl::StatusOr<PullResult> r = shard->Pull(0, 1, absl::Now() + kLongWait);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->min_clock, 1u);
  ASSERT_TRUE(PushGrad(*shard, 0, 1, 1, 1, g).ok());
  ASSERT_TRUE(PushGrad(*shard, 0, 2, 2, 1, g).ok());
  // Worker 1 joins again at step 3: its clock moves there, it counts again.
  shard->SetMembership({false, false}, {0, 3});
  ASSERT_TRUE(PushGrad(*shard, 0, 3, 3, 1, g).ok());
  EXPECT_EQ(shard->Pull(0, 4, absl::Now() + kShortWait).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(shard->Pull(1, 3, absl::Now() + kLongWait).ok());
  ASSERT_TRUE(PushGrad(*shard, 1, 3, 3, 1, g).ok());
  EXPECT_EQ(PushGrad(*shard, 1, 2, 2, 1, g).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(shard->Pull(0, 4, absl::Now() + kLongWait).ok());
}

// training.on_failure: elastic, mode sync: a stand-in (a new session for a
// dead rank) re-pushes the rank's step from the same weights and data. The
// dead process had pushed it to shard A but not to shard B (two shards of
// the same layout stand for them).
// `streamed`: through BeginPush/IncomingPush (summed on arrival: the
// service's path for plain sync), else through Push (buffered whole).
absl::StatusOr<PushResult> PushAs(bool streamed, Shard& shard, uint32_t worker,
                                  uint64_t session, uint64_t clock,
                                  const std::vector<float>& grad) {
  std::vector<ChunkData> data(shard.chunks().size());
  std::vector<const ChunkData*> ptrs;
  for (size_t i = 0; i < shard.chunks().size(); ++i) {
    const LocalChunk& lc = shard.chunks()[i];
    EncodeChunk(lc.tensor, lc.index, grad.data() + lc.local_offset, lc.length,
                &data[i], pstrain::v1::DTYPE_F32);
    ptrs.push_back(&data[i]);
  }
  PushHeader header;
  header.set_worker(worker);
  header.set_session_id(session);
  header.set_clock(clock);
  header.set_read_version(clock);
  header.set_read_min_clock(clock);
  header.set_num_samples(8);
  if (!streamed) return shard.Push(header, ptrs);
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> push =
      shard.BeginPush(header);
  if (!push.ok()) return push.status();
  for (const ChunkData* c : ptrs) {
    absl::Status added = (*push)->Add(*c);
    if (!added.ok()) return added;
  }
  return (*push)->Finish();
}

// training.on_failure: elastic, mode async: a process that joined a rank
// again starts where the coordinator saw the slowest live worker, but the
// rank's dead process had pushed further (its last push was in flight when
// it stopped). The new session's push of such a clock is acknowledged and
// changes nothing; the rank's next clock is accepted. Within one session a
// different push for an accepted clock is still refused.
TEST(ElasticAsyncTest, JoinedRankPushOfAClockItsDeadProcessPushedIsSkipped) {
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_ASYNC, 2, /*staleness=*/4));
  ASSERT_NE(shard, nullptr);
  const std::vector<float> g = Constant(*shard, 0.5f);
  constexpr uint64_t kDead = 7, kJoined = 9, kLive = 3;
  ASSERT_TRUE(PushAs(false, *shard, 0, kLive, 0, g).ok());
  ASSERT_TRUE(PushAs(false, *shard, 1, kDead, 0, g).ok());
  ASSERT_TRUE(PushAs(false, *shard, 1, kDead, 1, g).ok());
  // The dead process's clocks 0 and 1 are in; it joins again from 0.
  shard->SetMembership({false, false}, {0, 0});
  const std::vector<float> before = Weights(*shard);
  const uint64_t version = shard->Stats().version();
  for (uint64_t clock : {0, 1}) {
    absl::StatusOr<PushResult> r =
        PushAs(false, *shard, 1, kJoined, clock, Constant(*shard, 2.0f));
    ASSERT_TRUE(r.ok()) << clock << ": " << r.status();
    EXPECT_FALSE(r->applied) << clock;
    EXPECT_EQ(r->version, version) << clock;
  }
  EXPECT_TRUE(BitIdentical(Weights(*shard), before));
  EXPECT_EQ(shard->Stats().version(), version);
  // The rank's next clock is the new session's, and is applied.
  absl::StatusOr<PushResult> next = PushAs(false, *shard, 1, kJoined, 2, g);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->applied);
  // Within the new session, a different push for clock 2: refused as ever.
  EXPECT_EQ(PushAs(false, *shard, 1, kJoined, 2, Constant(*shard, 1.0f))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // And the live worker, one session throughout, is not affected.
  EXPECT_EQ(PushAs(false, *shard, 0, kLive, 0, Constant(*shard, 1.0f))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

class ElasticSyncTest : public ::testing::TestWithParam<bool> {};

TEST_P(ElasticSyncTest, StandInRePushGetsTheOriginalAnswerOrIsAccepted) {
  const JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 2, 0);
  std::unique_ptr<Shard> a = MakeShard(config), b = MakeShard(config),
                         undisturbed = MakeShard(config);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(undisturbed, nullptr);
  const std::vector<float> g0 = Constant(*a, 0.25f), g1 = Constant(*a, 1.5f);
  constexpr uint64_t kDead = 7, kStandIn = 9, kLive = 3;
  for (Shard* s : {undisturbed.get()}) {
    ASSERT_TRUE(PushAs(GetParam(), *s, 1, kDead, 0, g1).ok());
    ASSERT_TRUE(PushAs(GetParam(), *s, 0, kLive, 0, g0).ok());
  }
  // Shard A got the dead process's push of step 0, then the live worker's:
  // the step completed.
  absl::StatusOr<PushResult> original = PushAs(GetParam(), *a, 1, kDead, 0, g1);
  ASSERT_TRUE(original.ok()) << original.status();
  ASSERT_TRUE(PushAs(GetParam(), *a, 0, kLive, 0, g0).ok());
  const std::vector<float> a_after = Weights(*a);
  const pstrain::v1::ShardStats a_stats = a->Stats();
  ASSERT_EQ(a_stats.version(), 1u);
  // The stand-in's re-push (new session, same step, same payload): the
  // original answer, and nothing changes.
  absl::StatusOr<PushResult> again = PushAs(GetParam(), *a, 1, kStandIn, 0, g1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->version, original->version);
  EXPECT_EQ(again->applied, original->applied);
  EXPECT_EQ(Weights(*a), a_after);
  EXPECT_EQ(a->Stats().version(), 1u);
  EXPECT_EQ(a->Stats().pushes(), a_stats.pushes());
  // A different payload for the accepted step is still refused.
  EXPECT_EQ(PushAs(GetParam(), *a, 1, kStandIn, 0, g0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Weights(*a), a_after);

  // Shard B never got it: the stand-in's push is accepted and completes the
  // step, exactly as the dead process's push would have.
  ASSERT_TRUE(PushAs(GetParam(), *b, 0, kLive, 0, g0).ok());
  absl::StatusOr<PushResult> fresh = PushAs(GetParam(), *b, 1, kStandIn, 0, g1);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_TRUE(fresh->applied);
  EXPECT_EQ(fresh->version, 1u);
  EXPECT_EQ(Weights(*b), Weights(*undisturbed));
  EXPECT_EQ(a_after, Weights(*undisturbed));
}

TEST_P(ElasticSyncTest, RePushOfTheStepBeforeTheLastGetsTheOriginalAnswer) {
  // The dead process pushed step 0 everywhere and step 1 to this shard; the
  // stand-in, holding the weights of step 0, re-pushes step 0 first.
  std::unique_ptr<Shard> shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_SYNC, 2, 0));
  ASSERT_NE(shard, nullptr);
  const std::vector<float> g0 = Constant(*shard, 0.25f),
                           g1 = Constant(*shard, 1.5f);
  absl::StatusOr<PushResult> step0 = PushAs(GetParam(), *shard, 1, 7, 0, g1);
  ASSERT_TRUE(step0.ok());
  ASSERT_TRUE(PushAs(GetParam(), *shard, 0, 3, 0, g0).ok());
  ASSERT_TRUE(PushAs(GetParam(), *shard, 1, 7, 1, g0).ok());
  const std::vector<float> before = Weights(*shard);
  const uint64_t pushes = shard->Stats().pushes();
  absl::StatusOr<PushResult> again = PushAs(GetParam(), *shard, 1, 9, 0, g1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->version, step0->version);
  EXPECT_EQ(Weights(*shard), before);
  EXPECT_EQ(shard->Stats().pushes(), pushes);
  // Step 1 again: the original answer too; step 1 then completes once.
  ASSERT_TRUE(PushAs(GetParam(), *shard, 1, 9, 1, g0).ok());
  absl::StatusOr<PushResult> live = PushAs(GetParam(), *shard, 0, 3, 1, g0);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->applied);
  EXPECT_EQ(shard->Stats().version(), 2u);
  EXPECT_EQ(shard->Stats().pushes(), pushes + 1);
}

INSTANTIATE_TEST_SUITE_P(BufferedAndOnArrival, ElasticSyncTest,
                         ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "OnArrival" : "Buffered";
                         });

// ---- Summing on arrival (plain sync): IncomingPush -------------------------

// Every chunk of `grad` (shard layout), encoded in chunks() order.
std::vector<ChunkData> EncodeAll(const Shard& shard,
                                 const std::vector<float>& grad) {
  std::vector<ChunkData> data(shard.chunks().size());
  for (size_t i = 0; i < shard.chunks().size(); ++i) {
    const LocalChunk& lc = shard.chunks()[i];
    EncodeChunk(lc.tensor, lc.index, grad.data() + lc.local_offset, lc.length,
                &data[i]);
  }
  return data;
}

PushHeader Header(uint32_t worker, uint64_t clock, uint64_t num_samples) {
  PushHeader h;
  h.set_worker(worker);
  h.set_clock(clock);
  h.set_read_min_clock(clock);
  h.set_num_samples(num_samples);
  return h;
}

// Streams chunks [0, n) of `data`, then abandons the push (a stream that
// broke half-way).
void StreamPart(Shard& shard, const PushHeader& h,
                const std::vector<ChunkData>& data, size_t n) {
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p = shard.BeginPush(h);
  ASSERT_TRUE(p.ok()) << p.status();
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE((*p)->Add(data[i]).ok());
}

// What a push must leave alone: weights, version, clocks, pushes, clipped
// terms, and the checkpoint state at the cut.
struct Observable {
  std::vector<float> weights;
  uint64_t version, pushes, clipped;
  std::vector<uint64_t> clocks;
};
Observable Observe(Shard& shard) {
  Observable o;
  o.weights = Weights(shard);
  o.version = shard.Stats().version();
  o.pushes = shard.Stats().pushes();
  o.clipped = shard.clipped_elements();
  absl::StatusOr<ShardState> st = shard.Snapshot();
  EXPECT_TRUE(st.ok()) << st.status();
  if (st.ok()) o.clocks = st->clocks;
  return o;
}
void ExpectSame(const Observable& a, const Observable& b) {
  EXPECT_TRUE(BitIdentical(a.weights, b.weights));
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.pushes, b.pushes);
  EXPECT_EQ(a.clipped, b.clipped);
  EXPECT_EQ(a.clocks, b.clocks);
}

// Two sync shards with three chunks, two workers, Adam (state that would
// show any difference), and gradients whose first chunk has a clipped term.
class OnArrivalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 2, 0);
    config.mutable_training()->mutable_optimizer()->set_kind(
        pstrain::v1::OptimizerConfig::ADAM);
    config.mutable_training()->mutable_optimizer()->set_base_lr(0.01);
    a_ = MakeShard(config);
    b_ = MakeShard(config);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    ASSERT_TRUE(a_->sums_on_arrival());
    ASSERT_GE(a_->chunks().size(), 3u);
    for (uint32_t w = 0; w < 2; ++w) {
      grads_[w] = RandomGrad(a_->num_elements(), 40 + w);
      grads_[w][1] = 1e10f;  // beyond 2^32 in the first step: clipped
      data_[w] = EncodeAll(*a_, grads_[w]);
    }
  }
  // Both workers' clean pushes of clock 0 (and clock 1, other values).
  void CleanSteps(Shard& shard) {
    for (uint32_t w = 0; w < 2; ++w) {
      ASSERT_TRUE(PushGrad(shard, w, 0, 0, 4 + w, grads_[w]).ok());
    }
    Step1(shard);
  }
  // Both workers' pushes of clock 1 (CleanSteps' second step).
  void Step1(Shard& shard) {
    for (uint32_t w = 0; w < 2; ++w) {
      ASSERT_TRUE(
          PushGrad(shard, w, 1, 1, 3, RandomGrad(shard.num_elements(), 50 + w))
              .ok());
    }
  }
  // Steps 0..19 of both workers' random gradients (num_samples 2 + w) on
  // a_: jobs(w, clock, data) pushes worker w's step, each job on a thread
  // of its own and a step's jobs all at once. After each step every job
  // succeeded, each push was accepted once, and a_'s weights are b_'s
  // after plain sequential pushes, bit for bit.
  using Job = std::function<absl::Status()>;
  void ConcurrentSteps(
      const std::function<std::vector<Job>(
          uint32_t, uint64_t, const std::vector<ChunkData>&)>& jobs) {
    for (int rep = 0; rep < 20; ++rep) {
      const uint64_t clock = rep;
      std::vector<std::vector<float>> g(2);
      std::vector<std::vector<ChunkData>> d(2);
      for (uint32_t w = 0; w < 2; ++w) {
        g[w] = RandomGrad(a_->num_elements(), 100 * rep + w);
        d[w] = EncodeAll(*a_, g[w]);
      }
      std::vector<Job> step;
      for (uint32_t w = 0; w < 2; ++w) {
        for (Job& j : jobs(w, clock, d[w])) step.push_back(std::move(j));
      }
      std::vector<absl::Status> statuses(step.size());
      std::vector<std::thread> threads;
      for (size_t i = 0; i < step.size(); ++i) {
        threads.emplace_back([&, i] { statuses[i] = step[i](); });
      }
      for (std::thread& t : threads) t.join();
      for (const absl::Status& st : statuses) ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(a_->Stats().pushes(), 2u * (rep + 1));
      for (uint32_t w : {1u, 0u}) {
        ASSERT_TRUE(PushGrad(*b_, w, clock, clock, 2 + w, g[w]).ok());
      }
      ASSERT_TRUE(BitIdentical(Weights(*a_), Weights(*b_))) << "step " << rep;
    }
  }
  // Step 0 done on a_: step 1 there, then a_ equals `ref` after
  // CleanSteps, bit for bit.
  void Step1AndCompare(Shard& ref) {
    Step1(*a_);
    CleanSteps(ref);
    ExpectSame(Observe(*a_), Observe(ref));
  }
  std::unique_ptr<Shard> a_, b_;
  std::vector<float> grads_[2];
  std::vector<ChunkData> data_[2];
};

// A stream that breaks after two of three chunks were summed (one with a
// clipped term) changes nothing observable; the retry (same gradients) and
// the rest of the job give bit-identical results to a job without the
// failure.
TEST_F(OnArrivalTest, PushFailingHalfWayChangesNothingAndRetryIsExact) {
  const Observable before = Observe(*a_);
  StreamPart(*a_, Header(0, 0, 4), data_[0], 2);
  ExpectSame(Observe(*a_), before);
  // Worker 1 pushes meanwhile; still nothing applied (worker 0 missing).
  ASSERT_TRUE(PushGrad(*a_, 1, 0, 0, 5, grads_[1]).ok());
  EXPECT_EQ(a_->Stats().version(), 0u);
  // The retry: all chunks again.
  absl::StatusOr<PushResult> r = PushGrad(*a_, 0, 0, 0, 4, grads_[0]);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied);
  Step1AndCompare(*b_);
  EXPECT_EQ(a_->clipped_elements(), 2u);  // once per worker, not per stream
}

// The same failure in the middle of a message: an invalid chunk after a
// summed one fails the stream and changes nothing observable.
TEST_F(OnArrivalTest, InvalidChunkAfterSummedOnesChangesNothing) {
  const Observable before = Observe(*a_);
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
      a_->BeginPush(Header(0, 0, 4));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Add(data_[0][0]).ok());
  ChunkData bad = data_[0][1];
  float nan = std::nanf("");
  std::memcpy(bad.mutable_data()->data(), &nan, sizeof(nan));
  EXPECT_EQ((*p)->Add(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*p)->Add(data_[0][0]).code(),
            absl::StatusCode::kInvalidArgument);  // sent twice
  p->reset();
  ExpectSame(Observe(*a_), before);
  // An incomplete push does not commit either.
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> q =
      a_->BeginPush(Header(0, 0, 4));
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE((*q)->Add(data_[0][1]).ok());
  EXPECT_EQ((*q)->Finish().status().code(), absl::StatusCode::kInvalidArgument);
  ExpectSame(Observe(*a_), before);
  CleanSteps(*a_);
  CleanSteps(*b_);
  ExpectSame(Observe(*a_), Observe(*b_));
}

// A summed chunk cannot be replaced: other values for it are refused and
// change nothing; the original values still complete the push exactly.
TEST_F(OnArrivalTest, OtherValuesForASummedChunkAreRefused) {
  StreamPart(*a_, Header(0, 0, 4), data_[0], 1);
  const Observable before = Observe(*a_);
  std::vector<float> other = grads_[0];
  other[0] += 1.0f;
  absl::StatusOr<PushResult> r = PushGrad(*a_, 0, 0, 0, 4, other);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("already summed"));
  ExpectSame(Observe(*a_), before);
  CleanSteps(*a_);
  CleanSteps(*b_);
  ExpectSame(Observe(*a_), Observe(*b_));
}

// Two streams of the same push at once (a retry while the first still
// runs), chunks interleaved: summed once; the later Finish gets the first
// one's answer.
TEST_F(OnArrivalTest, TwinStreamsOfOnePushCountOnce) {
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
      a_->BeginPush(Header(0, 0, 4));
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> q =
      a_->BeginPush(Header(0, 0, 4));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(q.ok());
  const size_t n = data_[0].size();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE((*p)->Add(data_[0][i]).ok());
    ASSERT_TRUE((*q)->Add(data_[0][n - 1 - i]).ok());
  }
  absl::StatusOr<PushResult> first = (*q)->Finish();
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<PushResult> second = (*p)->Finish();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->version, second->version);
  EXPECT_EQ(a_->Stats().pushes(), 1u);
  ASSERT_TRUE(PushGrad(*a_, 1, 0, 0, 5, grads_[1]).ok());
  Step1AndCompare(*b_);
}

// Workers' streams summed concurrently on threads, chunk by chunk in
// different orders, equal the plain sequential pushes bit for bit.
TEST_F(OnArrivalTest, ConcurrentStreamsAreOrderIndependent) {
  ConcurrentSteps([&](uint32_t w, uint64_t clock,
                      const std::vector<ChunkData>& d) -> std::vector<Job> {
    return {[&, w, clock] {
      absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
          a_->BeginPush(Header(w, clock, 2 + w));
      if (!p.ok()) return p.status();
      const size_t n = d.size();
      for (size_t i = 0; i < n; ++i) {
        // Worker 1 sends last chunk first.
        absl::Status added = (*p)->Add(d[w == 0 ? i : n - 1 - i]);
        if (!added.ok()) return added;
      }
      return (*p)->Finish().status();
    }};
  });
}

// A restore while a push is half summed discards it: the rest of that
// stream adds nothing and cannot commit (UNAVAILABLE, a retry is safe), and
// the job continues exactly as from the checkpoint.
TEST_F(OnArrivalTest, RestoreWhileHalfSummedLeavesNothingOfIt) {
  absl::StatusOr<ShardState> cut = a_->Snapshot();
  ASSERT_TRUE(cut.ok());
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
      a_->BeginPush(Header(0, 0, 4));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Add(data_[0][0]).ok());
  // Other values than the ones summed before the restore.
  std::vector<float> other = grads_[0];
  other[0] += 1.0f;
  ASSERT_TRUE(a_->Restore(*cut).ok());
  for (size_t i = 1; i < data_[0].size(); ++i) {
    ASSERT_TRUE((*p)->Add(data_[0][i]).ok());
  }
  EXPECT_EQ((*p)->Finish().status().code(), absl::StatusCode::kUnavailable);
  grads_[0] = other;
  CleanSteps(*a_);
  CleanSteps(*b_);
  ExpectSame(Observe(*a_), Observe(*b_));
}

// The clock is checked when the stream starts, before anything is read.
TEST_F(OnArrivalTest, WrongClockIsRefusedAtTheStart) {
  EXPECT_EQ(a_->BeginPush(Header(0, 1, 4)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a_->BeginPush(Header(7, 0, 4)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(a_->BeginPush(Header(0, 0, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Async and backup workers keep whole pushes: no streaming there.
TEST(OnArrivalModesTest, OnlyPlainSyncSumsOnArrival) {
  std::unique_ptr<Shard> async_shard =
      MakeShard(SmallConfig(pstrain::v1::MODE_ASYNC, 2, -1));
  std::unique_ptr<Shard> backups = MakeShard(BackupConfig(3, 1));
  ASSERT_NE(async_shard, nullptr);
  ASSERT_NE(backups, nullptr);
  EXPECT_FALSE(async_shard->sums_on_arrival());
  EXPECT_FALSE(backups->sums_on_arrival());
  EXPECT_EQ(async_shard->BeginPush(Header(0, 0, 1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// ---- Applying on arrival (shard.h) -----------------------------------------

// Waits (bounded) until the applier applied at least `n` chunks of the open
// step.
bool AwaitAppliedEarly(const Shard& shard, size_t n) {
  const absl::Time deadline = absl::Now() + kLongWait;
  while (shard.chunks_applied_early() < n) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// The OnArrivalTest shards (a_, b_: applying on arrival) and a reference
// that applies the whole step at its commit.
class ApplyOnArrivalTest : public OnArrivalTest {
 protected:
  void SetUp() override {
    OnArrivalTest::SetUp();
    JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 2, 0);
    config.mutable_training()->mutable_optimizer()->set_kind(
        pstrain::v1::OptimizerConfig::ADAM);
    config.mutable_training()->mutable_optimizer()->set_base_lr(0.01);
    absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(config);
    ASSERT_TRUE(job.ok()) << job.status();
    ShardOptions options = ShardOptionsFromJob(*job, 0);
    options.early_apply = false;
    absl::StatusOr<std::unique_ptr<Shard>> ref =
        Shard::Create(std::move(options));
    ASSERT_TRUE(ref.ok()) << ref.status();
    ref_ = *std::move(ref);
  }
  std::unique_ptr<Shard> ref_;
};

// A chunk is applied as soon as both workers' contributions are summed,
// before any push commits; meanwhile nobody reads the half-applied step: a
// pull of the next clock waits for the commit, a re-read of the open step
// waits too (and then reads the committed version), checkpoint cuts of the
// open step are passed. After the commit the weights equal those of
// applying at the commit, bit for bit.
TEST_F(ApplyOnArrivalTest, NobodyReadsAHalfAppliedStep) {
  // Both workers streaming, neither committed: worker 1 sent every chunk,
  // worker 0 the first.
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> q =
      a_->BeginPush(Header(1, 0, 5));
  ASSERT_TRUE(q.ok()) << q.status();
  for (const ChunkData& c : data_[1]) ASSERT_TRUE((*q)->Add(c).ok());
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
      a_->BeginPush(Header(0, 0, 4));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->Add(data_[0][0]).ok());
  ASSERT_TRUE(AwaitAppliedEarly(*a_, 1));
  EXPECT_EQ(a_->chunks_applied_early(), 1u);
  EXPECT_EQ(a_->Stats().version(), 0u);
  EXPECT_EQ(a_->Stats().pushes(), 0u);
  // No push recorded, but the step is half applied: the cut is passed.
  EXPECT_EQ(a_->Snapshot().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a_->SnapshotAt(0, absl::Now() + kShortWait).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Worker 1 reading clock 0 again: waits for the commit.
  absl::StatusOr<PullResult> reread = a_->Pull(1, 0, absl::Now() + kShortWait);
  EXPECT_EQ(reread.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(reread.status().message(), HasSubstr("half applied"));
  ASSERT_TRUE((*q)->Finish().ok());
  EXPECT_EQ(a_->Pull(1, 1, absl::Now() + kShortWait).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // A pull of clock 1 waiting across the commit reads the whole step.
  for (size_t i = 1; i < data_[0].size(); ++i) {
    ASSERT_TRUE((*p)->Add(data_[0][i]).ok());
  }
  absl::StatusOr<PullResult> next;
  std::thread reader([&] { next = a_->Pull(1, 1, absl::Now() + kLongWait); });
  absl::StatusOr<PushResult> r = (*p)->Finish();
  reader.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(a_->chunks_applied_early(), 0u);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->version, 1u);
  for (uint32_t w : {1u, 0u}) {
    ASSERT_TRUE(PushGrad(*ref_, w, 0, 0, 4 + w, grads_[w]).ok());
  }
  EXPECT_TRUE(BitIdentical(next->values, Weights(*ref_)));
  ExpectSameSlotsAndExponents(*a_, *ref_);
}

// Every chunk final and applied, then worker 0's stream breaks before its
// half-close: its contributions stay. A retry with other values, or the same
// values with another num_samples, is refused and changes nothing; the
// retry of the same push commits, and the job goes on bit for bit as one
// that applied at the commit and never failed.
TEST_F(ApplyOnArrivalTest, HalfFailedPushAfterItsChunksWereApplied) {
  ASSERT_TRUE(PushGrad(*a_, 1, 0, 0, 5, grads_[1]).ok());
  StreamPart(*a_, Header(0, 0, 4), data_[0], data_[0].size());
  ASSERT_TRUE(AwaitAppliedEarly(*a_, data_[0].size()));
  EXPECT_EQ(a_->Stats().version(), 0u);
  EXPECT_EQ(a_->Stats().pushes(), 1u);
  std::vector<float> other = grads_[0];
  other[a_->num_elements() - 1] += 1.0f;  // the last chunk only
  absl::StatusOr<PushResult> refused = PushGrad(*a_, 0, 0, 0, 4, other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("already summed"));
  refused = PushGrad(*a_, 0, 0, 0, 3, grads_[0]);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a_->Stats().version(), 0u);
  absl::StatusOr<PushResult> r = PushGrad(*a_, 0, 0, 0, 4, grads_[0]);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied);
  Step1AndCompare(*ref_);
  EXPECT_EQ(a_->clipped_elements(), 2u);
}

// A restore while the open step is half applied replaces weights and slots
// and forgets the step; the job then continues as from the checkpoint.
TEST_F(ApplyOnArrivalTest, RestoreWhileHalfAppliedLeavesNothingOfIt) {
  absl::StatusOr<ShardState> cut = a_->Snapshot();
  ASSERT_TRUE(cut.ok());
  ASSERT_TRUE(PushGrad(*a_, 1, 0, 0, 5, grads_[1]).ok());
  StreamPart(*a_, Header(0, 0, 4), data_[0], 2);
  ASSERT_TRUE(AwaitAppliedEarly(*a_, 2));
  ASSERT_TRUE(a_->Restore(*cut).ok());
  EXPECT_EQ(a_->chunks_applied_early(), 0u);
  absl::StatusOr<ShardState> again = a_->Snapshot();
  ASSERT_TRUE(again.ok()) << again.status();
  for (size_t k = 0; k < cut->chunks.size(); ++k) {
    EXPECT_TRUE(BitIdentical(again->chunks[k].weights, cut->chunks[k].weights));
    EXPECT_TRUE(BitIdentical(again->chunks[k].slots, cut->chunks[k].slots));
  }
  CleanSteps(*a_);
  CleanSteps(*ref_);
  // Statistics (pushes, clipped terms) keep counting across a restore.
  EXPECT_TRUE(BitIdentical(Weights(*a_), Weights(*ref_)));
  EXPECT_EQ(a_->Stats().version(), ref_->Stats().version());
  absl::StatusOr<ShardState> at_a = a_->Snapshot();
  absl::StatusOr<ShardState> at_ref = ref_->Snapshot();
  ASSERT_TRUE(at_a.ok()) << at_a.status();
  ASSERT_TRUE(at_ref.ok()) << at_ref.status();
  for (size_t k = 0; k < at_a->chunks.size(); ++k) {
    EXPECT_TRUE(BitIdentical(at_a->chunks[k].slots, at_ref->chunks[k].slots));
  }
}

// Three workers' streams on threads, chunks in different orders, applied on
// arrival while the others still stream, for several steps with pulls in
// between: bit-identical to one shard applying at the commit.
TEST(ApplyOnArrivalStepsTest, ConcurrentStreamsEqualApplyingAtTheCommit) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 3, 0);
  config.mutable_training()->mutable_optimizer()->set_kind(
      pstrain::v1::OptimizerConfig::ADAM);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.01);
  absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(config);
  ASSERT_TRUE(job.ok()) << job.status();
  std::unique_ptr<Shard> shards[2];
  for (int i = 0; i < 2; ++i) {
    ShardOptions options = ShardOptionsFromJob(*job, 0);
    options.early_apply = i == 0;
    absl::StatusOr<std::unique_ptr<Shard>> s =
        Shard::Create(std::move(options));
    ASSERT_TRUE(s.ok()) << s.status();
    shards[i] = *std::move(s);
  }
  Shard& early = *shards[0];
  Shard& at_commit = *shards[1];
  const size_t n = early.num_elements();
  for (uint64_t step = 0; step < 12; ++step) {
    std::vector<std::vector<ChunkData>> d(3);
    std::vector<std::vector<float>> g(3);
    for (uint32_t w = 0; w < 3; ++w) {
      g[w] = RandomGrad(n, 1000 + 3 * step + w);
      d[w] = EncodeAll(early, g[w]);
    }
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (uint32_t w = 0; w < 3; ++w) {
      threads.emplace_back([&, w] {
        // Each worker first reads the step, as a worker does.
        if (!early.Pull(w, step, absl::Now() + kLongWait).ok()) ++failures;
        absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
            early.BeginPush(Header(w, step, 2 + w));
        if (!p.ok()) {
          ++failures;
          return;
        }
        const size_t m = d[w].size();
        for (size_t i = 0; i < m; ++i) {
          const size_t k = (i + w + step) % m;  // different orders
          if (!(*p)->Add(d[w][k]).ok()) ++failures;
        }
        if (!(*p)->Finish().ok()) ++failures;
      });
    }
    for (std::thread& t : threads) t.join();
    ASSERT_EQ(failures.load(), 0) << "step " << step;
    for (uint32_t w = 0; w < 3; ++w) {
      ASSERT_TRUE(PushGrad(at_commit, w, step, step, 2 + w, g[w]).ok());
    }
    ASSERT_TRUE(BitIdentical(Weights(early), Weights(at_commit)))
        << "step " << step;
  }
  ExpectSameSlotsAndExponents(early, at_commit);
}

// ---- Held terms (ShardOptions.hold_first_term, shard.h) ------------------

// A one-worker sync softmax 2000 -> 5 with 16 KiB chunks: 4096, 4096, 1808
// weights and the 5 biases. Adam, whose slots would show any difference.
std::unique_ptr<Shard> MakeHeldShard(bool hold, bool early_apply,
                                     bool apply_terms_on_arrival = true) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 1, 0);
  config.mutable_model()->set_input_dim(2000);
  config.mutable_model()->set_num_classes(5);
  config.mutable_data()->set_num_features(2000);
  config.mutable_data()->set_num_classes(5);
  config.mutable_server()->set_chunk_bytes(16384);
  config.mutable_training()->mutable_optimizer()->set_kind(
      pstrain::v1::OptimizerConfig::ADAM);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.01);
  absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(config);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return nullptr;
  ShardOptions options = ShardOptionsFromJob(*job, 0);
  options.hold_first_term = hold;
  options.early_apply = early_apply;
  options.apply_terms_on_arrival = apply_terms_on_arrival;
  absl::StatusOr<std::unique_ptr<Shard>> shard =
      Shard::Create(std::move(options));
  EXPECT_TRUE(shard.ok()) << shard.status();
  if (!shard.ok()) return nullptr;
  EXPECT_EQ((*shard)->chunks().size(), 4u);
  return *std::move(shard);
}

// RandomGrad with the edge values of the conversions: +0 and -0, the
// smallest and the largest subnormal, and the smallest normal (rounded to
// 0 or to a few bits by the fixed point); in chunk 0 (elements 0..4095)
// terms just inside the fast conversion's range and beyond it (the scalar
// path, not clipped, in the first step); in chunk 1 in odd steps a spike
// far beyond the step before's largest term, clipped, so a chunk held and
// applied in one step takes the scalar path in the next and is held again
// in the one after.
std::vector<float> EdgeGrad(size_t n, uint32_t seed, uint64_t step) {
  std::vector<float> g = RandomGrad(n, seed);
  const float edges[] = {0.0f,
                         -0.0f,
                         std::numeric_limits<float>::denorm_min(),
                         -std::numeric_limits<float>::denorm_min(),
                         0x1.fffffcp-127f,
                         -std::numeric_limits<float>::min()};
  for (size_t i = 0; i < std::size(edges); ++i) {
    g[100 + i] = edges[i];         // chunk 0
    g[4096 + 300 + i] = edges[i];  // chunk 1
    g[8192 + 17 + i] = edges[i];   // chunk 2
  }
  if (step == 0) {
    g[2000] = 0x1.fp19f;  // n * g * 2^30 below 2^51 for n = 1: fast
    g[3000] = -3e6f;      // beyond the fast range: scalar
  }
  // Chunk 1's other terms are below 50 * 32: a spike of 1e9 (2^20 more) is
  // clipped in every odd step.
  if (step % 2 == 1) g[4096 + 5] = 1e9f;
  return g;
}

// Where a held term is applied: at the commit, by the applier thread, or
// by the stream that receives it.
enum class HeldApply { kAtCommit, kByApplier, kOnArrival };
class HeldTermTest : public ::testing::TestWithParam<HeldApply> {};

// A one-worker shard holding its terms and one summing them into the fixed
// point give the same weights, slots, exponents and clipped counts, bit for
// bit, over steps with the edge values and num_samples powers of two or
// not, chunks applied at the commit, by the applier or on arrival.
TEST_P(HeldTermTest, SameBitsAsTheFixedPointSum) {
  const bool early_apply = GetParam() != HeldApply::kAtCommit;
  std::unique_ptr<Shard> held =
      MakeHeldShard(true, early_apply, GetParam() == HeldApply::kOnArrival);
  std::unique_ptr<Shard> summed = MakeHeldShard(false, early_apply);
  ASSERT_NE(held, nullptr);
  ASSERT_NE(summed, nullptr);
  const size_t n = held->num_elements();
  const uint64_t samples[] = {1, 3, 4, 6, 32, 7};
  for (uint64_t step = 0; step < 6; ++step) {
    const std::vector<float> g = EdgeGrad(n, step, step);
    ASSERT_TRUE(PushGrad(*held, 0, step, step, samples[step], g).ok());
    ASSERT_TRUE(PushGrad(*summed, 0, step, step, samples[step], g).ok());
    ASSERT_TRUE(BitIdentical(Weights(*held), Weights(*summed)))
        << "step " << step;
    EXPECT_EQ(held->clipped_elements(), summed->clipped_elements());
  }
  // The spikes of odd steps were clipped, the term beyond the fast range
  // was not.
  EXPECT_EQ(held->clipped_elements(), 3u);
  ExpectSameSlotsAndExponents(*held, *summed);
}

INSTANTIATE_TEST_SUITE_P(Apply, HeldTermTest,
                         ::testing::Values(HeldApply::kAtCommit,
                                           HeldApply::kByApplier,
                                           HeldApply::kOnArrival));

// A held term applied straight from its floats is the exact fixed-point
// value: float(llrint(n * g * 2^30) * 2^-30 / n) in the first step (E = 32,
// 62 bits), computed here with the scalar conversions, for num_samples a
// power of two (the divide done as a multiply) and not.
TEST(HeldTermOneStepTest, AppliedTermIsTheExactFixedPointValue) {
  for (const uint64_t samples : {1u, 3u, 4u, 7u, 64u}) {
    // SGD: w - lr * g, lr a power of two.
    JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 1, 0);
    config.mutable_training()->mutable_optimizer()->set_base_lr(0.5);
    std::unique_ptr<Shard> shard = MakeShard(config);
    ASSERT_NE(shard, nullptr);
    const std::vector<float> w0 = Weights(*shard);
    std::vector<float> g = RandomGrad(shard->num_elements(), 11);
    g[0] = std::numeric_limits<float>::denorm_min();
    g[1] = -0.0f;
    g[2] = 0x1.fp19f / samples;  // near the fast range's edge
    g[3] = 1e-12f;               // below the fixed point's resolution
    g[4] = -0x1.fffffcp-127f;
    ASSERT_TRUE(PushGrad(*shard, 0, 0, 0, samples, g).ok());
    const std::vector<float> w1 = Weights(*shard);
    for (size_t i = 0; i < g.size(); ++i) {
      const double n = static_cast<double>(samples);
      const float applied =
          static_cast<float>(static_cast<double>(std::llrint(
                                 n * static_cast<double>(g[i]) * 0x1p30)) *
                             0x1p-30 / n);
      EXPECT_EQ(w1[i], w0[i] - 0.5f * applied)
          << "samples " << samples << " element " << i;
    }
  }
}

// Applying on arrival, the stream applies each term as it adds it: the
// chunks are applied before Add returns (no applier thread involved), and
// the step completed by the rest of the push is the fixed-point sum's.
TEST(HeldTermOnArrivalTest, TheStreamAppliesEachTermAsItAddsIt) {
  std::unique_ptr<Shard> held = MakeHeldShard(true, true);
  std::unique_ptr<Shard> summed = MakeHeldShard(false, false);
  ASSERT_NE(held, nullptr);
  ASSERT_NE(summed, nullptr);
  // Step 2's values: every term held (none clipped or beyond the fast
  // range).
  const std::vector<float> g = EdgeGrad(held->num_elements(), 2, 2);
  const std::vector<ChunkData> data = EncodeAll(*held, g);
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
      held->BeginPush(Header(0, 0, 3));
  ASSERT_TRUE(p.ok()) << p.status();
  for (size_t i = 0; i < data.size(); ++i) {
    ASSERT_TRUE((*p)->Add(data[i]).ok());
    EXPECT_EQ(held->chunks_applied_early(), i + 1);
  }
  ASSERT_TRUE((*p)->Finish().ok());
  EXPECT_EQ(held->chunks_applied_early(), 0u);  // the step committed
  ASSERT_TRUE(PushGrad(*summed, 0, 0, 0, 3, g).ok());
  EXPECT_TRUE(BitIdentical(Weights(*held), Weights(*summed)));
}

// The optimizer's pass in blocks (ShardOptions.apply_block) changes
// nothing, bit for bit: chunks of several blocks and a remainder, rules
// with no slot array, one and two, over several steps, for each way a
// chunk is applied: in sync, one worker's term applied from the pushed
// floats by its stream, one worker's term held for the applier, and three
// workers' fixed-point sum; in async, each push decoded and applied, with
// DC-ASGD's correction and the staleness-aware learning rate, on an fp32
// and a bf16 wire.
enum class BlockPath { kTermOnArrival, kHeldTerm, kSum, kAsync, kAsyncBf16 };
class ApplyBlockTest
    : public ::testing::TestWithParam<
          std::tuple<pstrain::v1::OptimizerConfig::Kind, BlockPath>> {};

std::unique_ptr<Shard> MakeBlockShard(pstrain::v1::OptimizerConfig::Kind kind,
                                      BlockPath path, uint64_t apply_block) {
  JobConfig config =
      path == BlockPath::kAsync || path == BlockPath::kAsyncBf16
          ? AsyncRulesConfig(/*staleness_aware_lr=*/true, /*dc_lambda=*/0.5)
          : SmallConfig(pstrain::v1::MODE_SYNC, path == BlockPath::kSum ? 3 : 1,
                        0);
  config.mutable_model()->set_input_dim(2000);
  config.mutable_model()->set_num_classes(5);
  config.mutable_data()->set_num_features(2000);
  config.mutable_data()->set_num_classes(5);
  config.mutable_server()->set_chunk_bytes(16384);  // 4096 elements
  config.mutable_training()->mutable_optimizer()->set_kind(kind);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.01);
  config.mutable_training()->mutable_optimizer()->set_momentum(0.9);
  absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(config);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return nullptr;
  ShardOptions options = ShardOptionsFromJob(*job, 0);
  options.apply_terms_on_arrival = path == BlockPath::kTermOnArrival;
  options.apply_block = apply_block;
  if (path == BlockPath::kAsyncBf16) {
    options.wire_dtype = pstrain::v1::DTYPE_BF16;
  }
  absl::StatusOr<std::unique_ptr<Shard>> shard =
      Shard::Create(std::move(options));
  EXPECT_TRUE(shard.ok()) << shard.status();
  return shard.ok() ? *std::move(shard) : nullptr;
}

TEST_P(ApplyBlockTest, BlocksEqualOnePassOverTheChunk) {
  const auto [kind, path] = GetParam();
  // Chunks of 4096 and 1808 elements: 4 blocks of 1024, and 1 and a
  // remainder of 784.
  std::unique_ptr<Shard> blocked = MakeBlockShard(kind, path, 1024);
  std::unique_ptr<Shard> whole = MakeBlockShard(kind, path, 0);
  ASSERT_NE(blocked, nullptr);
  ASSERT_NE(whole, nullptr);
  ASSERT_EQ(blocked->chunks()[0].length, 4096u);
  const bool async = path == BlockPath::kAsync || path == BlockPath::kAsyncBf16;
  const pstrain::v1::DType wire = path == BlockPath::kAsyncBf16
                                      ? pstrain::v1::DTYPE_BF16
                                      : pstrain::v1::DTYPE_F32;
  const uint32_t workers = path == BlockPath::kSum ? 3 : async ? 2 : 1;
  for (uint64_t step = 0; step < 3; ++step) {
    for (uint32_t w = 0; w < workers; ++w) {
      const std::vector<float> g =
          RandomGrad(blocked->num_elements(), 10 * step + w);
      if (async) {
        // Worker 1 pulls only once, so its later pushes are corrected and
        // scaled for worker 0's updates since (DC-ASGD, staleness).
        for (Shard* shard : {blocked.get(), whole.get()}) {
          if (w == 0 || step == 0) MustPull(*shard, w, w == 0 ? step : 0);
          ASSERT_TRUE(PushGrad(*shard, w, step, 0, 2 + w, g, wire).ok());
        }
        continue;
      }
      for (Shard* shard : {blocked.get(), whole.get()}) {
        absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
            shard->BeginPush(Header(w, step, 2 + w));
        ASSERT_TRUE(p.ok()) << p.status();
        for (const ChunkData& c : EncodeAll(*shard, g)) {
          ASSERT_TRUE((*p)->Add(c).ok());
        }
        ASSERT_TRUE((*p)->Finish().ok());
      }
    }
    ASSERT_TRUE(BitIdentical(Weights(*blocked), Weights(*whole)))
        << "step " << step;
  }
  EXPECT_EQ(blocked->Stats().version(), async ? 6u : 3u);
  // The step changed the weights (the comparison is not of two untouched
  // models).
  EXPECT_FALSE(BitIdentical(Weights(*blocked),
                            Weights(*MakeBlockShard(kind, path, 1024))));
}

INSTANTIATE_TEST_SUITE_P(
    RulesAndPaths, ApplyBlockTest,
    ::testing::Combine(::testing::Values(pstrain::v1::OptimizerConfig::SGD,
                                         pstrain::v1::OptimizerConfig::MOMENTUM,
                                         pstrain::v1::OptimizerConfig::ADAGRAD,
                                         pstrain::v1::OptimizerConfig::ADAM,
                                         pstrain::v1::OptimizerConfig::ADAMW),
                       ::testing::Values(BlockPath::kTermOnArrival,
                                         BlockPath::kHeldTerm, BlockPath::kSum,
                                         BlockPath::kAsync,
                                         BlockPath::kAsyncBf16)),
    [](const auto& info) {
      const BlockPath path = std::get<1>(info.param);
      return absl::StrCat(
          pstrain::v1::OptimizerConfig::Kind_Name(std::get<0>(info.param)),
          path == BlockPath::kTermOnArrival ? "TermOnArrival"
          : path == BlockPath::kHeldTerm    ? "HeldTerm"
          : path == BlockPath::kSum         ? "Sum"
          : path == BlockPath::kAsync       ? "Async"
                                            : "AsyncBf16");
    });

// One worker's term applied on arrival in one pass (the held conversion
// inside the rule's loop, Optimizer::ApplyHeld: SGD and momentum, with and
// without weight decay and Nesterov) gives the weights and momentum of the
// two passes (HeldToFloat, then the rule) bit for bit, over several steps;
// as do the rules without a one-pass form and a num_samples that is not a
// power of two (both take the two passes either way).
struct HeldCase {
  pstrain::v1::OptimizerConfig::Kind kind;
  double weight_decay;
  bool nesterov;
  uint64_t num_samples;
};
class ApplyHeldTest : public ::testing::TestWithParam<HeldCase> {};

std::unique_ptr<Shard> MakeHeldShard(const HeldCase& c, bool one_pass) {
  JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, 1, 0);
  config.mutable_model()->set_input_dim(2000);
  config.mutable_model()->set_num_classes(5);
  config.mutable_data()->set_num_features(2000);
  config.mutable_data()->set_num_classes(5);
  config.mutable_server()->set_chunk_bytes(16384);  // 4096 elements
  auto* opt = config.mutable_training()->mutable_optimizer();
  opt->set_kind(c.kind);
  opt->set_base_lr(0.01);
  opt->set_momentum(0.9);
  opt->set_nesterov(c.nesterov);
  opt->set_weight_decay(c.weight_decay);
  absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(config);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return nullptr;
  ShardOptions options = ShardOptionsFromJob(*job, 0);
  options.apply_held_in_one_pass = one_pass;
  absl::StatusOr<std::unique_ptr<Shard>> shard =
      Shard::Create(std::move(options));
  EXPECT_TRUE(shard.ok()) << shard.status();
  return shard.ok() ? *std::move(shard) : nullptr;
}

TEST_P(ApplyHeldTest, OnePassEqualsTwoPasses) {
  const HeldCase& c = GetParam();
  std::unique_ptr<Shard> one = MakeHeldShard(c, /*one_pass=*/true);
  std::unique_ptr<Shard> two = MakeHeldShard(c, /*one_pass=*/false);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  for (uint64_t step = 0; step < 4; ++step) {
    std::vector<float> g = RandomGrad(one->num_elements(), 7 * step + 1);
    // Magnitudes far apart, so that some terms round in fixed point.
    for (size_t i = 0; i < g.size(); i += 3) g[i] *= 1e-6f;
    for (size_t i = 1; i < g.size(); i += 5) g[i] *= 300.0f;
    for (Shard* shard : {one.get(), two.get()}) {
      // Streamed, as the service sums on arrival: each chunk's term is
      // applied when it is added.
      absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
          shard->BeginPush(Header(0, step, c.num_samples));
      ASSERT_TRUE(p.ok()) << p.status();
      for (const ChunkData& chunk : EncodeAll(*shard, g)) {
        ASSERT_TRUE((*p)->Add(chunk).ok());
      }
      // Every chunk was applied as it was added (the path under test).
      EXPECT_EQ(shard->chunks_applied_early(), shard->chunks().size());
      ASSERT_TRUE((*p)->Finish().ok());
    }
    ASSERT_TRUE(BitIdentical(Weights(*one), Weights(*two))) << "step " << step;
  }
  EXPECT_EQ(one->Stats().version(), 4u);
  // The steps changed the weights.
  EXPECT_FALSE(BitIdentical(Weights(*one), Weights(*MakeHeldShard(c, true))));
}

INSTANTIATE_TEST_SUITE_P(
    RulesAndSamples, ApplyHeldTest,
    ::testing::Values(
        HeldCase{pstrain::v1::OptimizerConfig::SGD, 0, false, 1},
        HeldCase{pstrain::v1::OptimizerConfig::SGD, 0, false, 64},
        HeldCase{pstrain::v1::OptimizerConfig::SGD, 0.01, false, 4},
        HeldCase{pstrain::v1::OptimizerConfig::SGD, 0, false, 3},
        HeldCase{pstrain::v1::OptimizerConfig::MOMENTUM, 0, false, 2},
        HeldCase{pstrain::v1::OptimizerConfig::MOMENTUM, 0.01, false, 8},
        HeldCase{pstrain::v1::OptimizerConfig::MOMENTUM, 0, true, 16},
        HeldCase{pstrain::v1::OptimizerConfig::MOMENTUM, 0.01, true, 1},
        HeldCase{pstrain::v1::OptimizerConfig::ADAM, 0, false, 4}),
    [](const auto& info) {
      const HeldCase& c = info.param;
      return absl::StrCat(pstrain::v1::OptimizerConfig::Kind_Name(c.kind),
                          c.weight_decay != 0 ? "Decay" : "",
                          c.nesterov ? "Nesterov" : "", "Samples",
                          c.num_samples);
    });

TEST(ApplyBlockTest, CreateRefusesABlockOfPartVectors) {
  absl::StatusOr<pstrain::v1::JobSpec> job =
      MakeJobSpec(SmallConfig(pstrain::v1::MODE_SYNC, 1, 0));
  ASSERT_TRUE(job.ok()) << job.status();
  ShardOptions options = ShardOptionsFromJob(*job, 0);
  options.apply_block = 1000;
  absl::StatusOr<std::unique_ptr<Shard>> shard = Shard::Create(options);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.status().message(),
            "apply_block 1000 is not a multiple of 16 elements");
}

// A NaN is refused as before (INVALID_ARGUMENT, nothing changed), whole or
// streamed after a held chunk; the retry with valid values applies exactly
// what the fixed-point sum does.
class HeldTermNanTest : public ::testing::TestWithParam<bool> {};

TEST_P(HeldTermNanTest, NanIsRefusedAndChangesNothing) {
  // Early apply: each term is applied as it arrives (ApplyTermLocked).
  std::unique_ptr<Shard> held = MakeHeldShard(true, GetParam());
  std::unique_ptr<Shard> summed = MakeHeldShard(false, false);
  ASSERT_NE(held, nullptr);
  ASSERT_NE(summed, nullptr);
  const size_t n = held->num_elements();
  const std::vector<float> g0 = EdgeGrad(n, 1, 0), g1 = EdgeGrad(n, 2, 0);
  // Streamed into zeros: the Inf is found in the pass that copies the chunk
  // as the held term (or, applying on arrival, before it is applied), and
  // nothing changes.
  {
    const Observable fresh = Observe(*held);
    std::vector<float> inf_first = g0;
    inf_first[5] = -std::numeric_limits<float>::infinity();
    absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
        held->BeginPush(Header(0, 0, 3));
    ASSERT_TRUE(p.ok()) << p.status();
    const absl::Status st = (*p)->Add(EncodeAll(*held, inf_first)[0]);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("chunk 0: element 5 is not finite"));
    ExpectSame(Observe(*held), fresh);
  }
  ASSERT_TRUE(PushGrad(*held, 0, 0, 0, 3, g0).ok());
  ASSERT_TRUE(PushGrad(*summed, 0, 0, 0, 3, g0).ok());
  std::vector<float> bad = g1;
  bad[4096 + 7] = std::numeric_limits<float>::quiet_NaN();
  const Observable before = Observe(*held);
  EXPECT_EQ(PushGrad(*held, 0, 1, 1, 5, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Streamed: chunk 0 held, then the NaN chunk refused; the stream is
  // abandoned (its chunk 0 stays as the worker's contribution).
  const std::vector<ChunkData> data = EncodeAll(*held, bad);
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
      held->BeginPush(Header(0, 1, 5));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->Add(data[0]).ok());
  const absl::Status st = (*p)->Add(data[1]);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("chunk 1: element 7 is not finite"));
  // Applying on arrival, chunk 0 is applied already: the step is half
  // applied and no reader can see it (Observe would wait); what the
  // retry below completes shows that nothing else changed.
  if (!GetParam()) ExpectSame(Observe(*held), before);
  // A second stream of the push: chunk 0 is summed already, the NaN is
  // refused all the same.
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> again =
      held->BeginPush(Header(0, 1, 5));
  ASSERT_TRUE(again.ok()) << again.status();
  std::vector<float> bad0 = g1;
  bad0[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ((*again)->Add(EncodeAll(*held, bad0)[0]).code(),
            absl::StatusCode::kInvalidArgument);
  if (!GetParam()) ExpectSame(Observe(*held), before);
  ASSERT_TRUE(PushGrad(*held, 0, 1, 1, 5, g1).ok());
  ASSERT_TRUE(PushGrad(*summed, 0, 1, 1, 5, g1).ok());
  EXPECT_TRUE(BitIdentical(Weights(*held), Weights(*summed)));
}

INSTANTIATE_TEST_SUITE_P(EarlyApply, HeldTermNanTest, ::testing::Bool());

// A restore while a term is held (applied at the commit, which has not
// come) discards it: the step summed afterwards is exactly that of a shard
// that never saw it.
TEST(HeldTermRestoreTest, RestoreDiscardsAHeldTerm) {
  std::unique_ptr<Shard> held = MakeHeldShard(true, false);
  std::unique_ptr<Shard> fresh = MakeHeldShard(false, false);
  ASSERT_NE(held, nullptr);
  ASSERT_NE(fresh, nullptr);
  const size_t n = held->num_elements();
  absl::StatusOr<ShardState> cut = held->Snapshot();
  ASSERT_TRUE(cut.ok()) << cut.status();
  StreamPart(*held, Header(0, 0, 2), EncodeAll(*held, EdgeGrad(n, 3, 0)), 2);
  ASSERT_TRUE(held->Restore(*cut).ok());
  const std::vector<float> g = EdgeGrad(n, 5, 0);
  ASSERT_TRUE(PushGrad(*held, 0, 0, 0, 3, g).ok());
  ASSERT_TRUE(PushGrad(*fresh, 0, 0, 0, 3, g).ok());
  EXPECT_TRUE(BitIdentical(Weights(*held), Weights(*fresh)));
}

// ---- Parts: a push split over several streams (PushHeader.parts) ----------

PushHeader PartHeader(uint32_t worker, uint64_t clock, uint64_t num_samples,
                      uint32_t parts) {
  PushHeader h = Header(worker, clock, num_samples);
  h.set_parts(parts);
  return h;
}

// Streams part `part` of h.parts() of `data` (chunks part, part + parts,
// ...; the client's split) and finishes it.
absl::StatusOr<PushResult> PushPart(Shard& shard, const PushHeader& h,
                                    const std::vector<ChunkData>& data,
                                    size_t part) {
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p = shard.BeginPush(h);
  if (!p.ok()) return p.status();
  for (size_t i = part; i < data.size(); i += h.parts()) {
    if (absl::Status st = (*p)->Add(data[i]); !st.ok()) return st;
  }
  return (*p)->Finish();
}

// The first part to finish is pending (naming how many chunks are still
// missing) and changes nothing observable; the last commits the push. Each
// part again, the whole push again, and a part after the worker's next
// push get the push's answer and change nothing; the job's results are
// those of single streams, bit for bit.
TEST_F(OnArrivalTest, PartsCommitWhenTheLastChunkIsSummed) {
  ASSERT_EQ(data_[0].size(), 3u);  // part 0: chunks 0 and 2; part 1: chunk 1
  const Observable before = Observe(*a_);
  absl::StatusOr<PushResult> first =
      PushPart(*a_, PartHeader(0, 0, 4, 2), data_[0], 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->pending);
  EXPECT_EQ(first->missing_chunks, 1u);
  ExpectSame(Observe(*a_), before);
  absl::StatusOr<PushResult> last =
      PushPart(*a_, PartHeader(0, 0, 4, 2), data_[0], 1);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_FALSE(last->pending);
  EXPECT_FALSE(last->applied);  // worker 1 has not pushed
  EXPECT_EQ(a_->Stats().pushes(), 1u);
  for (size_t part : {0u, 1u}) {
    absl::StatusOr<PushResult> again =
        PushPart(*a_, PartHeader(0, 0, 4, 2), data_[0], part);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_FALSE(again->pending);
    EXPECT_EQ(again->version, last->version);
  }
  ASSERT_TRUE(PushGrad(*a_, 0, 0, 0, 4, grads_[0]).ok());  // one stream
  EXPECT_EQ(a_->Stats().pushes(), 1u);
  ASSERT_TRUE(PushGrad(*a_, 1, 0, 0, 5, grads_[1]).ok());
  Step1(*a_);
  const Observable done = Observe(*a_);
  absl::StatusOr<PushResult> late =
      PushPart(*a_, PartHeader(0, 0, 4, 2), data_[0], 1);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->version, last->version);
  ExpectSame(Observe(*a_), done);
  CleanSteps(*b_);
  ExpectSame(Observe(*a_), Observe(*b_));
  EXPECT_EQ(a_->clipped_elements(), 2u);
}

// A part with other bytes than the push's is refused and changes nothing,
// before the commit (a summed chunk cannot be replaced) and after it (not
// a retry of the accepted push).
TEST_F(OnArrivalTest, PartWithOtherBytesIsRefused) {
  std::vector<float> other = grads_[0];
  other[0] += 1.0f;  // chunk 0: part 0 of 2
  const std::vector<ChunkData> other_data = EncodeAll(*a_, other);
  ASSERT_TRUE(PushPart(*a_, PartHeader(0, 0, 4, 2), data_[0], 0).ok());
  Observable before = Observe(*a_);
  absl::StatusOr<PushResult> r =
      PushPart(*a_, PartHeader(0, 0, 4, 2), other_data, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("already summed"));
  ExpectSame(Observe(*a_), before);
  ASSERT_TRUE(PushPart(*a_, PartHeader(0, 0, 4, 2), data_[0], 1).ok());
  ASSERT_TRUE(PushGrad(*a_, 1, 0, 0, 5, grads_[1]).ok());  // step 0 done
  before = Observe(*a_);
  r = PushPart(*a_, PartHeader(0, 0, 4, 2), other_data, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("next clock is 1"));
  // Other num_samples in the header: not the accepted push either.
  r = PushPart(*a_, PartHeader(0, 0, 5, 2), data_[0], 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  ExpectSame(Observe(*a_), before);
}

// Parts of one push with different num_samples: the part that would
// commit finds a chunk summed with the other's and refuses to commit it.
TEST_F(OnArrivalTest, PartsWithOtherNumSamplesDoNotCommit) {
  const Observable before = Observe(*a_);
  absl::StatusOr<PushResult> first =
      PushPart(*a_, PartHeader(0, 0, 4, 2), data_[0], 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->pending);
  absl::StatusOr<PushResult> other =
      PushPart(*a_, PartHeader(0, 0, 5, 2), data_[0], 1);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(),
              HasSubstr("was summed with num_samples 4 by another part"));
  ExpectSame(Observe(*a_), before);
}

// A part whose stream broke half-way (its first chunk summed) and the
// other part's finish (pending) leave nothing observable; the broken
// part's retry commits, with the results of one clean stream.
TEST_F(OnArrivalTest, BrokenPartIsRetriedExactly) {
  const Observable before = Observe(*a_);
  StreamPart(*a_, PartHeader(0, 0, 4, 2), {data_[0][0]}, 1);
  absl::StatusOr<PushResult> other =
      PushPart(*a_, PartHeader(0, 0, 4, 2), data_[0], 1);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(other->pending);
  EXPECT_EQ(other->missing_chunks, 1u);  // chunk 2 of the broken part
  ExpectSame(Observe(*a_), before);
  absl::StatusOr<PushResult> retry =
      PushPart(*a_, PartHeader(0, 0, 4, 2), data_[0], 0);
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_FALSE(retry->pending);
  ASSERT_TRUE(PushGrad(*a_, 1, 0, 0, 5, grads_[1]).ok());
  Step1AndCompare(*b_);
  EXPECT_EQ(a_->clipped_elements(), 2u);
}

// Both workers' pushes split (2 and 3 parts), every part on its own thread
// at once: every part succeeds, each push is accepted once, and the
// weights are those of single streams, bit for bit.
TEST_F(OnArrivalTest, ConcurrentPartsEqualSingleStreams) {
  ConcurrentSteps([&](uint32_t w, uint64_t clock,
                      const std::vector<ChunkData>& d) -> std::vector<Job> {
    std::vector<Job> parts;
    for (size_t part = 0; part < 2 + w; ++part) {
      parts.push_back([&, w, clock, part] {
        return PushPart(*a_, PartHeader(w, clock, 2 + w, 2 + w), d, part)
            .status();
      });
    }
    return parts;
  });
}

// One worker applying each term as it arrives: parts on two threads apply
// their chunks at once, with the weights, slots and exponents of one
// stream, bit for bit.
TEST(PartsOneWorkerTest, PartsApplyingOnArrivalEqualOneStream) {
  std::unique_ptr<Shard> parted = MakeHeldShard(true, true);
  std::unique_ptr<Shard> whole = MakeHeldShard(true, true);
  ASSERT_NE(parted, nullptr);
  ASSERT_NE(whole, nullptr);
  const uint64_t samples[] = {1, 3, 4, 6, 32, 7};
  for (uint64_t step = 0; step < 6; ++step) {
    const std::vector<float> g = EdgeGrad(parted->num_elements(), step, step);
    const std::vector<ChunkData> data = EncodeAll(*parted, g);
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (size_t part = 0; part < 2; ++part) {
      threads.emplace_back([&, part] {
        if (!PushPart(*parted, PartHeader(0, step, samples[step], 2), data,
                      part)
                 .ok()) {
          ++failures;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    ASSERT_EQ(failures.load(), 0);
    ASSERT_TRUE(PushGrad(*whole, 0, step, step, samples[step], g).ok());
    ASSERT_TRUE(BitIdentical(Weights(*parted), Weights(*whole)))
        << "step " << step;
    EXPECT_EQ(parted->Stats().version(), step + 1);
  }
  ExpectSameSlotsAndExponents(*parted, *whole);
  EXPECT_EQ(parted->clipped_elements(), whole->clipped_elements());
}

// Shards that take a push as one stream (async, backup workers) refuse a
// part, naming the setting, and change nothing.
TEST(PartsModesTest, ShardsThatBufferPushesRefuseParts) {
  for (const JobConfig& config :
       {SmallConfig(pstrain::v1::MODE_ASYNC, 2, 1), BackupConfig(3, 1)}) {
    std::unique_ptr<Shard> shard = MakeShard(config);
    ASSERT_NE(shard, nullptr);
    ASSERT_FALSE(shard->sums_on_arrival());
    const std::vector<float> before = Weights(*shard);
    const std::vector<ChunkData> data =
        EncodeAll(*shard, RandomGrad(shard->num_elements(), 3));
    std::vector<const ChunkData*> ptrs;
    for (const ChunkData& c : data) ptrs.push_back(&c);
    absl::StatusOr<PushResult> r = shard->Push(PartHeader(0, 0, 4, 2), ptrs);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("network.push_streams"));
    EXPECT_TRUE(BitIdentical(Weights(*shard), before));
    EXPECT_EQ(shard->Stats().pushes(), 0u);
  }
}

// ---- Chunks parsed in place (Add(ChunkView), server/push_frame.h) --------

// `c` as ParsePushFrame returns it when its payload lies in gRPC's slices:
// the payload cut at random places into pieces of at most `max_piece` bytes
// (0: one piece at an odd address, copied to `backing`), pointing into `c`.
ChunkView ViewOf(const ChunkData& c, size_t max_piece, uint32_t seed,
                 std::string* backing) {
  ChunkView v;
  v.tensor = c.tensor();
  v.index = c.index();
  v.dtype = c.dtype();
  v.shape.assign(c.shape().begin(), c.shape().end());
  v.data_size = c.data().size();
  if (max_piece == 0) {
    *backing = "x" + c.data();
    v.data.push_back(absl::string_view(*backing).substr(1));
    return v;
  }
  std::mt19937 rng(seed);
  const absl::string_view all = c.data();
  for (size_t at = 0; at < all.size();) {
    const size_t n = std::min(all.size() - at, 1 + rng() % max_piece);
    v.data.push_back(all.substr(at, n));
    at += n;
  }
  return v;
}

// Pushes `grad` through an IncomingPush, every chunk as a view in pieces;
// `gathered`: as the service does, each payload gathered by
// GatherScanFingerprint first and added with its results (fp32).
absl::Status StreamViews(Shard& shard, const PushHeader& h,
                         const std::vector<float>& grad, size_t max_piece,
                         uint32_t seed, pstrain::v1::DType dtype,
                         bool gathered = false) {
  std::vector<ChunkData> data(shard.chunks().size());
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p = shard.BeginPush(h);
  if (!p.ok()) return p.status();
  for (size_t i = 0; i < data.size(); ++i) {
    const LocalChunk& lc = shard.chunks()[i];
    EncodeChunk(lc.tensor, lc.index, grad.data() + lc.local_offset, lc.length,
                &data[i], dtype);
    std::string backing;
    ChunkView v = ViewOf(data[i], max_piece, seed + i, &backing);
    Shard::IncomingPush::Scanned scanned;
    std::string buffer(v.data_size, '\0');
    if (gathered) {
      scanned.fingerprint = GatherScanFingerprint(
          v.data, v.data_size, buffer.data(), &scanned.max_abs_bits);
      v.data.assign(1, buffer);
    }
    absl::Status added = (*p)->Add(
        v, gathered && dtype == pstrain::v1::DTYPE_F32 ? &scanned : nullptr);
    if (!added.ok()) return added;
  }
  return (*p)->Finish().status();
}

// 1 or 2 workers (1: each term applied where it is summed), fp32 or bf16 on
// the wire (bf16: decoded, not scanned), Adam: a shard fed views in pieces
// of every size (one byte, straddling floats, 64 KiB like gRPC's reads, one
// misaligned piece) ends each step bit-identical to one fed whole
// ChunkData, and a retry of a push in the other form is known as the same
// push (the fingerprints agree).
class InPlaceChunkTest
    : public ::testing::TestWithParam<std::tuple<int, pstrain::v1::DType>> {};

TEST_P(InPlaceChunkTest, PiecesSumAndFingerprintAsWholeChunks) {
  const auto [workers, dtype] = GetParam();
  JobConfig config = SmallConfig(pstrain::v1::MODE_SYNC, workers, 0);
  config.mutable_training()->mutable_optimizer()->set_kind(
      pstrain::v1::OptimizerConfig::ADAM);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.01);
  config.mutable_network()->set_wire_dtype(dtype);
  std::unique_ptr<Shard> a = MakeShard(config);
  std::unique_ptr<Shard> b = MakeShard(config);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->sums_on_arrival());
  const size_t kPieces[] = {1, 3, 7, 4099, 65536, 0};
  for (uint64_t clock = 0; clock < 6; ++clock) {
    for (uint32_t w = 0; w < static_cast<uint32_t>(workers); ++w) {
      const std::vector<float> g =
          RandomGrad(a->num_elements(), 10 * clock + w + 1);
      const PushHeader h = Header(w, clock, 3 + w);
      ASSERT_TRUE(StreamViews(*a, h, g, kPieces[clock], 100 * clock + w, dtype,
                              /*gathered=*/clock % 2 == 1)
                      .ok())
          << "clock " << clock << " worker " << w;
      ASSERT_TRUE(PushGrad(*b, w, clock, clock, 3 + w, g, dtype).ok());
      // The same push again, whole: a retry, not a different push.
      absl::StatusOr<PushResult> again =
          PushGrad(*a, w, clock, clock, 3 + w, g, dtype);
      ASSERT_TRUE(again.ok()) << again.status();
    }
    ASSERT_TRUE(BitIdentical(Weights(*a), Weights(*b))) << "clock " << clock;
  }
  // A different push for an accepted clock, in pieces: refused.
  const std::vector<float> other = RandomGrad(a->num_elements(), 999);
  EXPECT_EQ(StreamViews(*a, Header(0, 5, 3), other, 5, 1, dtype).code(),
            absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(
    WorkersAndWire, InPlaceChunkTest,
    testing::Combine(testing::Values(1, 2),
                     testing::Values(pstrain::v1::DTYPE_F32,
                                     pstrain::v1::DTYPE_BF16)));

// A NaN, an Inf or a wrong size in a chunk in pieces (the bad float
// straddling two pieces) gets the error the whole chunk gets, and changes
// nothing.
TEST_F(OnArrivalTest, BadChunkInPiecesFailsAsTheWholeChunk) {
  const Observable before = Observe(*a_);
  for (uint32_t bits : {0x7fc00000u, 0xff800000u}) {
    ChunkData bad = data_[0][1];
    std::memcpy(bad.mutable_data()->data() + 8, &bits, sizeof(bits));
    absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> whole =
        a_->BeginPush(Header(0, 0, 4));
    ASSERT_TRUE(whole.ok());
    const absl::Status want = (*whole)->Add(bad);
    ASSERT_EQ(want.code(), absl::StatusCode::kInvalidArgument);
    absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> pieces =
        a_->BeginPush(Header(0, 0, 4));
    ASSERT_TRUE(pieces.ok());
    std::string backing;
    ChunkView v = ViewOf(bad, 1, 3, &backing);  // the float in 4 pieces
    EXPECT_EQ((*pieces)->Add(v), want);
  }
  ChunkData shortened = data_[0][0];
  shortened.mutable_data()->resize(shortened.data().size() - 4);
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> p =
      a_->BeginPush(Header(0, 0, 4));
  ASSERT_TRUE(p.ok());
  std::string backing;
  const absl::Status st = (*p)->Add(ViewOf(shortened, 100, 4, &backing));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), testing::HasSubstr("bytes for"));
  ExpectSame(Observe(*a_), before);
}

}  // namespace
}  // namespace pstrain
