#include "server/sparse_table.h"

#include <memory>
#include <vector>

#include "common/model_spec.h"
#include "common/optimizer.h"
#include "common/sparse_rows.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using pstrain::v1::OptimizerConfig;

pstrain::v1::TensorSpec Table(int64_t rows, int64_t dim) {
  pstrain::v1::TensorSpec spec;
  spec.set_name("emb");
  spec.add_shape(rows);
  spec.add_shape(dim);
  spec.set_dtype(pstrain::v1::DTYPE_F32);
  spec.set_row_sparse(true);
  spec.mutable_init()->set_kind(pstrain::v1::InitRule::NORMAL);
  spec.mutable_init()->set_scale(0.1f);
  spec.mutable_init()->set_seed(7);
  return spec;
}

std::unique_ptr<Optimizer> MakeOptimizer(OptimizerConfig::Kind kind) {
  OptimizerConfig c;
  c.set_kind(kind);
  c.set_base_lr(0.1);
  return *Optimizer::Create(c);
}

std::unique_ptr<SparseTable> MakeTable(
    const Optimizer* opt, int64_t rows, int64_t dim, uint32_t shard = 0,
    uint32_t shards = 1, uint64_t max_rows = 0,
    SparseTableOptions::OnFull on_full = SparseTableOptions::OnFull::kEvict) {
  SparseTableOptions o;
  o.spec = Table(rows, dim);
  o.shard_id = shard;
  o.num_shards = shards;
  o.max_rows = max_rows;
  o.on_full = on_full;
  auto t = SparseTable::Create(o, opt);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

std::vector<float> Initial(int64_t row, int64_t dim) {
  std::vector<float> v(dim);
  InitialValues(Table(1, dim), row * dim, dim, v.data());
  return v;
}

// A table of 10^8 virtual rows: reading rows stores nothing and returns the
// init rule's values of flat index row * dim + col.
TEST(SparseTableTest, LazyRowsReadTheirInitialValuesAndCostNothing) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD);
  auto t = MakeTable(opt.get(), 100000000, 4);
  std::vector<int64_t> ids = {0, 99999999, 31337};
  ASSERT_TRUE(t->CheckIds(ids, true).ok());
  std::vector<float> out(ids.size() * 4);
  t->Read(ids, out.data());
  EXPECT_EQ(t->stored_rows(), 0u);
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<float> want = Initial(ids[i], 4);
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(out[i * 4 + c], want[c]) << ids[i] << "," << c;
      EXPECT_EQ(out[i * 4 + c], InitialValue(Table(1, 4), ids[i] * 4 + c));
    }
  }
}

// The same row on a 1-shard and a 3-shard layout starts and trains the same.
TEST(SparseTableTest, RowValuesDoNotDependOnTheShard) {
  auto opt = MakeOptimizer(OptimizerConfig::ADAM);
  const int64_t row = 1234;
  const uint32_t owner = RowShard(row, 3);
  auto a = MakeTable(opt.get(), 5000, 3);
  auto b = MakeTable(opt.get(), 5000, 3, owner, 3);
  const std::vector<int64_t> ids = {row};
  const float g[3] = {0.5f, -1.0f, 2.0f};
  for (int step = 0; step < 3; ++step) {
    a->Apply(ids, g, step, 1.0);
    b->Apply(ids, g, step, 1.0);
  }
  std::vector<float> va(3), vb(3);
  a->Read(ids, va.data());
  b->Read(ids, vb.data());
  EXPECT_EQ(va, vb);
  // Another shard's row is refused by name.
  auto other = MakeTable(opt.get(), 5000, 3, (owner + 1) % 3, 3);
  absl::Status st = other->CheckIds(ids, true);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'emb'"), std::string::npos) << st;
}

TEST(SparseTableTest, BadIdsNameTheTensor) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD);
  auto t = MakeTable(opt.get(), 10, 2);
  for (const std::vector<int64_t>& ids :
       {std::vector<int64_t>{10}, std::vector<int64_t>{-1},
        std::vector<int64_t>{3, 4, 3}}) {
    absl::Status st = t->CheckIds(ids, /*unique=*/true);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("tensor 'emb'"), std::string::npos) << st;
  }
  EXPECT_TRUE(t->CheckIds({3, 4, 3}, /*unique=*/false).ok());
}

// Lazy Adam: each row has its own update count (bias correction), exactly
// Optimizer::Apply on that row alone with that count; untouched rows never
// move.
TEST(SparseTableTest, LazyAdamKeepsAStepCounterPerRow) {
  auto opt = MakeOptimizer(OptimizerConfig::ADAM);
  const int64_t dim = 2;
  auto t = MakeTable(opt.get(), 8, dim);
  // Reference: each row's weights and slots kept by hand.
  std::vector<std::vector<float>> w(8), slots(8);
  std::vector<uint64_t> count(8, 0);
  for (int r = 0; r < 8; ++r) {
    w[r] = Initial(r, dim);
    slots[r] = opt->InitSlots(dim);
  }
  const std::vector<std::vector<int64_t>> steps = {{1, 2}, {2}, {5, 1, 2}};
  for (size_t s = 0; s < steps.size(); ++s) {
    std::vector<float> g;
    for (int64_t id : steps[s]) {
      g.push_back(0.25f * (id + 1));
      g.push_back(-0.5f + s);
    }
    t->Apply(steps[s], g.data(), s, 1.0);
    for (size_t i = 0; i < steps[s].size(); ++i) {
      const int64_t r = steps[s][i];
      opt->Apply(s, count[r]++, w[r].data(), &g[i * dim], slots[r].data(), dim);
    }
  }
  std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<float> got(8 * dim);
  t->Read(all, got.data());
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < dim; ++c) EXPECT_EQ(got[r * dim + c], w[r][c]) << r;
  }
  EXPECT_EQ(got[0], Initial(0, dim)[0]);  // never touched
  EXPECT_EQ(t->stored_rows(), 3u);
  std::vector<SparseRowState> rows = t->Export();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].id, 1);
  EXPECT_EQ(rows[0].updates, 2u);
  EXPECT_EQ(rows[1].id, 2);
  EXPECT_EQ(rows[1].updates, 3u);
  EXPECT_EQ(rows[2].updates, 1u);
  EXPECT_EQ(rows[1].data.size(), static_cast<size_t>(dim * 3));
}

TEST(SparseTableTest, EvictsTheLeastRecentlyUsedRowAtTheBound) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD);
  auto t = MakeTable(opt.get(), 100, 1, 0, 1, /*max_rows=*/3);
  const float g[3] = {1, 1, 1};
  t->Apply({1, 2, 3}, g, 0, 1.0);
  std::vector<float> v(1);
  t->Read({1}, v.data());  // row 1 used: row 2 is now the oldest
  ASSERT_TRUE(t->CheckFits(1, 1).ok());
  t->Apply({4}, g, 1, 1.0);
  EXPECT_EQ(t->stored_rows(), 3u);
  EXPECT_EQ(t->evicted_rows(), 1u);
  EXPECT_FALSE(t->Stored(2));
  EXPECT_TRUE(t->Stored(1));
  // The evicted row reads as its initial value again.
  t->Read({2}, v.data());
  EXPECT_EQ(v[0], Initial(2, 1)[0]);
  // An update needing more rows than the bound at once is refused.
  absl::Status st = t->CheckFits(4, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("'emb'"), std::string::npos);
  EXPECT_NE(st.message().find("server.sparse_max_rows"), std::string::npos);
}

TEST(SparseTableTest, RejectModeRefusesNewRowsAtTheBound) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD);
  auto t = MakeTable(opt.get(), 100, 1, 0, 1, 2,
                     SparseTableOptions::OnFull::kReject);
  const float g[2] = {1, 1};
  ASSERT_TRUE(t->CheckFits(2, 2).ok());
  t->Apply({1, 2}, g, 0, 1.0);
  EXPECT_TRUE(t->CheckFits(2, 0).ok());  // stored rows again: fine
  absl::Status st = t->CheckFits(1, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("reject"), std::string::npos) << st;
}

TEST(SparseTableTest, ImportRestoresExactlyAndRefusesBadRows) {
  auto opt = MakeOptimizer(OptimizerConfig::ADAGRAD);
  auto a = MakeTable(opt.get(), 50, 2);
  const float g[4] = {1, 2, 3, 4};
  a->Apply({7, 9}, g, 0, 1.0);
  a->Apply({9, 7}, g, 1, 1.0);
  auto b = MakeTable(opt.get(), 50, 2);
  ASSERT_TRUE(b->Import(a->Export()).ok());
  a->Apply({7}, g, 2, 1.0);
  b->Apply({7}, g, 2, 1.0);
  std::vector<float> va(4), vb(4);
  a->Read({7, 9}, va.data());
  b->Read({7, 9}, vb.data());
  EXPECT_EQ(va, vb);
  std::vector<SparseRowState> bad = a->Export();
  bad[0].data.pop_back();
  EXPECT_EQ(b->Import(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = a->Export();
  bad[0].id = 50;
  EXPECT_EQ(b->Import(bad).code(), absl::StatusCode::kInvalidArgument);
  b->Read({7, 9}, vb.data());
  EXPECT_EQ(va, vb);  // unchanged by the refused imports
}

}  // namespace
}  // namespace pstrain
