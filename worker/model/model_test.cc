#include "worker/model/model.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"

namespace pstrain {
namespace {

using Params = std::vector<std::vector<float>>;

// ---------------------------------------------------------------------------
// A float64 reference of the dense models, written with plain loops.

double RefActivate(ModelConfig::Activation act, double z) {
  if (act == ModelConfig::RELU) return z > 0 ? z : 0;
  if (act == ModelConfig::TANH) return std::tanh(z);
  const double c = std::sqrt(2 / M_PI);
  return 0.5 * z * (1 + std::tanh(c * (z + 0.044715 * z * z * z)));
}

// Mean loss of `config` (linear, softmax or mlp) on `batch`.
double RefLoss(const ModelConfig& config,
               const std::vector<std::vector<double>>& p, const Batch& batch) {
  const bool softmax =
      config.type() == ModelConfig::SOFTMAX ||
      (config.type() == ModelConfig::MLP && config.classifier());
  const size_t layers = p.size() / 2;
  double total = 0;
  for (int64_t i = 0; i < batch.n; ++i) {
    std::vector<double> a(batch.x.begin() + i * batch.dim,
                          batch.x.begin() + (i + 1) * batch.dim);
    for (size_t l = 0; l < layers; ++l) {
      const std::vector<double>& w = p[2 * l];
      const std::vector<double>& b = p[2 * l + 1];
      const size_t in = a.size(), out = b.size();
      std::vector<double> z(b);
      for (size_t j = 0; j < out; ++j) {
        for (size_t k = 0; k < in; ++k) z[j] += a[k] * w[k * out + j];
      }
      if (l + 1 < layers) {
        for (double& v : z) v = RefActivate(config.activation(), v);
      }
      a = z;
    }
    const int label = static_cast<int>(batch.y[i]);
    if (softmax) {
      double sum = 0;
      for (double v : a) sum += std::exp(v);
      total += std::log(sum) - a[label];
    } else {
      for (size_t j = 0; j < a.size(); ++j) {
        const double target =
            a.size() == 1 ? batch.y[i] : (static_cast<int>(j) == label);
        total += 0.5 * (a[j] - target) * (a[j] - target);
      }
    }
  }
  return total / batch.n;
}

// Initial parameters plus noise, so biases are not zero.
Params RandomParams(const Model& model, std::mt19937* rng) {
  std::normal_distribution<float> noise(0, 0.3f);
  Params params;
  for (const auto& spec : model.params()) {
    std::vector<float> v(NumElements(spec));
    InitialValues(spec, 0, v.size(), v.data());
    for (float& x : v) x += noise(*rng);
    params.push_back(v);
  }
  return params;
}

Batch RandomBatch(int64_t n, int64_t dim, int64_t classes, std::mt19937* rng) {
  std::normal_distribution<float> normal(0, 1);
  Batch batch;
  batch.n = n;
  batch.dim = dim;
  for (int64_t k = 0; k < n * dim; ++k) batch.x.push_back(normal(*rng));
  for (int64_t i = 0; i < n; ++i) {
    batch.y.push_back(classes >= 2 ? static_cast<float>(i % classes)
                                   : normal(*rng));
  }
  return batch;
}

ModelConfig Config(ModelConfig::ModelType type, int64_t classes,
                   bool classifier = true,
                   ModelConfig::Activation activation = ModelConfig::RELU) {
  ModelConfig config = DefaultJobConfig().model();
  config.set_type(type);
  config.set_input_dim(5);
  config.set_num_classes(classes);
  SetList(config.mutable_hidden(), {6, 4});
  config.set_activation(activation);
  config.set_classifier(classifier);
  config.set_seed(3);
  return config;
}

struct GradCase {
  std::string name;
  ModelConfig config = DefaultJobConfig().model();
};

void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

class GradientTest : public ::testing::TestWithParam<GradCase> {};

// Every gradient element against central differences of the float64
// reference, and the float loss against the reference loss.
TEST_P(GradientTest, MatchesFiniteDifferences) {
  const ModelConfig& config = GetParam().config;
  auto model = Model::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  std::mt19937 rng(11);
  const Params params = RandomParams(**model, &rng);
  const Batch batch =
      RandomBatch(7, config.input_dim(), config.num_classes(), &rng);

  Params grads;
  auto loss = (*model)->LossAndGradient(params, batch, &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  std::vector<std::vector<double>> p;
  for (const auto& v : params) p.emplace_back(v.begin(), v.end());
  const double ref = RefLoss(config, p, batch);
  EXPECT_NEAR(*loss, ref, 1e-5 * std::max(1.0, std::abs(ref)));

  ASSERT_EQ(grads.size(), params.size());
  const double eps = 1e-6;
  for (size_t t = 0; t < p.size(); ++t) {
    ASSERT_EQ(grads[t].size(), params[t].size());
    for (size_t k = 0; k < p[t].size(); ++k) {
      const double saved = p[t][k];
      p[t][k] = saved + eps;
      const double up = RefLoss(config, p, batch);
      p[t][k] = saved - eps;
      const double down = RefLoss(config, p, batch);
      p[t][k] = saved;
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(grads[t][k], fd, 1e-4 + 1e-3 * std::abs(fd))
          << (*model)->params()[t].name() << "[" << k << "]";
    }
  }

  // Evaluate agrees with the mean loss.
  auto eval = (*model)->Evaluate(params, batch);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_NEAR(eval->loss_sum / batch.n, *loss, 1e-6 * std::max(1.0, *loss));
  EXPECT_EQ(eval->total, batch.n);
}

INSTANTIATE_TEST_SUITE_P(
    AllModels, GradientTest,
    ::testing::Values(
        GradCase{"linear1", Config(ModelConfig::LINEAR, 1)},
        GradCase{"linear3", Config(ModelConfig::LINEAR, 3)},
        GradCase{"softmax", Config(ModelConfig::SOFTMAX, 4)},
        GradCase{"mlp_relu_cls",
                 Config(ModelConfig::MLP, 3, true, ModelConfig::RELU)},
        GradCase{"mlp_tanh_cls",
                 Config(ModelConfig::MLP, 3, true, ModelConfig::TANH)},
        GradCase{"mlp_gelu_cls",
                 Config(ModelConfig::MLP, 3, true, ModelConfig::GELU)},
        GradCase{"mlp_relu_reg",
                 Config(ModelConfig::MLP, 1, false, ModelConfig::RELU)},
        GradCase{"mlp_tanh_reg",
                 Config(ModelConfig::MLP, 1, false, ModelConfig::TANH)},
        GradCase{"mlp_gelu_reg",
                 Config(ModelConfig::MLP, 1, false, ModelConfig::GELU)},
        GradCase{"mlp_gelu_onehot",
                 Config(ModelConfig::MLP, 3, false, ModelConfig::GELU)}),
    [](const auto& info) { return info.param.name; });

Batch TargetsBatch(std::vector<float> y) {
  Batch batch;
  batch.n = y.size();
  batch.y = std::move(y);
  return batch;
}

TEST(ScalarModelTest, WorkedExample) {
  ModelConfig config = DefaultJobConfig().model();
  config.set_type(ModelConfig::SCALAR);
  auto model = Model::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE((*model)->is_classifier());
  const Params w = {{2.0f}};
  Params grads;
  auto loss = (*model)->LossAndGradient(w, TargetsBatch({1, 3}), &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_DOUBLE_EQ(*loss, 1.0);  // ((2-1)^2 + (2-3)^2) / 2
  EXPECT_EQ(grads, Params({{0.0f}}));
  loss = (*model)->LossAndGradient(w, TargetsBatch({5, 7}), &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_DOUBLE_EQ(*loss, 17.0);        // (9 + 25) / 2
  EXPECT_EQ(grads, Params({{-8.0f}}));  // (2*(2-5) + 2*(2-7)) / 2

  auto eval = (*model)->Evaluate(w, TargetsBatch({5, 7}));
  ASSERT_TRUE(eval.ok());
  EXPECT_DOUBLE_EQ(eval->loss_sum, 34.0);
  EXPECT_EQ(eval->correct, 0);
  EXPECT_EQ(eval->total, 2);

  Batch with_features = TargetsBatch({1, 3});  // features are ignored
  with_features.dim = 2;
  with_features.x = {9, 9, 9, 9};
  loss = (*model)->LossAndGradient(w, with_features, &grads);
  ASSERT_TRUE(loss.ok());
  EXPECT_DOUBLE_EQ(*loss, 1.0);
}

TEST(EvaluateTest, CountsCorrectPredictions) {
  ModelConfig config = DefaultJobConfig().model();
  config.set_type(ModelConfig::SOFTMAX);
  config.set_input_dim(2);
  config.set_num_classes(2);
  auto model = Model::Create(config);
  ASSERT_TRUE(model.ok());
  EXPECT_TRUE((*model)->is_classifier());
  const Params params = {{1, 0, 0, 1}, {0, 0}};  // logits = x
  Batch batch;
  batch.n = 3;
  batch.dim = 2;
  batch.x = {1, 0, 0, 1, 2, 1};
  batch.y = {0, 1, 1};  // correct, correct, wrong
  auto eval = (*model)->Evaluate(params, batch);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->correct, 2);
  EXPECT_EQ(eval->total, 3);
  const double ce_right = std::log(1 + std::exp(-1.0));
  EXPECT_NEAR(eval->loss_sum, 2 * ce_right + std::log(1 + std::exp(1.0)), 1e-6);

  batch = Batch();  // an empty slice evaluates to nothing
  batch.dim = 2;
  eval = (*model)->Evaluate(params, batch);
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->total, 0);
}

TEST(EvaluateTest, StableForHugeLogits) {
  ModelConfig config = DefaultJobConfig().model();
  config.set_type(ModelConfig::SOFTMAX);
  config.set_input_dim(1);
  config.set_num_classes(2);
  auto model = Model::Create(config);
  ASSERT_TRUE(model.ok());
  Batch batch;
  batch.n = 1;
  batch.dim = 1;
  batch.x = {1000};
  batch.y = {1};
  Params grads;
  auto loss = (*model)->LossAndGradient({{1, -1}, {0, 0}}, batch, &grads);
  ASSERT_TRUE(loss.ok());
  EXPECT_NEAR(*loss, 2000, 1e-3);
  EXPECT_NEAR(grads[0][0], 1000, 1e-3);
}

TEST(ModelTest, ComputesThroughTheGivenBackend) {
  auto cpu = CreateCpuBackend();
  ASSERT_TRUE(cpu.ok());
  auto shared = Model::Create(
      Config(ModelConfig::MLP, 3, true, ModelConfig::GELU), cpu->get());
  auto owning =
      Model::Create(Config(ModelConfig::MLP, 3, true, ModelConfig::GELU));
  ASSERT_TRUE(shared.ok() && owning.ok());
  std::mt19937 rng(4);
  const Params params = RandomParams(**shared, &rng);
  const Batch batch = RandomBatch(6, 5, 3, &rng);
  Params g1, g2;
  auto l1 = (*shared)->LossAndGradient(params, batch, &g1);
  auto l2 = (*owning)->LossAndGradient(params, batch, &g2);
  ASSERT_TRUE(l1.ok() && l2.ok());
  EXPECT_EQ(*l1, *l2);
  EXPECT_EQ(g1, g2);
  EXPECT_EQ(Model::Create(Config(ModelConfig::MLP, 3), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The mean loss and the whole gradient at the resident parameters.
struct Computed {
  double loss = 0;
  std::vector<float> grad;
};
absl::StatusOr<Computed> Compute(Model* model, const Batch& batch) {
  Computed c;
  absl::StatusOr<double> loss = model->ComputeGradient(batch, false);
  if (!loss.ok()) return loss.status();
  c.loss = *loss;
  c.grad.resize(model->num_dense_params());
  absl::Status st = model->backend()->CopyToHost(
      *model->gradient(), model->num_dense_params(), c.grad.data());
  if (!st.ok()) return st;
  return c;
}

TensorViews ViewsOf(const Params& params) {
  return TensorViews(params.begin(), params.end());
}

// On the CPU backend ShareParams computes on the caller's memory itself
// (a change there shows in the next gradient), bit for bit as SetParams's
// copy does, and nothing writes that memory: not the step, not a later
// SetParams.
TEST(ModelTest, SharedParamsAreReadWhereTheyAreAndNeverWritten) {
  auto cpu = CreateCpuBackend();
  ASSERT_TRUE(cpu.ok());
  ASSERT_TRUE((*cpu)->host_memory());
  auto model = Model::Create(Config(ModelConfig::MLP, 3), cpu->get());
  ASSERT_TRUE(model.ok());
  std::mt19937 rng(5);
  const Params params = RandomParams(**model, &rng);
  const Params other = RandomParams(**model, &rng);
  const Batch batch = RandomBatch(6, 5, 3, &rng);

  ASSERT_TRUE((*model)->SetParams(ViewsOf(params)).ok());
  absl::StatusOr<Computed> copied = Compute(model->get(), batch);
  ASSERT_TRUE(copied.ok()) << copied.status();

  Params memory = params;
  ASSERT_TRUE((*model)->ShareParams(ViewsOf(memory)).ok());
  absl::StatusOr<Computed> shared = Compute(model->get(), batch);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(shared->loss, copied->loss);
  EXPECT_EQ(shared->grad, copied->grad);
  EXPECT_EQ(memory, params);  // the step only read it

  memory[0][0] += 1.0f;  // the model sees it: no copy was taken
  absl::StatusOr<Computed> moved = Compute(model->get(), batch);
  ASSERT_TRUE(moved.ok());
  EXPECT_NE(moved->grad, copied->grad);
  memory[0][0] = params[0][0];

  // Wrong sizes change nothing: the shared parameters stay resident.
  Params shorter = params;
  shorter[1].pop_back();
  EXPECT_EQ((*model)->ShareParams(ViewsOf(shorter)).code(),
            absl::StatusCode::kInvalidArgument);
  shared = Compute(model->get(), batch);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->grad, copied->grad);

  // A copy after a share goes to buffers of the model's own.
  ASSERT_TRUE((*model)->SetParams(ViewsOf(other)).ok());
  EXPECT_EQ(memory, params);
  absl::StatusOr<Computed> at_other = Compute(model->get(), batch);
  ASSERT_TRUE(at_other.ok());
  memory[0][0] += 1.0f;
  absl::StatusOr<Computed> again = Compute(model->get(), batch);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->grad, at_other->grad);
  memory[0][0] = params[0][0];
  // ...and releasing keeps a copy.
  (*model)->ReleaseSharedParams();
  ASSERT_TRUE(Compute(model->get(), batch).ok());

  // Released shared parameters are gone: no read of freed memory.
  ASSERT_TRUE((*model)->ShareParams(ViewsOf(memory)).ok());
  (*model)->ReleaseSharedParams();
  EXPECT_EQ(Compute(model->get(), batch).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ModelTest, BadInputsAreInvalidArgument) {
  auto model = Model::Create(Config(ModelConfig::MLP, 3));
  ASSERT_TRUE(model.ok());
  std::mt19937 rng(1);
  const Params params = RandomParams(**model, &rng);
  const Batch good = RandomBatch(4, 5, 3, &rng);
  Params grads;
  ASSERT_TRUE((*model)->LossAndGradient(params, good, &grads).ok());

  auto expect_invalid = [&](const Params& p, const Batch& b) {
    EXPECT_EQ((*model)->LossAndGradient(p, b, &grads).status().code(),
              absl::StatusCode::kInvalidArgument);
    if (b.n > 0) {
      EXPECT_EQ((*model)->Evaluate(p, b).status().code(),
                absl::StatusCode::kInvalidArgument);
    }
  };
  Params fewer(params.begin(), params.end() - 1);
  expect_invalid(fewer, good);
  Params shorter = params;
  shorter[2].pop_back();
  expect_invalid(shorter, good);
  Batch b = good;
  b.dim = 4;
  b.x.resize(16);
  expect_invalid(params, b);
  b = good;
  b.x.pop_back();
  expect_invalid(params, b);
  b = good;
  b.y.pop_back();
  expect_invalid(params, b);
  for (float label : {3.0f, -1.0f, 1.5f, NAN}) {
    b = good;
    b.y[2] = label;
    expect_invalid(params, b);
  }
  expect_invalid(params, Batch());  // empty batch has no mean loss

  auto scalar = Model::Create(Config(ModelConfig::SCALAR, 1));
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ((*scalar)
                ->LossAndGradient({{1.0f}}, TargetsBatch({INFINITY}), &grads)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      (*scalar)->Evaluate({{1.0f, 2.0f}}, TargetsBatch({1})).status().code(),
      absl::StatusCode::kInvalidArgument);

  ModelConfig bad = Config(ModelConfig::MLP, 3);
  bad.set_activation(ModelConfig::ACTIVATION_UNSPECIFIED);
  EXPECT_EQ(Model::Create(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
