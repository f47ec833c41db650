#include "common/optimizer.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::pstrain::v1::OptimizerConfig;
using ::testing::HasSubstr;

constexpr double kPi = 3.14159265358979323846;

// Three steps of gradients for a 4-element vector; the expected values below
// are computed from these in double, independently of the implementation.
const std::vector<double> kW0 = {0.5, -1.0, 2.0, 0.0};
const std::vector<std::vector<double>> kGrads = {
    {0.1, -0.2, 0.3, 1.0}, {0.4, 0.1, -0.5, -1.0}, {-0.3, 0.2, 0.05, 2.0}};

OptimizerConfig MakeConfig(OptimizerConfig::Kind kind, double lr) {
  OptimizerConfig c;
  c.set_kind(kind);
  c.set_base_lr(lr);
  return c;
}

std::unique_ptr<Optimizer> MustCreate(const OptimizerConfig& c) {
  auto opt = Optimizer::Create(c);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? std::move(opt).value() : nullptr;
}

// Runs the optimizer over kGrads from kW0 (step = update_count = t).
std::vector<float> RunThreeSteps(const Optimizer& opt) {
  std::vector<float> w(kW0.begin(), kW0.end());
  std::vector<float> slots = opt.InitSlots(w.size());
  for (size_t t = 0; t < kGrads.size(); ++t) {
    std::vector<float> g(kGrads[t].begin(), kGrads[t].end());
    opt.Apply(t, t, w.data(), g.data(), slots.data(), w.size());
  }
  return w;
}

void ExpectClose(const std::vector<float>& got,
                 const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i])))
        << "element " << i;
  }
}

TEST(OptimizerTest, SgdMatchesClosedForm) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::SGD, 0.1);
  c.set_weight_decay(0.05);
  std::vector<double> w = kW0;
  for (const auto& g : kGrads) {
    for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.1 * (g[i] + 0.05 * w[i]);
  }
  ExpectClose(RunThreeSteps(*MustCreate(c)), w);
}

std::vector<double> MomentumReference(bool nesterov) {
  const double lr = 0.1, mu = 0.9, wd = 0.01;
  std::vector<double> w = kW0, buf(w.size(), 0.0);
  for (const auto& g : kGrads) {
    for (size_t i = 0; i < w.size(); ++i) {
      const double gi = g[i] + wd * w[i];
      buf[i] = mu * buf[i] + gi;
      w[i] -= lr * (nesterov ? gi + mu * buf[i] : buf[i]);
    }
  }
  return w;
}

TEST(OptimizerTest, MomentumAndNesterovMatchClosedForm) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::MOMENTUM, 0.1);
  c.set_momentum(0.9);
  c.set_weight_decay(0.01);
  const std::vector<float> plain = RunThreeSteps(*MustCreate(c));
  ExpectClose(plain, MomentumReference(false));
  c.set_nesterov(true);
  const std::vector<float> nesterov = RunThreeSteps(*MustCreate(c));
  ExpectClose(nesterov, MomentumReference(true));
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_GT(std::abs(plain[i] - nesterov[i]), 1e-3) << "element " << i;
  }
}

// Textbook Adam with bias-corrected moments; `decoupled` selects AdamW.
std::vector<double> AdamReference(double lr, double wd, double eps,
                                  bool decoupled) {
  const double b1 = 0.9, b2 = 0.999;
  std::vector<double> w = kW0, m(w.size(), 0.0), v(w.size(), 0.0);
  for (size_t t = 1; t <= kGrads.size(); ++t) {
    const auto& g = kGrads[t - 1];
    for (size_t i = 0; i < w.size(); ++i) {
      double gi = g[i];
      if (decoupled) {
        w[i] -= lr * wd * w[i];
      } else {
        gi += wd * w[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double vhat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  return w;
}

TEST(OptimizerTest, AdamMatchesClosedForm) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::ADAM, 0.01);
  c.set_weight_decay(0.5);
  ExpectClose(RunThreeSteps(*MustCreate(c)),
              AdamReference(0.01, 0.5, 1e-8, false));
}

TEST(OptimizerTest, AdamWMatchesClosedFormAndDiffersFromAdam) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::ADAMW, 0.01);
  c.set_weight_decay(0.5);
  c.set_epsilon(0.05);  // large enough that its placement matters
  const std::vector<float> adamw = RunThreeSteps(*MustCreate(c));
  ExpectClose(adamw, AdamReference(0.01, 0.5, 0.05, true));
  c.set_kind(OptimizerConfig::ADAM);
  const std::vector<float> adam = RunThreeSteps(*MustCreate(c));
  EXPECT_GT(std::abs(adam[0] - adamw[0]), 1e-4);
}

TEST(OptimizerTest, AdagradMatchesClosedForm) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::ADAGRAD, 0.1);
  c.set_adagrad_init(0.1);
  c.set_weight_decay(0.02);
  c.set_epsilon(0.1);  // large enough that its placement matters
  std::vector<double> w = kW0, acc(w.size(), 0.1);
  for (const auto& g : kGrads) {
    for (size_t i = 0; i < w.size(); ++i) {
      const double gi = g[i] + 0.02 * w[i];
      acc[i] += gi * gi;
      w[i] -= 0.1 * gi / (std::sqrt(acc[i]) + 0.1);
    }
  }
  ExpectClose(RunThreeSteps(*MustCreate(c)), w);
}

TEST(OptimizerTest, WeightDecayShrinksWeightsUnderZeroGradient) {
  for (auto kind : {OptimizerConfig::SGD, OptimizerConfig::MOMENTUM,
                    OptimizerConfig::ADAMW}) {
    OptimizerConfig c = MakeConfig(kind, 0.1);
    c.set_weight_decay(0.5);
    std::unique_ptr<Optimizer> opt = MustCreate(c);
    std::vector<float> w = {2.0f, -4.0f}, g = {0.0f, 0.0f};
    std::vector<float> slots = opt->InitSlots(2);
    for (int t = 0; t < 3; ++t) {
      opt->Apply(t, t, w.data(), g.data(), slots.data(), 2);
    }
    // Every rule reduces to w *= 1 - lr * wd per step here: SGD directly,
    // momentum 0 via buf = wd * w, AdamW because m = v = 0.
    std::vector<double> want = {2.0, -4.0};
    for (double& x : want) x *= std::pow(1 - 0.1 * 0.5, 3);
    SCOPED_TRACE(OptimizerConfig::Kind_Name(kind));
    ExpectClose(w, want);
  }
}

TEST(LearningRateTest, LinearWarmupThenConstant) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::SGD, 0.4);
  c.set_warmup_steps(4);
  EXPECT_DOUBLE_EQ(LearningRate(c, 0), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(c, 1), 0.2);
  EXPECT_DOUBLE_EQ(LearningRate(c, 3), 0.4);
  EXPECT_DOUBLE_EQ(LearningRate(c, 4), 0.4);
  EXPECT_DOUBLE_EQ(LearningRate(c, 1000), 0.4);
}

TEST(LearningRateTest, StepScheduleCountsFromEndOfWarmup) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::SGD, 1.0);
  c.set_schedule(OptimizerConfig::STEP);
  c.set_step_size(10);
  c.set_gamma(0.5);
  EXPECT_DOUBLE_EQ(LearningRate(c, 0), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(c, 9), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(c, 10), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(c, 25), 0.25);
  c.set_warmup_steps(5);
  EXPECT_DOUBLE_EQ(LearningRate(c, 14), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(c, 15), 0.5);
  c.clear_gamma();  // default 0.1
  EXPECT_NEAR(LearningRate(c, 25), 0.01, 1e-15);
}

TEST(LearningRateTest, CosineEndpointsMidpointAndClamp) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::SGD, 2.0);
  c.set_schedule(OptimizerConfig::COSINE);
  c.set_warmup_steps(10);
  c.set_total_steps(110);
  c.set_min_lr_ratio(0.1);
  EXPECT_DOUBLE_EQ(LearningRate(c, 9), 2.0);     // end of warm-up
  EXPECT_DOUBLE_EQ(LearningRate(c, 10), 2.0);    // cosine starts at lr
  EXPECT_NEAR(LearningRate(c, 60), 1.1, 1e-12);  // (0.2 + 2.0) / 2
  EXPECT_NEAR(LearningRate(c, 35),
              2.0 * (0.1 + 0.9 * 0.5 * (1 + std::cos(kPi * 0.25))), 1e-12);
  EXPECT_NEAR(LearningRate(c, 110), 0.2, 1e-12);
  EXPECT_NEAR(LearningRate(c, 5000), 0.2, 1e-12);
}

TEST(LearningRateTest, LinearScaling) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::SGD, 0.1);
  c.set_global_batch(1024);
  c.set_reference_batch(256);
  EXPECT_DOUBLE_EQ(LearningRate(c, 0), 0.1);  // off unless linear_scaling
  c.set_linear_scaling(true);
  EXPECT_DOUBLE_EQ(LearningRate(c, 0), 0.4);
  c.set_warmup_steps(2);
  EXPECT_DOUBLE_EQ(LearningRate(c, 0), 0.2);
}

TEST(OptimizerTest, ApplyUsesScheduledLearningRate) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::SGD, 1.0);
  c.set_warmup_steps(4);
  std::unique_ptr<Optimizer> opt = MustCreate(c);
  float w = 1.0f, g = 1.0f;
  opt->Apply(/*step=*/0, 0, &w, &g, nullptr, 1);
  EXPECT_FLOAT_EQ(w, 0.75f);
  opt->Apply(/*step=*/3, 0, &w, &g, nullptr, 1);
  EXPECT_FLOAT_EQ(w, -0.25f);
}

TEST(OptimizerTest, AdamBiasCorrectionUsesUpdateCount) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::ADAM, 0.01);
  std::unique_ptr<Optimizer> opt = MustCreate(c);
  // From fresh state m = 0.1 g and v = 0.001 g^2. At t = 1 the corrections
  // undo that (a step of ~lr); at t = 1001 they are ~1 (~3.16 lr).
  for (uint64_t count : {0, 1000}) {
    for (uint64_t step : {0, 50}) {  // constant schedule: step is irrelevant
      float w = 0.0f, g = 2.0f;
      std::vector<float> slots = opt->InitSlots(1);
      opt->Apply(step, count, &w, &g, slots.data(), 1);
      const double t = count + 1.0;
      const double mhat = 0.1 * 2.0 / (1 - std::pow(0.9, t));
      const double vhat = 0.001 * 4.0 / (1 - std::pow(0.999, t));
      EXPECT_NEAR(w, -0.01 * mhat / (std::sqrt(vhat) + 1e-8), 1e-6)
          << "update_count " << count << " step " << step;
    }
  }
}

TEST(OptimizerTest, InitSlotsAndDefaults) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::SGD, 0.1);
  EXPECT_TRUE(MustCreate(c)->InitSlots(5).empty());
  c.set_kind(OptimizerConfig::MOMENTUM);
  EXPECT_EQ(MustCreate(c)->InitSlots(5), std::vector<float>(5, 0.0f));
  c.set_kind(OptimizerConfig::ADAM);
  std::unique_ptr<Optimizer> adam = MustCreate(c);
  EXPECT_EQ(adam->num_slots(), 2);
  EXPECT_EQ(adam->InitSlots(5), std::vector<float>(10, 0.0f));
  EXPECT_DOUBLE_EQ(adam->config().beta1(), 0.9);
  EXPECT_DOUBLE_EQ(adam->config().beta2(), 0.999);
  EXPECT_DOUBLE_EQ(adam->config().epsilon(), 1e-8);
  EXPECT_DOUBLE_EQ(adam->config().gamma(), 0.1);
  c.set_kind(OptimizerConfig::ADAGRAD);
  c.set_adagrad_init(0.25);
  std::unique_ptr<Optimizer> adagrad = MustCreate(c);
  EXPECT_EQ(adagrad->InitSlots(3), std::vector<float>(3, 0.25f));
  EXPECT_DOUBLE_EQ(adagrad->config().epsilon(), 1e-10);
}

TEST(OptimizerTest, CreateRejectsBadConfigNamingTheField) {
  struct Case {
    std::string field;
    std::function<void(OptimizerConfig&)> mutate;
  };
  const std::vector<Case> cases = {
      {"kind", [](OptimizerConfig& c) { c.clear_kind(); }},
      {"kind",
       [](OptimizerConfig& c) {
         c.set_kind(static_cast<OptimizerConfig::Kind>(42));
       }},
      {"base_lr", [](OptimizerConfig& c) { c.set_base_lr(0); }},
      {"base_lr", [](OptimizerConfig& c) { c.set_base_lr(-1); }},
      {"base_lr", [](OptimizerConfig& c) { c.set_base_lr(std::nan("")); }},
      {"momentum", [](OptimizerConfig& c) { c.set_momentum(1.0); }},
      {"momentum", [](OptimizerConfig& c) { c.set_momentum(-0.1); }},
      {"beta1", [](OptimizerConfig& c) { c.set_beta1(1.0); }},
      {"beta2", [](OptimizerConfig& c) { c.set_beta2(-0.5); }},
      {"epsilon", [](OptimizerConfig& c) { c.set_epsilon(-1e-8); }},
      {"weight_decay", [](OptimizerConfig& c) { c.set_weight_decay(-1); }},
      {"adagrad_init", [](OptimizerConfig& c) { c.set_adagrad_init(-1); }},
      {"schedule",
       [](OptimizerConfig& c) {
         c.set_schedule(static_cast<OptimizerConfig::Schedule>(9));
       }},
      {"step_size",
       [](OptimizerConfig& c) { c.set_schedule(OptimizerConfig::STEP); }},
      {"gamma",
       [](OptimizerConfig& c) {
         c.set_schedule(OptimizerConfig::STEP);
         c.set_step_size(5);
         c.set_gamma(-0.5);
       }},
      {"total_steps",
       [](OptimizerConfig& c) { c.set_schedule(OptimizerConfig::COSINE); }},
      {"total_steps",
       [](OptimizerConfig& c) {
         c.set_schedule(OptimizerConfig::COSINE);
         c.set_total_steps(10);
         c.set_warmup_steps(10);
       }},
      {"min_lr_ratio",
       [](OptimizerConfig& c) {
         c.set_schedule(OptimizerConfig::COSINE);
         c.set_total_steps(10);
         c.set_min_lr_ratio(1.5);
       }},
      {"reference_batch",
       [](OptimizerConfig& c) {
         c.set_linear_scaling(true);
         c.set_global_batch(64);
       }},
      {"global_batch",
       [](OptimizerConfig& c) {
         c.set_linear_scaling(true);
         c.set_reference_batch(64);
       }},
  };
  for (const Case& tc : cases) {
    OptimizerConfig c = MakeConfig(OptimizerConfig::ADAM, 0.1);
    ASSERT_TRUE(Optimizer::Create(c).ok());
    tc.mutate(c);
    auto opt = Optimizer::Create(c);
    ASSERT_FALSE(opt.ok()) << tc.field << ": " << c.ShortDebugString();
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(opt.status().message()),
                HasSubstr("OptimizerConfig." + tc.field + " "));
  }
}

TEST(OptimizerTest, LrScaleMultipliesScheduledLearningRate) {
  OptimizerConfig c = MakeConfig(OptimizerConfig::SGD, 1.0);
  c.set_warmup_steps(4);
  std::unique_ptr<Optimizer> opt = MustCreate(c);
  float w = 1.0f, g = 1.0f;
  opt->Apply(/*step=*/1, 0, &w, &g, nullptr, 1, /*lr_scale=*/0.5);
  EXPECT_EQ(w, 0.75f);  // lr 0.5 at step 1 of the warm-up, halved
  opt->Apply(/*step=*/3, 0, &w, &g, nullptr, 1, /*lr_scale=*/0.25);
  EXPECT_EQ(w, 0.5f);
}

// Scaling the learning rate is not scaling the gradient: Adam is invariant to
// the gradient's scale, so only a scaled learning rate shortens its step.
TEST(OptimizerTest, LrScaleShortensAdamStepWhereGradientScaleWouldNot) {
  std::unique_ptr<Optimizer> opt =
      MustCreate(MakeConfig(OptimizerConfig::ADAM, 0.01));
  auto first_step = [&](float g, double lr_scale) {
    float w = 0.0f;
    std::vector<float> slots = opt->InitSlots(1);
    opt->Apply(0, 0, &w, &g, slots.data(), 1, lr_scale);
    return w;
  };
  EXPECT_NEAR(first_step(2.0f, 1.0), -0.01, 1e-7);
  EXPECT_NEAR(first_step(1.0f, 1.0), -0.01, 1e-7);  // g / 2: same step
  EXPECT_NEAR(first_step(2.0f, 0.5), -0.005, 1e-7);
}

// For every rule, lr_scale s (a power of two, so the product is exact) is
// bit-identical to running with base_lr * s; lr_scale 1 to no scale at all.
class LrScaleTest : public ::testing::TestWithParam<OptimizerConfig::Kind> {};

TEST_P(LrScaleTest, EqualsScaledBaseLearningRate) {
  OptimizerConfig c = MakeConfig(GetParam(), 0.08);
  c.set_momentum(0.9);
  c.set_weight_decay(0.01);
  c.set_adagrad_init(0.1);
  OptimizerConfig quarter = c;
  quarter.set_base_lr(0.02);
  ASSERT_EQ(0.08 * 0.25, 0.02);
  std::unique_ptr<Optimizer> opt = MustCreate(c);
  std::unique_ptr<Optimizer> opt_quarter = MustCreate(quarter);
  const size_t n = 9;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> scaled(n), reference, unit, plain;
  for (float& x : scaled) x = dist(rng);
  reference = unit = plain = scaled;
  std::vector<float> s_scaled = opt->InitSlots(n);
  std::vector<float> s_reference = s_scaled, s_unit = s_scaled,
                     s_plain = s_scaled;
  for (uint64_t t = 0; t < 4; ++t) {
    std::vector<float> g(n);
    for (float& x : g) x = dist(rng);
    opt->Apply(t, t, scaled.data(), g.data(), s_scaled.data(), n, 0.25);
    opt_quarter->Apply(t, t, reference.data(), g.data(), s_reference.data(), n);
    opt->Apply(t, t, unit.data(), g.data(), s_unit.data(), n, 1.0);
    opt->Apply(t, t, plain.data(), g.data(), s_plain.data(), n);
  }
  EXPECT_EQ(std::memcmp(scaled.data(), reference.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(unit.data(), plain.data(), n * sizeof(float)), 0);
  EXPECT_NE(scaled, plain);
}

INSTANTIATE_TEST_SUITE_P(
    AllKinds, LrScaleTest,
    ::testing::Values(OptimizerConfig::SGD, OptimizerConfig::MOMENTUM,
                      OptimizerConfig::ADAM, OptimizerConfig::ADAMW,
                      OptimizerConfig::ADAGRAD),
    [](const ::testing::TestParamInfo<OptimizerConfig::Kind>& info) {
      return OptimizerConfig::Kind_Name(info.param);
    });

// Updating [0, split) and [split, n) separately, each with its own slots,
// must be bit-identical to updating [0, n) at once.
class ChunkingTest : public ::testing::TestWithParam<OptimizerConfig::Kind> {};

TEST_P(ChunkingTest, TwoChunksBitIdenticalToOne) {
  OptimizerConfig c = MakeConfig(GetParam(), 0.05);
  c.set_momentum(0.9);
  c.set_nesterov(true);
  c.set_weight_decay(0.01);
  c.set_adagrad_init(0.1);
  c.set_warmup_steps(2);
  std::unique_ptr<Optimizer> opt = MustCreate(c);
  const size_t n = 37, split = 13, k = opt->num_slots();
  std::mt19937 rng(123);
  std::normal_distribution<float> dist;
  std::vector<float> whole(n);
  for (float& x : whole) x = dist(rng);
  std::vector<float> a(whole.begin(), whole.begin() + split);
  std::vector<float> b(whole.begin() + split, whole.end());
  std::vector<float> slots = opt->InitSlots(n);
  std::vector<float> slots_a = opt->InitSlots(split);
  std::vector<float> slots_b = opt->InitSlots(n - split);
  for (uint64_t t = 0; t < 5; ++t) {
    std::vector<float> g(n);
    for (float& x : g) x = dist(rng);
    opt->Apply(t, t, whole.data(), g.data(), slots.data(), n);
    opt->Apply(t, t, a.data(), g.data(), slots_a.data(), split);
    opt->Apply(t, t, b.data(), g.data() + split, slots_b.data(), n - split);
  }
  std::vector<float> joined = a;
  joined.insert(joined.end(), b.begin(), b.end());
  EXPECT_EQ(std::memcmp(joined.data(), whole.data(), n * sizeof(float)), 0);
  EXPECT_NE(joined, std::vector<float>(n, 0.0f));
  for (size_t s = 0; s < k; ++s) {
    for (size_t i = 0; i < n; ++i) {
      const float chunked = i < split ? slots_a[s * split + i]
                                      : slots_b[s * (n - split) + i - split];
      ASSERT_EQ(std::memcmp(&chunked, &slots[s * n + i], sizeof(float)), 0)
          << "slot " << s << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllKinds, ChunkingTest,
    ::testing::Values(OptimizerConfig::SGD, OptimizerConfig::MOMENTUM,
                      OptimizerConfig::ADAM, OptimizerConfig::ADAMW,
                      OptimizerConfig::ADAGRAD),
    [](const ::testing::TestParamInfo<OptimizerConfig::Kind>& info) {
      return OptimizerConfig::Kind_Name(info.param);
    });

// Updating [0, split) and [split, n) of one chunk's slots in place
// (slots + offset, slot_stride n) is bit-identical to updating [0, n) at
// once: the blocks the shard applies in (ShardOptions.apply_block).
TEST_P(ChunkingTest, SubRangesOfOneSlotLayoutEqualOnePass) {
  OptimizerConfig c = MakeConfig(GetParam(), 0.05);
  c.set_momentum(0.9);
  c.set_weight_decay(0.01);
  c.set_adagrad_init(0.1);
  std::unique_ptr<Optimizer> opt = MustCreate(c);
  const size_t n = 37, split = 16;
  std::mt19937 rng(321);
  std::normal_distribution<float> dist;
  std::vector<float> whole(n);
  for (float& x : whole) x = dist(rng);
  std::vector<float> blocked = whole;
  std::vector<float> slots = opt->InitSlots(n);
  std::vector<float> blocked_slots = opt->InitSlots(n);
  for (uint64_t t = 0; t < 5; ++t) {
    std::vector<float> g(n);
    for (float& x : g) x = dist(rng);
    opt->Apply(t, t, whole.data(), g.data(), slots.data(), n);
    opt->Apply(t, t, blocked.data(), g.data(), blocked_slots.data(), split, 1.0,
               n);
    // SGD has no slots (null, no offset).
    opt->Apply(t, t, blocked.data() + split, g.data() + split,
               blocked_slots.empty() ? nullptr : blocked_slots.data() + split,
               n - split, 1.0, n);
  }
  EXPECT_EQ(std::memcmp(blocked.data(), whole.data(), n * sizeof(float)), 0);
  ASSERT_EQ(blocked_slots.size(), slots.size());
  if (!slots.empty()) {
    EXPECT_EQ(std::memcmp(blocked_slots.data(), slots.data(),
                          slots.size() * sizeof(float)),
              0);
  }
}

// Issue 11, defect 6: with weight decay 0 the update must not touch the
// decay term, so a weight at -inf (or +inf) stays there instead of becoming
// NaN through 0 * w. Every rule, with a finite gradient.
TEST(OptimizerTest, InfiniteWeightStaysInfiniteWithoutWeightDecay) {
  for (auto kind :
       {OptimizerConfig::SGD, OptimizerConfig::MOMENTUM, OptimizerConfig::ADAM,
        OptimizerConfig::ADAMW, OptimizerConfig::ADAGRAD}) {
    SCOPED_TRACE(OptimizerConfig::Kind_Name(kind));
    std::unique_ptr<Optimizer> opt = MustCreate(MakeConfig(kind, 0.1));
    ASSERT_NE(opt, nullptr);
    std::vector<float> w = {-INFINITY, INFINITY, 1.0f};
    const std::vector<float> g = {0.5f, -0.25f, 0.5f};
    std::vector<float> slots = opt->InitSlots(w.size());
    for (uint64_t t = 0; t < 3; ++t) {
      opt->Apply(t, t, w.data(), g.data(), slots.data(), w.size());
    }
    EXPECT_EQ(w[0], -INFINITY);
    EXPECT_EQ(w[1], INFINITY);
    EXPECT_TRUE(std::isfinite(w[2])) << w[2];
    for (float s : slots) EXPECT_FALSE(std::isnan(s));
  }
}

}  // namespace
}  // namespace pstrain
