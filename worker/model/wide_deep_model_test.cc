// The wide-and-deep model on the CPU backend: its parameter specs, the
// hashing trick, the row-sparse step (RowIds, SetRows, row_gradient),
// finite differences for every dense tensor and every embedding row touched,
// accumulation, and bad input.
#include "worker/model/wide_deep_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "worker/model/model.h"

namespace pstrain {
namespace {

using Params = std::vector<std::vector<float>>;

ModelConfig SmallConfig(ModelConfig::Pooling pooling, int64_t hashes) {
  ModelConfig config;
  config.set_type(ModelConfig::WIDE_DEEP);
  config.set_input_dim(3);
  config.set_num_classes(3);
  config.set_activation(ModelConfig::TANH);  // smooth: finite differences
  config.set_sparse_columns(2);
  config.set_buckets(50);
  config.set_embedding_dim(3);
  config.set_hashes(hashes);
  config.set_pooling(pooling);
  config.set_seed(3);
  SetList(config.mutable_bottom_hidden(), {4});
  SetList(config.mutable_hidden(), {5});
  return config;
}

// n examples; categorical values from a small set, so rows repeat within
// and across examples.
Batch MakeBatch(int64_t n, int64_t dim, int64_t columns, int64_t classes,
                std::mt19937* rng) {
  std::normal_distribution<float> normal(0, 1);
  std::uniform_int_distribution<int> value(0, 3);
  Batch batch;
  batch.n = n;
  batch.dim = dim;
  batch.num_cat = columns;
  for (int64_t k = 0; k < n * dim; ++k) batch.x.push_back(normal(*rng));
  for (int64_t k = 0; k < n * columns; ++k) batch.cat.push_back(value(*rng));
  for (int64_t i = 0; i < n; ++i) batch.y.push_back((i * 2) % classes);
  return batch;
}

// Dense parameters at their initial values plus noise (biases not zero);
// an empty view for the table.
Params InitialParams(const Model& model, std::mt19937* rng) {
  std::normal_distribution<float> noise(0, 0.1f);
  Params params;
  for (const auto& spec : model.params()) {
    std::vector<float> v;
    if (!spec.row_sparse()) {
      v.resize(NumElements(spec));
      InitialValues(spec, 0, v.size(), v.data());
      for (float& x : v) x += noise(*rng);
    }
    params.push_back(v);
  }
  return params;
}

// The rows `ids` of the table, larger than their initial values so that
// the embeddings matter to the loss.
SparseRows TableRows(const pstrain::v1::TensorSpec& spec,
                     const std::vector<int64_t>& ids) {
  const int64_t dim = spec.shape(1);
  SparseRows rows;
  rows.ids = ids;
  rows.values.resize(ids.size() * dim);
  for (size_t k = 0; k < ids.size(); ++k) {
    InitialValues(spec, ids[k] * dim, dim, &rows.values[k * dim]);
  }
  for (float& v : rows.values) v *= 8;
  return rows;
}

TEST(WideDeepSpecsTest, TableIsRowSparseAndLayersFollow) {
  auto specs = ModelParamSpecs(SmallConfig(ModelConfig::SUM, 2));
  ASSERT_TRUE(specs.ok()) << specs.status();
  std::vector<std::string> names;
  for (const auto& s : *specs) names.push_back(s.name());
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "embedding", "bottom0/weight", "bottom0/bias", "top0/weight",
                "top0/bias", "top1/weight", "top1/bias"}));
  EXPECT_TRUE((*specs)[0].row_sparse());
  EXPECT_EQ((*specs)[0].shape(0), 50);
  EXPECT_EQ((*specs)[0].shape(1), 3);
  for (size_t t = 1; t < specs->size(); ++t) {
    EXPECT_FALSE((*specs)[t].row_sparse());
  }
  // top0 reads the bottom output (4) and 2 columns x 3 wide embeddings.
  EXPECT_EQ((*specs)[3].shape(0), 4 + 2 * 3);
  EXPECT_EQ((*specs)[3].shape(1), 5);
  EXPECT_EQ((*specs)[5].shape(1), 3);

  ModelConfig bad = SmallConfig(ModelConfig::SUM, 1);
  bad.set_buckets(0);
  EXPECT_EQ(ModelParamSpecs(bad).status().message(),
            "model.buckets: must be >= 1 for model.type wide_deep, got 0");
  bad = SmallConfig(ModelConfig::POOLING_UNSPECIFIED, 1);
  EXPECT_EQ(ModelParamSpecs(bad).status().message(),
            "model.pooling: must be sum or mean");
  bad = SmallConfig(ModelConfig::SUM, 1);
  bad.set_num_classes(1);
  EXPECT_EQ(ModelParamSpecs(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HashedRowTest, InRangeStableAndSpread) {
  const int64_t buckets = 100;
  std::vector<int64_t> count(buckets, 0);
  for (uint64_t v = 0; v < 100000; ++v) {
    const int64_t row = HashedRow(v, 3, 0, buckets);
    ASSERT_GE(row, 0);
    ASSERT_LT(row, buckets);
    EXPECT_EQ(row, HashedRow(v, 3, 0, buckets));
    ++count[row];
  }
  // 1000 expected per bucket; a binomial's sd is about 31.
  for (int64_t c : count) {
    EXPECT_GT(c, 850);
    EXPECT_LT(c, 1150);
  }
  // Columns and hash numbers are independent hashes: few coincidences.
  int same_column = 0, same_hash = 0;
  for (uint64_t v = 0; v < 10000; ++v) {
    same_column += HashedRow(v, 0, 0, 1 << 20) == HashedRow(v, 1, 0, 1 << 20);
    same_hash += HashedRow(v, 0, 0, 1 << 20) == HashedRow(v, 0, 1, 1 << 20);
  }
  EXPECT_LT(same_column, 5);
  EXPECT_LT(same_hash, 5);
  EXPECT_GE(HashedRow(kMissingCategory, 25, 0, 10000000), 0);
}

class WideDeepGradientTest
    : public ::testing::TestWithParam<std::pair<ModelConfig::Pooling, int>> {};

// The analytic gradient (dense tensors and the row-sparse rows) against
// central differences of the mean loss, in float with a tanh model.
TEST_P(WideDeepGradientTest, MatchesFiniteDifferences) {
  const ModelConfig config = SmallConfig(GetParam().first, GetParam().second);
  auto model = Model::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  std::mt19937 rng(11);
  Params params = InitialParams(m, &rng);
  const Batch batch = MakeBatch(7, 3, 2, 3, &rng);
  auto ids = m.RowIds(0, batch);
  ASSERT_TRUE(ids.ok()) << ids.status();
  // 2 columns x 4 values x hashes lookups at most, fewer distinct rows
  // than lookups (values repeat).
  EXPECT_LT(static_cast<int64_t>(ids->size()), 7 * 2 * GetParam().second);
  EXPECT_TRUE(std::is_sorted(ids->begin(), ids->end()));
  SparseRows rows = TableRows(m.params()[0], *ids);
  ASSERT_TRUE(m.SetRows(0, rows).ok());
  ASSERT_TRUE(m.SetParams(params).ok());
  auto loss = m.ComputeGradient(batch, false);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_NE(m.gradient(), nullptr);
  EXPECT_GE(m.gradient()->size(), m.num_dense_params() + 1);
  std::vector<float> grad(m.num_dense_params());
  ASSERT_TRUE(
      m.backend()->CopyToHost(*m.gradient(), grad.size(), grad.data()).ok());
  const SparseRows* row_grad = m.row_gradient(0);
  ASSERT_NE(row_grad, nullptr);
  EXPECT_EQ(row_grad->ids, *ids);  // exactly the rows the batch touched
  ASSERT_EQ(row_grad->values.size(), ids->size() * 3);
  const SparseRows row_g = *row_grad;

  auto mean_loss = [&]() -> double {
    EXPECT_TRUE(m.SetParams(params).ok());
    EXPECT_TRUE(m.SetRows(0, rows).ok());
    auto r = m.EvaluateResident(batch);
    EXPECT_TRUE(r.ok()) << r.status();
    return r->loss_sum / batch.n;
  };
  EXPECT_NEAR(mean_loss(), *loss, 1e-5);
  const float eps = 1e-2f;
  auto check = [&](float* value, double analytic, const std::string& what) {
    const float saved = *value;
    *value = saved + eps;
    const double up = mean_loss();
    *value = saved - eps;
    const double down = mean_loss();
    *value = saved;
    const double fd = (up - down) / (2 * eps);
    EXPECT_NEAR(analytic, fd, 2e-3 + 2e-2 * std::abs(fd)) << what;
  };
  int64_t offset = 0;
  for (size_t t = 1; t < params.size(); ++t) {
    for (size_t k = 0; k < params[t].size(); ++k) {
      check(&params[t][k], grad[offset + k],
            absl::StrCat(m.params()[t].name(), "[", k, "]"));
    }
    offset += params[t].size();
  }
  double row_norm = 0;
  for (size_t k = 0; k < rows.values.size(); ++k) {
    check(&rows.values[k], row_g.values[k],
          absl::StrCat("embedding row ", rows.ids[k / 3], "[", k % 3, "]"));
    row_norm += std::abs(row_g.values[k]);
  }
  EXPECT_GT(row_norm, 1e-3);  // the embeddings do reach the loss
}

INSTANTIATE_TEST_SUITE_P(
    Pooling, WideDeepGradientTest,
    ::testing::Values(std::make_pair(ModelConfig::SUM, 1),
                      std::make_pair(ModelConfig::SUM, 2),
                      std::make_pair(ModelConfig::MEAN, 3)),
    [](const auto& info) {
      return absl::StrCat(info.param.first == ModelConfig::SUM ? "sum" : "mean",
                          "_hashes", info.param.second);
    });

// No bottom MLP and no top hidden layer: the numeric columns go straight
// into the one top layer beside the embeddings.
TEST(WideDeepModelTest, WithoutHiddenLayersMatchesFiniteDifferences) {
  ModelConfig config = SmallConfig(ModelConfig::SUM, 1);
  config.clear_bottom_hidden();
  config.clear_hidden();
  auto model = Model::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  std::mt19937 rng(2);
  Params params = InitialParams(m, &rng);
  const Batch batch = MakeBatch(5, 3, 2, 3, &rng);
  SparseRows rows = TableRows(m.params()[0], *m.RowIds(0, batch));
  ASSERT_TRUE(m.SetRows(0, rows).ok());
  ASSERT_TRUE(m.SetParams(params).ok());
  auto loss = m.ComputeGradient(batch, false);
  ASSERT_TRUE(loss.ok()) << loss.status();
  std::vector<float> grad(m.num_dense_params());
  ASSERT_TRUE(
      m.backend()->CopyToHost(*m.gradient(), grad.size(), grad.data()).ok());
  const SparseRows row_g = *m.row_gradient(0);
  auto mean_loss = [&]() {
    EXPECT_TRUE(m.SetParams(params).ok());
    EXPECT_TRUE(m.SetRows(0, rows).ok());
    return m.EvaluateResident(batch)->loss_sum / batch.n;
  };
  const float eps = 1e-2f;
  for (size_t k = 0; k < params[1].size(); ++k) {
    const float saved = params[1][k];
    params[1][k] = saved + eps;
    const double up = mean_loss();
    params[1][k] = saved - eps;
    const double down = mean_loss();
    params[1][k] = saved;
    EXPECT_NEAR(grad[k], (up - down) / (2 * eps), 2e-3) << "top0/weight " << k;
  }
  for (size_t k = 0; k < rows.values.size(); ++k) {
    const float saved = rows.values[k];
    rows.values[k] = saved + eps;
    const double up = mean_loss();
    rows.values[k] = saved - eps;
    const double down = mean_loss();
    rows.values[k] = saved;
    EXPECT_NEAR(row_g.values[k], (up - down) / (2 * eps), 2e-3) << "row " << k;
  }
}

// Accumulating two batches: the dense gradient is the sum, the row gradient
// the union of both batches' rows with shared rows summed.
TEST(WideDeepModelTest, AccumulatesRowGradientsAsAUnion) {
  ModelConfig config = SmallConfig(ModelConfig::SUM, 2);
  config.set_buckets(1000);
  auto model = Model::Create(config);
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  std::mt19937 rng(4);
  const Params params = InitialParams(m, &rng);
  Batch a = MakeBatch(6, 3, 2, 3, &rng), b = MakeBatch(5, 3, 2, 3, &rng);
  for (uint64_t& v : b.cat) v += 2;  // overlaps a's values 2, 3 only
  std::vector<int64_t> all = *m.RowIds(0, a);
  const std::vector<int64_t> ids_b = *m.RowIds(0, b);
  all.insert(all.end(), ids_b.begin(), ids_b.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  ASSERT_TRUE(m.SetRows(0, TableRows(m.params()[0], all)).ok());
  ASSERT_TRUE(m.SetParams(params).ok());

  auto single = [&](const Batch& batch, std::vector<float>* dense) {
    EXPECT_TRUE(m.ComputeGradient(batch, false).ok());
    dense->resize(m.num_dense_params());
    EXPECT_TRUE(m.backend()
                    ->CopyToHost(*m.gradient(), dense->size(), dense->data())
                    .ok());
    return *m.row_gradient(0);
  };
  std::vector<float> dense_a, dense_b, dense_ab;
  const SparseRows rows_a = single(a, &dense_a);
  const SparseRows rows_b = single(b, &dense_b);
  ASSERT_TRUE(m.ComputeGradient(a, false).ok());
  ASSERT_TRUE(m.ComputeGradient(b, true).ok());
  dense_ab.resize(m.num_dense_params());
  ASSERT_TRUE(m.backend()
                  ->CopyToHost(*m.gradient(), dense_ab.size(), dense_ab.data())
                  .ok());
  for (size_t k = 0; k < dense_ab.size(); ++k) {
    EXPECT_FLOAT_EQ(dense_ab[k], dense_a[k] + dense_b[k]) << k;
  }
  std::map<int64_t, std::vector<float>> want;
  for (const SparseRows* r : {&rows_a, &rows_b}) {
    for (size_t k = 0; k < r->ids.size(); ++k) {
      std::vector<float>& row = want[r->ids[k]];
      row.resize(3, 0.0f);
      for (int j = 0; j < 3; ++j) row[j] += r->values[k * 3 + j];
    }
  }
  const SparseRows& got = *m.row_gradient(0);
  ASSERT_EQ(got.ids.size(), want.size());
  EXPECT_LT(got.ids.size(), rows_a.ids.size() + rows_b.ids.size());  // shared
  size_t k = 0;
  for (const auto& [id, row] : want) {
    EXPECT_EQ(got.ids[k], id);
    for (int j = 0; j < 3; ++j) {
      EXPECT_FLOAT_EQ(got.values[k * 3 + j], row[j]) << id;
    }
    ++k;
  }
}

// ShareParams (the dense tensors computed on where they are, the table's
// view empty) gives SetParams's gradients bit for bit, and reads the
// caller's memory itself.
TEST(WideDeepModelTest, SharedDenseParamsMatchCopiedOnes) {
  auto model = Model::Create(SmallConfig(ModelConfig::SUM, 2));
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  ASSERT_TRUE(m.backend()->host_memory());
  std::mt19937 rng(6);
  const Params params = InitialParams(m, &rng);
  const Batch batch = MakeBatch(6, 3, 2, 3, &rng);
  ASSERT_TRUE(m.SetRows(0, TableRows(m.params()[0], *m.RowIds(0, batch))).ok());
  auto gradient = [&](std::vector<float>* dense) {
    ASSERT_TRUE(m.ComputeGradient(batch, false).ok());
    dense->resize(m.num_dense_params());
    ASSERT_TRUE(m.backend()
                    ->CopyToHost(*m.gradient(), dense->size(), dense->data())
                    .ok());
  };
  std::vector<float> copied, shared, moved;
  ASSERT_TRUE(m.SetParams(params).ok());
  gradient(&copied);
  const SparseRows rows_copied = *m.row_gradient(0);
  Params memory = params;
  TensorViews views(memory.begin(), memory.end());
  ASSERT_TRUE(m.ShareParams(views).ok());
  gradient(&shared);
  EXPECT_EQ(shared, copied);
  EXPECT_EQ(m.row_gradient(0)->values, rows_copied.values);
  EXPECT_EQ(memory, params);
  memory.back()[0] += 1.0f;  // the top layer's bias, read in place
  gradient(&moved);
  EXPECT_NE(moved, copied);
  m.ReleaseSharedParams();
  EXPECT_EQ(m.ComputeGradient(batch, false).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A table of 4e9 rows x 16 (256 GB as a dense buffer) trains: nothing the
// size of the table is ever allocated.
TEST(WideDeepModelTest, HugeTableNeedsOnlyTheBatchRows) {
  ModelConfig config = SmallConfig(ModelConfig::MEAN, 2);
  config.set_buckets(4000000000LL);
  config.set_embedding_dim(16);
  auto model = Model::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  EXPECT_EQ(m.num_params() - m.num_dense_params(), 4000000000LL * 16);
  std::mt19937 rng(8);
  const Batch batch = MakeBatch(32, 3, 2, 3, &rng);
  auto ids = m.RowIds(0, batch);
  ASSERT_TRUE(ids.ok());
  EXPECT_GT(ids->back(), 1000000);  // spread over the whole table
  ASSERT_TRUE(m.SetRows(0, TableRows(m.params()[0], *ids)).ok());
  ASSERT_TRUE(m.SetParams(InitialParams(m, &rng)).ok());
  auto loss = m.ComputeGradient(batch, false);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_TRUE(std::isfinite(*loss));
  EXPECT_EQ(m.row_gradient(0)->ids, *ids);
  EXPECT_LT(m.gradient()->size(), 1000);
}

TEST(WideDeepModelTest, BadInputIsRejectedAndChangesNothing) {
  auto model = Model::Create(SmallConfig(ModelConfig::SUM, 1));
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  std::mt19937 rng(1);
  Params params = InitialParams(m, &rng);
  const Batch batch = MakeBatch(4, 3, 2, 3, &rng);
  const std::vector<int64_t> ids = *m.RowIds(0, batch);
  ASSERT_TRUE(m.SetRows(0, TableRows(m.params()[0], ids)).ok());
  ASSERT_TRUE(m.SetParams(params).ok());
  auto before = m.EvaluateResident(batch);
  ASSERT_TRUE(before.ok());

  // Rows: unsorted, out of range, wrong size. The old rows stay.
  SparseRows bad = TableRows(m.params()[0], {5, 3});
  EXPECT_EQ(m.SetRows(0, bad).code(), absl::StatusCode::kInvalidArgument);
  bad = TableRows(m.params()[0], {3, 50});
  EXPECT_EQ(m.SetRows(0, bad).code(), absl::StatusCode::kInvalidArgument);
  bad = TableRows(m.params()[0], {3});
  bad.values.pop_back();
  EXPECT_EQ(m.SetRows(0, bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.SetRows(1, bad).message(),
            "parameter 'bottom0/weight' is not row-sparse");
  EXPECT_EQ(m.RowIds(7, batch).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto after = m.EvaluateResident(batch);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->loss_sum, before->loss_sum);

  // A batch needing a row that was not set.
  ASSERT_TRUE(
      m.SetRows(0, TableRows(m.params()[0], {ids.begin() + 1, ids.end()}))
          .ok());
  auto missing = m.ComputeGradient(batch, false);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find(absl::StrCat("row ", ids[0])),
            std::string::npos)
      << missing.status();

  // A dense view for the table; wrong categorical width; bad labels.
  params[0].assign(50 * 3, 0.0f);
  EXPECT_EQ(m.SetParams(params).code(), absl::StatusCode::kInvalidArgument);
  Batch wrong = batch;
  wrong.num_cat = 3;
  EXPECT_EQ(m.RowIds(0, wrong).status().code(),
            absl::StatusCode::kInvalidArgument);
  wrong = batch;
  wrong.y[0] = 3;
  EXPECT_EQ(m.EvaluateResident(wrong).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Dense models have no row-sparse tensor and reject categorical columns.
  ModelConfig mlp;
  mlp.set_type(ModelConfig::MLP);
  mlp.set_input_dim(3);
  mlp.set_num_classes(3);
  mlp.set_activation(ModelConfig::RELU);
  mlp.set_classifier(true);
  SetList(mlp.mutable_hidden(), {4});
  auto dense = Model::Create(mlp);
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ((*dense)->RowIds(0, batch).status().message(),
            "parameter 'layer0/weight' is not row-sparse");
  EXPECT_EQ((*dense)->row_gradient(0), nullptr);
  EXPECT_EQ((*dense)->num_dense_params(), (*dense)->num_params());
  Params dense_params;
  for (const auto& spec : (*dense)->params()) {
    dense_params.emplace_back(NumElements(spec), 0.1f);
  }
  EXPECT_EQ((*dense)->Evaluate(dense_params, batch).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
