#include "server/sparse_shard.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/model_spec.h"
#include "common/optimizer.h"
#include "common/sparse_rows.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using pstrain::v1::OptimizerConfig;
using pstrain::v1::PushRowsRequest;

constexpr int64_t kRows = 20;
constexpr int64_t kDim = 3;

pstrain::v1::TensorSpec Emb() {
  pstrain::v1::TensorSpec spec;
  spec.set_name("emb");
  spec.add_shape(kRows);
  spec.add_shape(kDim);
  spec.set_dtype(pstrain::v1::DTYPE_F32);
  spec.set_row_sparse(true);
  spec.mutable_init()->set_kind(pstrain::v1::InitRule::UNIFORM);
  spec.mutable_init()->set_scale(0.5f);
  spec.mutable_init()->set_seed(3);
  return spec;
}

OptimizerConfig Opt(OptimizerConfig::Kind kind) {
  OptimizerConfig c;
  c.set_kind(kind);
  c.set_base_lr(0.05);
  return c;
}

struct Job {
  bool sync = true;
  uint32_t workers = 3;
  uint32_t shard = 0;
  uint32_t shards = 1;
  int64_t staleness = -1;
  OptimizerConfig::Kind opt = OptimizerConfig::SGD;
  uint64_t max_rows = 0;
  SparseTableOptions::OnFull on_full = SparseTableOptions::OnFull::kEvict;
  pstrain::v1::DType wire = pstrain::v1::DTYPE_F32;
};

std::unique_ptr<SparseShard> Make(const Job& s) {
  SparseShardOptions o;
  o.shard_id = s.shard;
  o.num_shards = s.shards;
  o.tensors = {Emb()};
  o.optimizer = Opt(s.opt);
  o.rule.kind =
      s.sync ? ConsistencyOptions::Kind::kBsp : ConsistencyOptions::Kind::kSsp;
  o.rule.num_workers = s.workers;
  o.rule.staleness = s.staleness;
  o.max_rows = s.max_rows;
  o.on_full = s.on_full;
  o.wire_dtype = s.wire;
  auto shard = SparseShard::Create(o);
  EXPECT_TRUE(shard.ok()) << shard.status();
  return std::move(*shard);
}

// One worker's row gradients of one step.
struct Grad {
  uint32_t worker = 0;
  uint64_t clock = 0;
  uint64_t samples = 1;
  std::vector<int64_t> ids;
  std::vector<float> values;  // ids.size() * kDim
};

std::vector<PushRowsRequest> Messages(
    const Grad& g, pstrain::v1::DType wire = pstrain::v1::DTYPE_F32) {
  PushRowsRequest m;
  m.mutable_header()->set_worker(g.worker);
  m.mutable_header()->set_clock(g.clock);
  m.mutable_header()->set_read_min_clock(g.clock);
  m.mutable_header()->set_num_samples(g.samples);
  if (!g.ids.empty()) {
    pstrain::v1::SparseRows* r = m.add_rows();
    r->set_tensor("emb");
    r->set_dtype(wire);
    r->set_dim(kDim);
    AppendRowIds(g.ids, r->mutable_ids());
    AppendRowValues(g.values.data(), g.values.size(), wire, "emb",
                    r->mutable_values());
  }
  return {m};
}

absl::StatusOr<RowPushResult> PushMessages(
    SparseShard& shard, const std::vector<PushRowsRequest>& m) {
  absl::StatusOr<RowPush> push = shard.DecodePush(m);
  if (!push.ok()) return push.status();
  return shard.Push(std::move(*push));
}

absl::StatusOr<RowPushResult> PushGrad(SparseShard& shard, const Grad& g) {
  return PushMessages(shard, Messages(g));
}

// The gradient of a row from (step, worker, id, col): varied and exact in
// fp32.
float G(uint64_t step, uint32_t w, int64_t id, int64_t c) {
  return 0.125f * static_cast<float>((step * 7 + w * 5 + id * 3 + c) % 17) -
         1.0f;
}

// Worker w's rows in step t: a deterministic subset, overlapping between
// workers, in a scrambled order. Row 0 is touched once (step 0, worker 0),
// rows 6 and 13 never.
std::vector<int64_t> RowsOf(uint64_t t, uint32_t w) {
  std::vector<int64_t> ids;
  if (t == 0 && w == 0) ids.push_back(0);
  for (int64_t r = 1; r < kRows; ++r) {
    if ((r * 3 + w * 7 + t * 11) % 5 < 2 && r % 7 != 6) ids.push_back(r);
  }
  std::reverse(ids.begin(), ids.end());
  return ids;
}

Grad MakeGrad(uint64_t t, uint32_t w, uint32_t shard = 0, uint32_t shards = 1) {
  Grad g;
  g.worker = w;
  g.clock = t;
  g.samples = 10 + w * 3;
  for (int64_t id : RowsOf(t, w)) {
    if (RowShard(id, shards) != shard) continue;
    g.ids.push_back(id);
    for (int64_t c = 0; c < kDim; ++c) g.values.push_back(G(t, w, id, c));
  }
  return g;
}

std::vector<float> ReadAll(SparseShard& shard, uint64_t clock,
                           uint32_t shards = 1) {
  pstrain::v1::PullRowsRequest req;
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < kRows; ++r) {
    if (RowShard(r, shards) == shard.shard_id()) ids.push_back(r);
  }
  auto* piece = req.add_rows();
  piece->set_tensor("emb");
  AppendRowIds(ids, piece->mutable_ids());
  auto blocks = shard.DecodePull(req);
  EXPECT_TRUE(blocks.ok()) << blocks.status();
  auto r = shard.Pull(0, clock, std::move(*blocks), absl::Now());
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<float> out(kRows * kDim, -1000.0f);
  if (!r.ok()) return out;
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < kDim; ++c) {
      out[ids[i] * kDim + c] = r->blocks[0].values[i * kDim + c];
    }
  }
  return out;
}

// The dense reference of sync training: a [kRows, kDim] table, per step the
// gradient sum_w n_w g_w / N (N: every push's samples, rows a worker did not
// touch count 0), summed in double in rank order; `lazy` updates only the
// rows some worker touched, with a per-row update count (lazy Adam),
// otherwise every row (dense Adam: one shared count).
std::vector<float> Reference(OptimizerConfig::Kind kind, int steps,
                             uint32_t workers, bool lazy) {
  auto opt = *Optimizer::Create(Opt(kind));
  std::vector<float> w(kRows * kDim);
  InitialValues(Emb(), 0, w.size(), w.data());
  std::vector<float> slots = opt->InitSlots(kRows * kDim);
  std::vector<uint64_t> count(kRows, 0);
  for (int t = 0; t < steps; ++t) {
    std::vector<double> sum(kRows * kDim, 0.0);
    std::vector<bool> touched(kRows, false);
    double n = 0;
    for (uint32_t k = 0; k < workers; ++k) {
      Grad g = MakeGrad(t, k);
      n += g.samples;
      for (size_t i = 0; i < g.ids.size(); ++i) {
        touched[g.ids[i]] = true;
        for (int64_t c = 0; c < kDim; ++c) {
          sum[g.ids[i] * kDim + c] +=
              static_cast<double>(g.samples) * g.values[i * kDim + c];
        }
      }
    }
    std::vector<float> grad(sum.size());
    for (size_t i = 0; i < sum.size(); ++i) {
      grad[i] = static_cast<float>(sum[i] / n);
    }
    if (!lazy) {
      opt->Apply(t, t, w.data(), grad.data(), slots.data(), w.size());
      continue;
    }
    for (int64_t r = 0; r < kRows; ++r) {
      if (!touched[r]) continue;
      // Row r's slots are elements [r*dim, (r+1)*dim) of every slot array.
      opt->Apply(t, count[r]++, &w[r * kDim], &grad[r * kDim],
                 opt->num_slots() > 0 ? &slots[r * kDim] : nullptr, kDim, 1.0,
                 kRows * kDim);
    }
  }
  return w;
}

std::vector<float> TrainSync(OptimizerConfig::Kind kind, int steps,
                             bool reverse_arrival) {
  Job s;
  s.opt = kind;
  auto shard = Make(s);
  for (int t = 0; t < steps; ++t) {
    for (uint32_t i = 0; i < s.workers; ++i) {
      const uint32_t w = reverse_arrival ? s.workers - 1 - i : i;
      auto r = PushGrad(*shard, MakeGrad(t, w));
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) {
        EXPECT_EQ(r->applied, i + 1 == s.workers);
      }
    }
  }
  EXPECT_EQ(shard->version(), static_cast<uint64_t>(steps));
  return ReadAll(*shard, steps);
}

TEST(SparseShardTest, SyncSgdMatchesTheDenseReferenceExactly) {
  const std::vector<float> got = TrainSync(OptimizerConfig::SGD, 4, false);
  EXPECT_EQ(got, Reference(OptimizerConfig::SGD, 4, 3, /*lazy=*/true));
  // SGD: lazy and dense are the same rule (a zero gradient moves nothing).
  EXPECT_EQ(got, Reference(OptimizerConfig::SGD, 4, 3, /*lazy=*/false));
  EXPECT_EQ(got, TrainSync(OptimizerConfig::SGD, 4, /*reverse_arrival=*/true));
}

TEST(SparseShardTest, SyncLazyAdamMatchesTheLazyReferenceExactly) {
  const std::vector<float> got = TrainSync(OptimizerConfig::ADAM, 5, false);
  EXPECT_EQ(got, Reference(OptimizerConfig::ADAM, 5, 3, /*lazy=*/true));
  EXPECT_EQ(got, TrainSync(OptimizerConfig::ADAM, 5, true));
  // Rows no worker touched (6, 13) keep their initial values; row 0,
  // touched in step 0 only, moved once: dense Adam would have gone on
  // moving it by its momentum.
  std::vector<float> init(kRows * kDim);
  InitialValues(Emb(), 0, init.size(), init.data());
  for (int64_t r : {6, 13}) {
    for (int64_t c = 0; c < kDim; ++c) {
      EXPECT_EQ(got[r * kDim + c], init[r * kDim + c]) << r;
    }
  }
  const std::vector<float> dense =
      Reference(OptimizerConfig::ADAM, 5, 3, /*lazy=*/false);
  EXPECT_NE(got[0], dense[0]);
  EXPECT_EQ(got[0], Reference(OptimizerConfig::ADAM, 1, 3, true)[0]);
  EXPECT_EQ(TrainSync(OptimizerConfig::ADAGRAD, 3, false),
            Reference(OptimizerConfig::ADAGRAD, 3, 3, /*lazy=*/true));
}

// K = 3 shards together hold exactly what one shard holds.
TEST(SparseShardTest, ShardedSyncEqualsOneShard) {
  const int steps = 3;
  std::vector<float> merged(kRows * kDim, -1000.0f);
  for (uint32_t k = 0; k < 3; ++k) {
    Job s;
    s.opt = OptimizerConfig::ADAM;
    s.shard = k;
    s.shards = 3;
    auto shard = Make(s);
    for (int t = 0; t < steps; ++t) {
      for (uint32_t w = 0; w < s.workers; ++w) {
        ASSERT_TRUE(PushGrad(*shard, MakeGrad(t, w, k, 3)).ok());
      }
    }
    std::vector<float> part = ReadAll(*shard, steps, 3);
    for (int64_t r = 0; r < kRows; ++r) {
      if (RowShard(r, 3) != k) continue;
      for (int64_t c = 0; c < kDim; ++c) {
        merged[r * kDim + c] = part[r * kDim + c];
      }
    }
  }
  EXPECT_EQ(merged, TrainSync(OptimizerConfig::ADAM, steps, false));
}

TEST(SparseShardTest, SyncPullWaitsForTheStep) {
  Job s;
  s.workers = 2;
  auto shard = Make(s);
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(0, 0)).ok());
  pstrain::v1::PullRowsRequest req;
  auto* piece = req.add_rows();
  piece->set_tensor("emb");
  AppendRowIds({1}, piece->mutable_ids());
  auto r = shard->Pull(0, 1, *shard->DecodePull(req), absl::Now());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("1@0"), std::string::npos) << r.status();
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(0, 1)).ok());
  EXPECT_TRUE(shard->Pull(0, 1, *shard->DecodePull(req), absl::Now()).ok());
  shard->Close();
  EXPECT_EQ(
      shard->Pull(0, 1, *shard->DecodePull(req), absl::Now()).status().code(),
      absl::StatusCode::kUnavailable);
}

TEST(SparseShardTest, AsyncAppliesOnArrivalWithinTheStalenessBound) {
  Job s;
  s.sync = false;
  s.workers = 2;
  s.staleness = 1;
  auto shard = Make(s);
  auto a = PushGrad(*shard, MakeGrad(0, 0));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->applied);
  EXPECT_EQ(a->version, 1u);
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(1, 0)).ok());
  // Worker 0 at clock 2 needs worker 1 at clock >= 1.
  pstrain::v1::PullRowsRequest req;
  auto* piece = req.add_rows();
  piece->set_tensor("emb");
  AppendRowIds({0, 1}, piece->mutable_ids());
  auto r = shard->Pull(0, 2, *shard->DecodePull(req), absl::Now());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("1@0"), std::string::npos);
  EXPECT_TRUE(shard->Pull(0, 1, *shard->DecodePull(req), absl::Now()).ok());
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(0, 1)).ok());
  auto ok = shard->Pull(0, 2, *shard->DecodePull(req), absl::Now());
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->version, 3u);
  EXPECT_EQ(ok->min_clock, 1u);
  // Each push ran plain SGD at once: row values follow the three pushes.
  auto opt = *Optimizer::Create(Opt(OptimizerConfig::SGD));
  std::vector<float> want(kRows * kDim);
  InitialValues(Emb(), 0, want.size(), want.data());
  for (const Grad& g : {MakeGrad(0, 0), MakeGrad(1, 0), MakeGrad(0, 1)}) {
    for (size_t i = 0; i < g.ids.size(); ++i) {
      opt->Apply(g.clock, 0, &want[g.ids[i] * kDim], &g.values[i * kDim],
                 nullptr, kDim);
    }
  }
  EXPECT_EQ(ReadAll(*shard, 0), want);
}

TEST(SparseShardTest, ARetryGetsTheSameResultAndChangesNothing) {
  Job s;
  s.workers = 2;
  auto shard = Make(s);
  const Grad g = MakeGrad(0, 0);
  auto first = PushGrad(*shard, g);
  ASSERT_TRUE(first.ok());
  auto again = PushGrad(*shard, g);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->version, first->version);
  EXPECT_EQ(again->applied, first->applied);
  EXPECT_EQ(shard->clocks(), (std::vector<uint64_t>{1, 0}));
  Grad other = g;
  other.values[0] += 1.0f;
  EXPECT_EQ(PushGrad(*shard, other).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(0, 1)).ok());
  // The step is the two pushes summed once: the reference of 2 workers.
  EXPECT_EQ(ReadAll(*shard, 1), Reference(OptimizerConfig::SGD, 1, 2, true));
  // A retry after the commit still gets its result.
  auto late = PushGrad(*shard, g);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->version, first->version);
  EXPECT_EQ(shard->version(), 1u);
}

// Elastic stand-ins (sparse_shard.h): the dead rank may have pushed step 1
// (and even step 2) before its stand-in re-computes step 1. A pull at clock
// 1 then still reads the rows of version 1, so the stand-in's push is the
// dead process's bit for bit and gets its original result.
TEST(SparseShardTest, AStandInReadsACommittedStepAsOfItsVersion) {
  Job s;
  s.workers = 2;
  auto shard = Make(s);
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(0, 0)).ok());
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(0, 1)).ok());
  const std::vector<float> v1 = ReadAll(*shard, 1);
  EXPECT_EQ(v1, Reference(OptimizerConfig::SGD, 1, 2, true));
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(1, 0)).ok());
  auto dead = PushGrad(*shard, MakeGrad(1, 1));  // the dead process's push
  ASSERT_TRUE(dead.ok());
  EXPECT_TRUE(dead->applied);
  ASSERT_EQ(shard->version(), 2u);
  const std::vector<float> v2 = ReadAll(*shard, 2);
  EXPECT_NE(v2, v1);
  EXPECT_EQ(ReadAll(*shard, 1), v1);
  // Its push of step 2 too, then the stand-in's of step 1: answered.
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(2, 1)).ok());
  auto again = PushGrad(*shard, MakeGrad(1, 1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->version, dead->version);
  EXPECT_EQ(ReadAll(*shard, 1), v1);
  EXPECT_EQ(ReadAll(*shard, 2), v2);
  EXPECT_EQ(shard->clocks(), (std::vector<uint64_t>{2, 3}));
  // A restore drops the rows of the version before: refused, not guessed.
  auto state = shard->Snapshot();
  ASSERT_FALSE(state.ok());  // step 2 has a push pending
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(2, 0)).ok());
  state = shard->Snapshot();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(shard->Restore(*state).ok());
  pstrain::v1::PullRowsRequest req;
  auto* piece = req.add_rows();
  piece->set_tensor("emb");
  AppendRowIds({1}, piece->mutable_ids());
  auto blocks = shard->DecodePull(req);
  ASSERT_TRUE(blocks.ok());
  auto r = shard->Pull(1, 2, std::move(*blocks), absl::Now());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
      << r.status();
}

// ... also for rows the committed step evicted (they read as stored).
TEST(SparseShardTest, AStandInReadsRowsTheCommitEvicted) {
  Job s;
  s.workers = 2;
  s.max_rows = 3;
  auto shard = Make(s);
  Grad a;
  a.ids = {1, 2, 3};
  a.values.assign(3 * kDim, 1.0f);
  Grad b = a;
  b.worker = 1;
  b.ids = {};
  b.values = {};
  ASSERT_TRUE(PushGrad(*shard, a).ok());
  ASSERT_TRUE(PushGrad(*shard, b).ok());
  const std::vector<float> v1 = ReadAll(*shard, 1);
  a.clock = b.clock = 1;
  a.ids = {4, 5};
  a.values.assign(2 * kDim, 0.5f);
  ASSERT_TRUE(PushGrad(*shard, a).ok());
  ASSERT_TRUE(PushGrad(*shard, b).ok());
  ASSERT_EQ(shard->evicted_rows(0), 2u);
  const std::vector<float> v2 = ReadAll(*shard, 2);
  EXPECT_NE(v2, v1);
  EXPECT_EQ(ReadAll(*shard, 1), v1);
  EXPECT_EQ(ReadAll(*shard, 2), v2);
}

// Async cuts (sparse_shard.h, SnapshotAt): a standing cut holds reads at
// clock >= cut until every worker reached it and is captured there, even
// when a worker then moves on; a cut a timed-out call left ordered is held
// and captured in the same way.
TEST(SparseShardTest, AsyncCutsAreHeldAndCapturedWhereEveryClockMeets) {
  Job s;
  s.sync = false;
  s.workers = 2;
  s.staleness = -1;  // never waits, but for the cuts
  auto shard = Make(s);
  shard->SetStandingCuts(2, 10);
  auto pull = [&](uint32_t w, uint64_t clock) {
    pstrain::v1::PullRowsRequest req;
    auto* piece = req.add_rows();
    piece->set_tensor("emb");
    AppendRowIds({1, 2}, piece->mutable_ids());
    auto blocks = shard->DecodePull(req);
    EXPECT_TRUE(blocks.ok());
    return shard->Pull(w, clock, std::move(*blocks), absl::Now());
  };
  for (uint64_t t : {0, 1}) ASSERT_TRUE(PushGrad(*shard, MakeGrad(t, 0)).ok());
  EXPECT_TRUE(pull(0, 1).ok());
  auto held = pull(0, 2);
  EXPECT_EQ(held.status().code(), absl::StatusCode::kDeadlineExceeded)
      << held.status();
  EXPECT_NE(held.status().message().find("1@0"), std::string::npos)
      << held.status();
  for (uint64_t t : {0, 1}) ASSERT_TRUE(PushGrad(*shard, MakeGrad(t, 1)).ok());
  const std::vector<float> at2 = ReadAll(*shard, 2);
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(2, 0)).ok());  // moves on
  auto cut2 = shard->SnapshotAt(2, absl::Now());
  ASSERT_TRUE(cut2.ok()) << cut2.status();
  EXPECT_EQ(cut2->clocks, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(cut2->version, 4u);
  std::vector<float> saved(kRows * kDim);
  for (int64_t r = 0; r < kRows; ++r) {
    InitialValues(Emb(), r * kDim, kDim, &saved[r * kDim]);
  }
  for (const SparseRowState& r : cut2->rows[0]) {
    std::copy(r.data.begin(), r.data.begin() + kDim, &saved[r.id * kDim]);
  }
  EXPECT_EQ(saved, at2);
  // Cut 3 (not standing), ordered by a call that timed out: held, and
  // captured once worker 1 reaches it.
  auto early = shard->SnapshotAt(3, absl::Now());
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded)
      << early.status();
  EXPECT_EQ(pull(0, 3).status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(2, 1)).ok());
  EXPECT_TRUE(pull(0, 3).ok());
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(3, 0)).ok());
  auto cut3 = shard->SnapshotAt(3, absl::Now());
  ASSERT_TRUE(cut3.ok()) << cut3.status();
  EXPECT_EQ(cut3->clocks, (std::vector<uint64_t>{3, 3}));
  // A cut the rows passed without stopping there.
  ASSERT_TRUE(PushGrad(*shard, MakeGrad(4, 0)).ok());
  EXPECT_EQ(shard->SnapshotAt(4, absl::Now()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A rejected push changes nothing: version, clocks, rows.
void ExpectRejected(SparseShard& shard, const std::vector<PushRowsRequest>& m,
                    absl::StatusCode code, const std::string& needle) {
  auto before = shard.Snapshot();
  ASSERT_TRUE(before.ok());
  auto r = PushMessages(shard, m);
  EXPECT_EQ(r.status().code(), code) << r.status();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  auto after = shard.Snapshot();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->version, before->version);
  EXPECT_EQ(after->clocks, before->clocks);
  ASSERT_EQ(after->rows[0].size(), before->rows[0].size());
  for (size_t i = 0; i < after->rows[0].size(); ++i) {
    EXPECT_EQ(after->rows[0][i].id, before->rows[0][i].id);
    EXPECT_EQ(after->rows[0][i].data, before->rows[0][i].data);
  }
}

TEST(SparseShardTest, BadPushesNameTheTensorAndChangeNothing) {
  Job s;
  s.workers = 1;
  s.max_rows = 4;
  s.on_full = SparseTableOptions::OnFull::kReject;
  auto shard = Make(s);
  Grad g;
  g.ids = {1, 2};
  g.values.assign(2 * kDim, 0.5f);
  ASSERT_TRUE(PushGrad(*shard, g).ok());  // step 0: rows 1 and 2 stored
  g.clock = 1;
  using C = absl::StatusCode;
  {
    Grad b = g;
    b.ids = {3, kRows};
    ExpectRejected(*shard, Messages(b), C::kInvalidArgument,
                   "tensor 'emb': row id 20 is outside the table");
    b.ids = {3, -2};
    ExpectRejected(*shard, Messages(b), C::kInvalidArgument, "row id -2");
  }
  {
    Grad b = g;
    b.ids = {3, 3};
    ExpectRejected(*shard, Messages(b), C::kInvalidArgument,
                   "tensor 'emb': row id 3 appears more than once");
    // The duplicate may hide in another piece or another message.
    std::vector<PushRowsRequest> m = Messages(g);
    PushRowsRequest second;
    *second.add_rows() = m[0].rows(0);
    m.push_back(second);
    ExpectRejected(*shard, m, C::kInvalidArgument, "appears more than once");
  }
  {
    std::vector<PushRowsRequest> m = Messages(g);
    m[0].mutable_rows(0)->set_dim(kDim + 1);
    ExpectRejected(*shard, m, C::kInvalidArgument,
                   "tensor 'emb': rows of width 4, the table's rows have 3");
    m = Messages(g);
    m[0].mutable_rows(0)->mutable_values()->pop_back();
    ExpectRejected(*shard, m, C::kInvalidArgument, "tensor 'emb'");
    m = Messages(g);
    m[0].mutable_rows(0)->mutable_ids()->pop_back();
    ExpectRejected(*shard, m, C::kInvalidArgument, "not a multiple of 8");
    m = Messages(g);
    m[0].mutable_rows(0)->set_dtype(pstrain::v1::DTYPE_BF16);
    ExpectRejected(*shard, m, C::kInvalidArgument, "wire dtype");
    m = Messages(g);
    m[0].mutable_rows(0)->set_tensor("nope");
    ExpectRejected(*shard, m, C::kInvalidArgument, "'nope'");
  }
  {
    Grad b = g;
    b.values[4] = std::numeric_limits<float>::quiet_NaN();
    ExpectRejected(*shard, Messages(b), C::kInvalidArgument,
                   "tensor 'emb': row 2 element 1 is not finite");
  }
  {
    Grad b = g;  // rows 1, 2 stored; 3 more new rows pass the bound of 4
    b.ids = {1, 5, 9, 10};
    b.values.assign(4 * kDim, 0.5f);
    ExpectRejected(*shard, Messages(b), C::kResourceExhausted,
                   "tensor 'emb': the update needs 5 rows");
  }
  // Nothing of the above counted: clock 1 is still open and takes a push.
  auto ok = PushGrad(*shard, g);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->version, 2u);
}

TEST(SparseShardTest, SyncEvictionBoundCountsTheWholeStep) {
  Job s;
  s.workers = 2;
  s.max_rows = 3;
  auto shard = Make(s);
  Grad a;
  a.worker = 0;
  a.ids = {1, 2};
  a.values.assign(2 * kDim, 1.0f);
  ASSERT_TRUE(PushGrad(*shard, a).ok());
  Grad b = a;
  b.worker = 1;
  b.ids = {3, 4};
  auto r = PushGrad(*shard, b);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("needs 4 rows"), std::string::npos)
      << r.status();
  b.ids = {2, 4};
  ASSERT_TRUE(PushGrad(*shard, b).ok());
  EXPECT_EQ(shard->stored_rows(0), 3u);
  // Step 1 touches rows 5 and 6: the two least recently used rows go.
  a.clock = b.clock = 1;
  a.ids = {5};
  a.values.assign(kDim, 1.0f);
  b.ids = {6};
  b.values.assign(kDim, 1.0f);
  ASSERT_TRUE(PushGrad(*shard, a).ok());
  ASSERT_TRUE(PushGrad(*shard, b).ok());
  EXPECT_EQ(shard->stored_rows(0), 3u);
  EXPECT_EQ(shard->evicted_rows(0), 2u);
}

TEST(SparseShardTest, Bf16WireCarriesRowValues) {
  Job s;
  s.workers = 1;
  s.wire = pstrain::v1::DTYPE_BF16;
  auto shard = Make(s);
  Grad g;
  g.ids = {4};
  g.values = {1.00390625f, -2.0f, 0.5f};  // 1 + 2^-8 rounds to 1 in bf16
  auto r = PushMessages(*shard, Messages(g, pstrain::v1::DTYPE_BF16));
  ASSERT_TRUE(r.ok()) << r.status();
  auto opt = *Optimizer::Create(Opt(OptimizerConfig::SGD));
  std::vector<float> want(kRows * kDim);
  InitialValues(Emb(), 0, want.size(), want.data());
  const float rounded[3] = {1.0f, -2.0f, 0.5f};
  opt->Apply(0, 0, &want[4 * kDim], rounded, nullptr, kDim);
  EXPECT_EQ(ReadAll(*shard, 1), want);
  // fp32 rows on a bf16 job are refused.
  g.clock = 1;
  EXPECT_EQ(PushGrad(*shard, g).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Snapshot on K = 2 shards, reshard to K' = 3, go on training: the same
// rows, slots and step counters as going on with K = 2.
TEST(SparseShardTest, CheckpointReshardKToKPrimeIsExact) {
  auto train = [](std::vector<std::unique_ptr<SparseShard>>& shards, uint32_t k,
                  int from, int to) {
    for (int t = from; t < to; ++t) {
      for (uint32_t i = 0; i < shards.size(); ++i) {
        for (uint32_t w = 0; w < 3; ++w) {
          ASSERT_TRUE(PushGrad(*shards[i], MakeGrad(t, w, i, k)).ok());
        }
      }
    }
  };
  auto make = [](uint32_t k) {
    std::vector<std::unique_ptr<SparseShard>> v;
    for (uint32_t i = 0; i < k; ++i) {
      Job s;
      s.opt = OptimizerConfig::ADAM;
      s.shard = i;
      s.shards = k;
      v.push_back(Make(s));
    }
    return v;
  };
  auto read = [](std::vector<std::unique_ptr<SparseShard>>& shards,
                 uint64_t clock) {
    std::vector<float> merged(kRows * kDim);
    for (auto& sh : shards) {
      std::vector<float> part = ReadAll(*sh, clock, shards.size());
      for (int64_t r = 0; r < kRows; ++r) {
        if (RowShard(r, shards.size()) != sh->shard_id()) continue;
        std::copy(&part[r * kDim], &part[r * kDim] + kDim, &merged[r * kDim]);
      }
    }
    return merged;
  };
  auto two = make(2);
  train(two, 2, 0, 2);
  std::vector<SparseShardState> saved;
  for (auto& sh : two) saved.push_back(*sh->Snapshot());
  train(two, 2, 2, 5);
  auto three = make(3);
  for (uint32_t i = 0; i < 3; ++i) {
    auto state = ReshardSparseState(saved, i, 3);
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE(three[i]->Restore(*state).ok());
  }
  train(three, 3, 2, 5);
  EXPECT_EQ(read(three, 5), read(two, 5));
  EXPECT_EQ(read(two, 5), TrainSync(OptimizerConfig::ADAM, 5, false));
  // A state from another layout's shard is refused whole.
  auto wrong = ReshardSparseState(saved, 0, 3);
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(two[1]->Restore(*wrong).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SparseShardTest, CreateRefusesBackupWorkersAndDcAsgd) {
  SparseShardOptions o;
  o.tensors = {Emb()};
  o.optimizer = Opt(OptimizerConfig::SGD);
  o.rule.kind = ConsistencyOptions::Kind::kBsp;
  o.rule.num_workers = 3;
  o.rule.backup_workers = 1;
  EXPECT_EQ(SparseShard::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
