// Unit tests of Shard, called directly (no gRPC): the BSP step, the weighted
// average, blocking pulls, SSP gating, rejected pushes, Close() and Stats().
#include "server/shard.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "common/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"
#include "server/coordinator.h"

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
  config.workers = workers;
  config.servers = 1;
  config.mode = mode;
  config.staleness = staleness;
  config.model.type = "softmax";
  config.model.input_dim = 8;
  config.model.num_classes = 3;
  config.model.hidden.clear();
  config.data.num_features = 8;
  config.data.num_classes = 3;
  config.chunk_bytes = 64;
  config.steps = 1000;
  config.optimizer.set_base_lr(1.0);  // SGD: w_new = w - g exactly
  FinalizeJobConfig(&config);
  return config;
}

std::unique_ptr<Shard> MakeShard(const JobConfig& config) {
  absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(config);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return nullptr;
  ShardOptions options;
  options.shard_id = 0;
  options.job = *job;
  absl::StatusOr<std::unique_ptr<Shard>> shard = Shard::Create(options);
  EXPECT_TRUE(shard.ok()) << shard.status();
  if (!shard.ok()) return nullptr;
  return *std::move(shard);
}

// Pushes `grad` (in the shard's flat layout) for every chunk of the shard.
absl::StatusOr<PushResult> PushGrad(Shard& shard, uint32_t worker,
                                    uint64_t clock, uint64_t read_min_clock,
                                    uint64_t num_samples,
                                    const std::vector<float>& grad) {
  EXPECT_EQ(grad.size(), shard.num_elements());
  std::vector<ChunkData> data(shard.chunks().size());
  std::vector<const ChunkData*> ptrs;
  for (size_t i = 0; i < shard.chunks().size(); ++i) {
    const LocalChunk& lc = shard.chunks()[i];
    EncodeChunk(lc.tensor, lc.index, grad.data() + lc.local_offset, lc.length,
                &data[i]);
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

}  // namespace
}  // namespace pstrain
