// Async (SSP) checkpoint cuts (server/shard.h, "Checkpoints"): with workers
// running skewed by the staleness bound, every shard's state at cut c holds
// exactly the pushes {(w, t) : t < c}, the same set on every shard.
//
// The model makes the set visible: one tensor "marks", one chunk of N * T
// elements per shard, all zero, SGD with lr 1. Worker w's push of clock t
// carries gradient 1 at element w * T + t of each shard's chunk and 0
// elsewhere, so a shard's weight there is -1 exactly when that push was
// applied. Workers are threads that pull from and push to every shard like
// ps_worker does (read at clock t, then push clock t), a fast one and a slow
// one, so without the hold at the cut the fast worker would push clocks past
// the cut before the slow one reached it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/sharding.h"
#include "common/tensor_codec.h"
#include "server/shard.h"

namespace pstrain {
namespace {

constexpr uint32_t kWorkers = 3;
constexpr uint32_t kShards = 2;
constexpr uint64_t kClocks = 12;

using Pushes = std::set<std::pair<uint32_t, uint64_t>>;  // (worker, clock)

std::vector<std::unique_ptr<Shard>> MakeShards(int64_t staleness) {
  pstrain::v1::TensorSpec marks;
  marks.set_name("marks");
  marks.add_shape(kShards * kWorkers * kClocks);
  marks.set_dtype(pstrain::v1::DTYPE_F32);
  marks.mutable_init()->set_kind(pstrain::v1::InitRule::ZEROS);
  auto map = BuildShardMap({marks}, kShards, kWorkers * kClocks);
  EXPECT_TRUE(map.ok()) << map.status();
  std::vector<std::unique_ptr<Shard>> shards;
  for (uint32_t k = 0; k < kShards && map.ok(); ++k) {
    ShardOptions o;
    o.shard_id = k;
    o.num_shards = kShards;
    o.shard_map = *map;
    o.optimizer.set_kind(pstrain::v1::OptimizerConfig::SGD);
    o.optimizer.set_base_lr(1.0);
    o.optimizer.set_schedule(pstrain::v1::OptimizerConfig::CONSTANT);
    o.rule.kind = ConsistencyOptions::Kind::kSsp;
    o.rule.num_workers = kWorkers;
    o.rule.staleness = staleness;
    auto shard = Shard::Create(o);
    EXPECT_TRUE(shard.ok()) << shard.status();
    if (!shard.ok()) return {};
    EXPECT_EQ((*shard)->chunks().size(), 1u);
    EXPECT_EQ((*shard)->num_elements(), kWorkers * kClocks);
    shards.push_back(*std::move(shard));
  }
  return shards;
}

// Worker `w`'s T clocks against every shard; sleeps `delay` per clock.
// Returns the first error.
absl::Status RunWorker(const std::vector<std::unique_ptr<Shard>>& shards,
                       uint32_t w, absl::Duration delay) {
  std::mt19937 rng(17 + w);
  for (uint64_t t = 0; t < kClocks; ++t) {
    uint64_t min_clock = t;
    for (const auto& shard : shards) {
      absl::StatusOr<PulledWeights> read =
          shard->PullWeights(w, t, absl::Now() + absl::Seconds(30));
      if (!read.ok()) return read.status();
      min_clock = std::min(min_clock, read->min_clock);
    }
    absl::SleepFor(delay * (1 + std::uniform_int_distribution<int>(0, 1)(rng)));
    for (const auto& shard : shards) {
      std::vector<float> g(shard->num_elements(), 0.0f);
      g[w * kClocks + t] = 1.0f;
      pstrain::v1::ChunkData chunk;
      const LocalChunk& lc = shard->chunks()[0];
      EncodeChunk(lc.tensor, lc.index, g.data(), g.size(), &chunk);
      pstrain::v1::PushHeader header;
      header.set_worker(w);
      header.set_clock(t);
      header.set_read_min_clock(min_clock);
      header.set_num_samples(1);
      absl::StatusOr<PushResult> pushed = shard->Push(header, {&chunk});
      if (!pushed.ok()) return pushed.status();
    }
  }
  return absl::OkStatus();
}

// The pushes a captured state holds (weights -1), checking every weight is
// 0 or -1.
Pushes Applied(const ShardState& s) {
  Pushes out;
  EXPECT_EQ(s.chunks.size(), 1u);
  if (s.chunks.empty()) return out;
  const std::vector<float>& w = s.chunks[0].weights;
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_TRUE(w[i] == 0.0f || w[i] == -1.0f) << i << ": " << w[i];
    if (w[i] == -1.0f) out.insert({i / kClocks, i % kClocks});
  }
  return out;
}

Pushes PushesBelow(uint64_t cut) {
  Pushes out;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    for (uint64_t t = 0; t < cut; ++t) out.insert({w, t});
  }
  return out;
}

// Runs the workers (worker 0 fast, the last slow) while `order` takes cuts.
void RunJob(const std::vector<std::unique_ptr<Shard>>& shards,
            const std::function<void()>& order) {
  std::vector<absl::Status> status(kWorkers);
  std::vector<std::thread> workers;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      status[w] = RunWorker(shards, w, absl::Milliseconds(3 * w));
    });
  }
  order();
  for (std::thread& t : workers) t.join();
  for (uint32_t w = 0; w < kWorkers; ++w) {
    EXPECT_TRUE(status[w].ok()) << "worker " << w << ": " << status[w];
  }
}

void ExpectCut(const ShardState& s, uint64_t cut, uint32_t shard) {
  EXPECT_EQ(s.cut, cut) << "shard " << shard;
  EXPECT_EQ(s.clocks, std::vector<uint64_t>(kWorkers, cut))
      << "shard " << shard;
  EXPECT_EQ(s.version, kWorkers * cut) << "shard " << shard;
  EXPECT_EQ(Applied(s), PushesBelow(cut))
      << "shard " << shard << " cut " << cut;
}

class AsyncCutTest : public ::testing::TestWithParam<int64_t> {};

// Standing cuts (checkpoint.every_steps = 4 of 12): the shards hold reads at
// clocks 4 and 8 until every worker reached them, capture each cut, and the
// coordinator's orders (SnapshotAt) collect them, whenever they come.
TEST_P(AsyncCutTest, StandingCutsHoldTheSamePushesOnEveryShard) {
  std::vector<std::unique_ptr<Shard>> shards = MakeShards(GetParam());
  ASSERT_EQ(shards.size(), kShards);
  for (auto& s : shards) s->SetStandingCuts(4, kClocks);
  std::vector<std::vector<absl::StatusOr<ShardState>>> got(kShards);
  RunJob(shards, [&] {
    for (uint64_t cut : {4, 8, 12}) {
      for (uint32_t k = 0; k < kShards; ++k) {
        got[k].push_back(
            shards[k]->SnapshotAt(cut, absl::Now() + absl::Seconds(30)));
      }
    }
  });
  for (uint32_t k = 0; k < kShards; ++k) {
    ASSERT_EQ(got[k].size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(got[k][i].ok())
          << "shard " << k << ": " << got[k][i].status();
      ExpectCut(*got[k][i], 4 * (i + 1), k);
    }
  }
}

// A cut no standing rule knows (a time cut): the order itself holds reads
// at the cut while it waits.
TEST_P(AsyncCutTest, AnOrderedCutHoldsReadsWhileItWaits) {
  std::vector<std::unique_ptr<Shard>> shards = MakeShards(GetParam());
  ASSERT_EQ(shards.size(), kShards);
  constexpr uint64_t kCut = 6;
  std::vector<absl::StatusOr<ShardState>> got(kShards);
  std::vector<std::thread> orders;
  for (uint32_t k = 0; k < kShards; ++k) {
    orders.emplace_back([&, k] {
      got[k] = shards[k]->SnapshotAt(kCut, absl::Now() + absl::Seconds(30));
    });
  }
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  for (auto& s : shards) {
    while (s->waiting_snapshots() == 0 && absl::Now() < limit) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(s->waiting_snapshots(), 1u);
  }
  RunJob(shards, [] {});
  for (std::thread& t : orders) t.join();
  for (uint32_t k = 0; k < kShards; ++k) {
    ASSERT_TRUE(got[k].ok()) << "shard " << k << ": " << got[k].status();
    ExpectCut(*got[k], kCut, k);
  }
}

INSTANTIATE_TEST_SUITE_P(Staleness, AsyncCutTest,
                         ::testing::Values(int64_t{2}, int64_t{-1}),
                         [](const ::testing::TestParamInfo<int64_t>& p) {
                           return p.param < 0 ? std::string("inf")
                                              : absl::StrCat("s", p.param);
                         });

// A read blocked at the cut names the worker it waits for when its deadline
// passes.
TEST(AsyncCutHoldTest, AHeldReadNamesTheWorkersBelowTheCut) {
  std::vector<std::unique_ptr<Shard>> shards = MakeShards(/*staleness=*/-1);
  ASSERT_EQ(shards.size(), kShards);
  Shard& shard = *shards[0];
  shard.SetStandingCuts(2, kClocks);
  for (uint64_t t = 0; t < 2; ++t) {
    std::vector<float> g(shard.num_elements(), 0.0f);
    pstrain::v1::ChunkData chunk;
    EncodeChunk(shard.chunks()[0].tensor, shard.chunks()[0].index, g.data(),
                g.size(), &chunk);
    pstrain::v1::PushHeader header;
    header.set_worker(0);
    header.set_clock(t);
    header.set_num_samples(1);
    ASSERT_TRUE(shard.Push(header, {&chunk}).ok());
  }
  // Worker 0 has pushed clocks 0 and 1; its read at the cut waits for 1 and 2.
  absl::StatusOr<PulledWeights> read =
      shard.PullWeights(0, 2, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(read.status().message().find("1@0, 2@0"), absl::string_view::npos)
      << read.status();
  // Below the cut, unbounded staleness does not wait.
  EXPECT_TRUE(shard.PullWeights(0, 1, absl::Now()).ok());
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

// checkpoint.every_seconds: an ordered cut whose call timed out before the
// shards got there stays held, and a later order collects it, however long
// the slowest worker took. (Without the hold the fast workers pass it and
// the later order is FAILED_PRECONDITION.)
TEST(AsyncCutHoldTest, AnOrderedCutStaysHeldAfterItsCallTimedOut) {
  std::vector<std::unique_ptr<Shard>> shards = MakeShards(/*staleness=*/-1);
  ASSERT_EQ(shards.size(), kShards);
  constexpr uint64_t kCut = 5;
  for (auto& s : shards) {
    s->SetStandingCuts(0, kClocks);  // the final cut only
    EXPECT_EQ(s->SnapshotAt(kCut, absl::Now() + absl::Milliseconds(5))
                  .status()
                  .code(),
              absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ(s->waiting_snapshots(), 0u);
  }
  RunJob(shards, [] {});
  for (uint32_t k = 0; k < kShards; ++k) {
    absl::StatusOr<ShardState> got = shards[k]->SnapshotAt(kCut, absl::Now());
    ASSERT_TRUE(got.ok()) << "shard " << k << ": " << got.status();
    ExpectCut(*got, kCut, k);
    EXPECT_EQ(shards[k]->Stats().max_clock(), kClocks);
  }
}

}  // namespace
}  // namespace pstrain
