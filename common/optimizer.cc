#include "common/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/cpu_features.h"
#include "common/held_term.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

using ::pstrain::v1::OptimizerConfig;

constexpr double kPi = 3.14159265358979323846;
constexpr double kDefaultBeta1 = 0.9;
constexpr double kDefaultBeta2 = 0.999;
constexpr double kDefaultEpsilon = 1e-8;
constexpr double kDefaultAdagradEpsilon = 1e-10;  // PyTorch's Adagrad default
constexpr double kDefaultGamma = 0.1;

double Gamma(const OptimizerConfig& c) {
  return c.gamma() == 0 ? kDefaultGamma : c.gamma();
}

absl::Status Invalid(absl::string_view field, absl::string_view requirement,
                     double value) {
  return absl::InvalidArgumentError(absl::StrCat("OptimizerConfig.", field, " ",
                                                 requirement, ", got ", value));
}

// Comparisons are written so that NaN fails them.
absl::Status Validate(const OptimizerConfig& c) {
  if (c.kind() == OptimizerConfig::KIND_UNSPECIFIED ||
      !OptimizerConfig::Kind_IsValid(c.kind())) {
    return Invalid("kind", "must be SGD, MOMENTUM, ADAM, ADAMW or ADAGRAD",
                   c.kind());
  }
  if (!(c.base_lr() > 0)) return Invalid("base_lr", "must be > 0", c.base_lr());
  if (!(c.momentum() >= 0 && c.momentum() < 1)) {
    return Invalid("momentum", "must be in [0, 1)", c.momentum());
  }
  if (!(c.beta1() >= 0 && c.beta1() < 1)) {
    return Invalid("beta1", "must be in [0, 1)", c.beta1());
  }
  if (!(c.beta2() >= 0 && c.beta2() < 1)) {
    return Invalid("beta2", "must be in [0, 1)", c.beta2());
  }
  if (!(c.epsilon() > 0)) return Invalid("epsilon", "must be > 0", c.epsilon());
  if (!(c.weight_decay() >= 0)) {
    return Invalid("weight_decay", "must be >= 0", c.weight_decay());
  }
  if (!(c.adagrad_init() >= 0)) {
    return Invalid("adagrad_init", "must be >= 0", c.adagrad_init());
  }
  switch (c.schedule()) {
    case OptimizerConfig::SCHEDULE_UNSPECIFIED:
    case OptimizerConfig::CONSTANT:
      break;
    case OptimizerConfig::STEP:
      if (c.step_size() == 0) return Invalid("step_size", "must be > 0", 0);
      if (!(c.gamma() > 0)) return Invalid("gamma", "must be > 0", c.gamma());
      break;
    case OptimizerConfig::COSINE:
      if (c.total_steps() <= c.warmup_steps()) {
        return Invalid("total_steps", "must exceed warmup_steps",
                       c.total_steps());
      }
      if (!(c.min_lr_ratio() >= 0 && c.min_lr_ratio() <= 1)) {
        return Invalid("min_lr_ratio", "must be in [0, 1]", c.min_lr_ratio());
      }
      break;
    default:
      return Invalid("schedule", "must be CONSTANT, STEP or COSINE",
                     c.schedule());
  }
  if (c.linear_scaling()) {
    if (c.reference_batch() == 0) {
      return Invalid("reference_batch", "must be > 0 with linear_scaling", 0);
    }
    if (c.global_batch() == 0) {
      return Invalid("global_batch", "must be > 0 with linear_scaling", 0);
    }
  }
  return absl::OkStatus();
}

// Element loops use float arithmetic with scalars precomputed in double and
// rounded once. Each element is updated independently, so results do not
// depend on how a vector is split into chunks (BUILD disables FMA contraction,
// which could otherwise differ between vectorised and scalar loop tails).
//
// The loops are written to vectorise (BUILD: -O3 -fno-math-errno, so sqrt is
// an instruction; nothing here reads errno): no branches inside, restrict
// pointers, and the weight-decay term only when the decay is not 0, so a
// weight at +-inf stays there instead of turning into NaN via 0 * w.

// One element of SGD and of momentum, shared by the loops over a gradient
// array and the one-pass loops over a held term (below), so that both
// compute the same floats.
template <bool kDecay>
inline __attribute__((always_inline)) void SgdElement(float g, float lr,
                                                      float wd, float& w) {
  const float gi = kDecay ? g + wd * w : g;
  w -= lr * gi;
}

template <bool kDecay, bool kNesterov>
inline __attribute__((always_inline)) void MomentumElement(float g, float lr,
                                                           float wd, float mu,
                                                           float& w,
                                                           float& buf) {
  const float gi = kDecay ? g + wd * w : g;
  const float b = mu * buf + gi;
  buf = b;
  w -= lr * (kNesterov ? gi + mu * b : b);
}

template <bool kDecay>
void SgdLoop(float lr, float wd, float* __restrict w, const float* __restrict g,
             size_t n) {
  for (size_t i = 0; i < n; ++i) SgdElement<kDecay>(g[i], lr, wd, w[i]);
}

// Element i of a held gradient (Optimizer::HeldGradient), as HeldToFloat
// gives it (common/held_term.h).
inline __attribute__((always_inline)) float HeldElement(
    const Optimizer::HeldGradient& h, size_t i) {
  float x;
  std::memcpy(&x, h.src + i * sizeof(float), sizeof(float));
  return HeldTermElement(x, h.n, h.to_fixed, h.scale);
}

// The same element in float arithmetic (HeldTermElementInFloats), where
// HeldTermInFloats gave `k` and `scale`.
inline __attribute__((always_inline)) float HeldElementInFloats(const char* src,
                                                                float k,
                                                                float scale,
                                                                size_t i) {
  float x;
  std::memcpy(&x, src + i * sizeof(float), sizeof(float));
  return HeldTermElementInFloats(x, k, scale);
}

// The one-pass loops: SgdLoop and MomentumLoop with g[i] computed in place,
// in float arithmetic where kInFloats and HeldTermInFloats allow it (the
// same bits in about 0.6 of the time: docs/performance-log.md, "The held
// term in floats").
template <bool kDecay, bool kInFloats>
inline __attribute__((always_inline)) void SgdHeldBody(
    float lr, float wd, float* __restrict w, const Optimizer::HeldGradient& h,
    size_t n) {
  float k = 0, scale = 0;
  if (kInFloats && HeldTermInFloats(h.n, h.to_fixed, h.scale, &k, &scale)) {
    for (size_t i = 0; i < n; ++i) {
      SgdElement<kDecay>(HeldElementInFloats(h.src, k, scale, i), lr, wd, w[i]);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    SgdElement<kDecay>(HeldElement(h, i), lr, wd, w[i]);
  }
}

template <bool kDecay, bool kNesterov, bool kInFloats>
inline __attribute__((always_inline)) void MomentumHeldBody(
    float lr, float wd, float mu, float* __restrict w,
    const Optimizer::HeldGradient& h, float* __restrict buf, size_t n) {
  float k = 0, scale = 0;
  if (kInFloats && HeldTermInFloats(h.n, h.to_fixed, h.scale, &k, &scale)) {
    for (size_t i = 0; i < n; ++i) {
      MomentumElement<kDecay, kNesterov>(
          HeldElementInFloats(h.src, k, scale, i), lr, wd, mu, w[i], buf[i]);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    MomentumElement<kDecay, kNesterov>(HeldElement(h, i), lr, wd, mu, w[i],
                                       buf[i]);
  }
}

// Each variant built three times, for AVX-512, AVX2 and the baseline (the
// doubles take half the lanes of the floats, so AVX2 is what makes one pass
// pay: real pushes measured it against HeldToFloat's AVX2 loop then SgdLoop;
// 512-bit registers do a MiB in 0.6 of AVX2's time, docs/performance-log.md,
// "AVX-512 kernels"). The file is built without contraction, so the AVX-512
// build, whose target allows FMA, rounds every operation as the others do.
// `f` (kInFloats): the held term in floats, whose rounding (nearbyint) is an
// instruction from SSE4.1 on and a libm call per element in the baseline.
#define PSTRAIN_HELD_LOOPS(suffix, attr, f)                                \
  attr void SgdHeld##suffix(bool decay, float lr, float wd, float* w,      \
                            const Optimizer::HeldGradient& h, size_t n) {  \
    decay ? SgdHeldBody<true, f>(lr, wd, w, h, n)                          \
          : SgdHeldBody<false, f>(lr, wd, w, h, n);                        \
  }                                                                        \
  attr void MomentumHeld##suffix(                                          \
      bool decay, bool nesterov, float lr, float wd, float mu, float* w,   \
      const Optimizer::HeldGradient& h, float* buf, size_t n) {            \
    if (nesterov) {                                                        \
      decay ? MomentumHeldBody<true, true, f>(lr, wd, mu, w, h, buf, n)    \
            : MomentumHeldBody<false, true, f>(lr, wd, mu, w, h, buf, n);  \
    } else {                                                               \
      decay ? MomentumHeldBody<true, false, f>(lr, wd, mu, w, h, buf, n)   \
            : MomentumHeldBody<false, false, f>(lr, wd, mu, w, h, buf, n); \
    }                                                                      \
  }
PSTRAIN_HELD_LOOPS(Baseline, , false)
PSTRAIN_HELD_LOOPS(Avx2, __attribute__((target("avx2"))), true)
PSTRAIN_HELD_LOOPS(
    Avx512, __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"))), true)
#undef PSTRAIN_HELD_LOOPS

class Sgd : public Optimizer {
 public:
  using Optimizer::Optimizer;
  int num_slots() const override { return 0; }
  void ApplyWithLr(double lr_d, uint64_t, float* w, const float* g, float*,
                   size_t n, size_t) const override {
    const float lr = static_cast<float>(lr_d);
    const float wd = static_cast<float>(config().weight_decay());
    if (wd != 0) {
      SgdLoop<true>(lr, wd, w, g, n);
    } else {
      SgdLoop<false>(lr, wd, w, g, n);
    }
  }
  bool ApplyHeldWithLr(double lr_d, uint64_t, float* w, const HeldGradient& h,
                       float*, size_t n, size_t) const override {
    const float lr = static_cast<float>(lr_d);
    const float wd = static_cast<float>(config().weight_decay());
    (CpuHasAvx512() ? SgdHeldAvx512
     : CpuHasAvx2() ? SgdHeldAvx2
                    : SgdHeldBaseline)(wd != 0, lr, wd, w, h, n);
    return true;
  }
};

template <bool kDecay, bool kNesterov>
void MomentumLoop(float lr, float wd, float mu, float* __restrict w,
                  const float* __restrict g, float* __restrict buf, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    MomentumElement<kDecay, kNesterov>(g[i], lr, wd, mu, w[i], buf[i]);
  }
}

class Momentum : public Optimizer {
 public:
  using Optimizer::Optimizer;
  int num_slots() const override { return 1; }
  void ApplyWithLr(double lr_d, uint64_t, float* w, const float* g, float* buf,
                   size_t n, size_t) const override {
    const float lr = static_cast<float>(lr_d);
    const float wd = static_cast<float>(config().weight_decay());
    const float mu = static_cast<float>(config().momentum());
    const bool decay = wd != 0;
    if (config().nesterov()) {
      decay ? MomentumLoop<true, true>(lr, wd, mu, w, g, buf, n)
            : MomentumLoop<false, true>(lr, wd, mu, w, g, buf, n);
    } else {
      decay ? MomentumLoop<true, false>(lr, wd, mu, w, g, buf, n)
            : MomentumLoop<false, false>(lr, wd, mu, w, g, buf, n);
    }
  }
  bool ApplyHeldWithLr(double lr_d, uint64_t, float* w, const HeldGradient& h,
                       float* buf, size_t n, size_t) const override {
    const float lr = static_cast<float>(lr_d);
    const float wd = static_cast<float>(config().weight_decay());
    const float mu = static_cast<float>(config().momentum());
    (CpuHasAvx512() ? MomentumHeldAvx512
     : CpuHasAvx2() ? MomentumHeldAvx2
                    : MomentumHeldBaseline)(wd != 0, config().nesterov(), lr,
                                            wd, mu, w, h, buf, n);
    return true;
  }
};

struct AdamScalars {
  float step_size, sqrt_bc2, b1, b2, one_minus_b1, one_minus_b2, eps, l2, decay;
};

// kL2: weight decay folded into the gradient; kDecoupled: AdamW's w *= decay.
template <bool kL2, bool kDecoupled>
void AdamLoop(const AdamScalars& s, float* __restrict w,
              const float* __restrict g, float* __restrict m,
              float* __restrict v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = kL2 ? g[i] + s.l2 * w[i] : g[i];
    const float mi = s.b1 * m[i] + s.one_minus_b1 * gi;
    const float vi = s.b2 * v[i] + s.one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float wi = kDecoupled ? s.decay * w[i] : w[i];
    w[i] = wi - s.step_size * mi / (std::sqrt(vi) / s.sqrt_bc2 + s.eps);
  }
}

// Adam with L2 weight decay folded into the gradient, or AdamW (decoupled):
// w *= 1 - lr * wd before the Adam step. Follows PyTorch's formulation
// w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), which equals
// lr * mhat / (sqrt(vhat) + eps).
class Adam : public Optimizer {
 public:
  Adam(const OptimizerConfig& config, bool decoupled)
      : Optimizer(config), decoupled_(decoupled) {}
  int num_slots() const override { return 2; }
  void ApplyWithLr(double lr, uint64_t update_count, float* w, const float* g,
                   float* slots, size_t n, size_t slot_stride) const override {
    const OptimizerConfig& c = config();
    const double t = static_cast<double>(update_count) + 1.0;
    const double bc1 = 1.0 - std::pow(c.beta1(), t);
    const double bc2 = 1.0 - std::pow(c.beta2(), t);
    AdamScalars s;
    s.step_size = static_cast<float>(lr / bc1);
    s.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
    s.b1 = static_cast<float>(c.beta1());
    s.b2 = static_cast<float>(c.beta2());
    s.one_minus_b1 = static_cast<float>(1.0 - c.beta1());
    s.one_minus_b2 = static_cast<float>(1.0 - c.beta2());
    s.eps = static_cast<float>(c.epsilon());
    s.l2 = decoupled_ ? 0.0f : static_cast<float>(c.weight_decay());
    s.decay =
        decoupled_ ? static_cast<float>(1.0 - lr * c.weight_decay()) : 1.0f;
    float* m = slots;
    float* v = slots + slot_stride;
    // decay == 1 multiplies by one exactly, so skipping it changes nothing
    // for finite weights and keeps infinities.
    if (s.l2 != 0) {
      AdamLoop<true, false>(s, w, g, m, v, n);
    } else if (s.decay != 1.0f) {
      AdamLoop<false, true>(s, w, g, m, v, n);
    } else {
      AdamLoop<false, false>(s, w, g, m, v, n);
    }
  }

 private:
  const bool decoupled_;
};

template <bool kDecay>
void AdagradLoop(float lr, float wd, float eps, float* __restrict w,
                 const float* __restrict g, float* __restrict acc, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = kDecay ? g[i] + wd * w[i] : g[i];
    const float a = acc[i] + gi * gi;
    acc[i] = a;
    w[i] -= lr * gi / (std::sqrt(a) + eps);
  }
}

class Adagrad : public Optimizer {
 public:
  using Optimizer::Optimizer;
  int num_slots() const override { return 1; }
  void ApplyWithLr(double lr_d, uint64_t, float* w, const float* g, float* acc,
                   size_t n, size_t) const override {
    const float lr = static_cast<float>(lr_d);
    const float wd = static_cast<float>(config().weight_decay());
    const float eps = static_cast<float>(config().epsilon());
    if (wd != 0) {
      AdagradLoop<true>(lr, wd, eps, w, g, acc, n);
    } else {
      AdagradLoop<false>(lr, wd, eps, w, g, acc, n);
    }
  }

 private:
  float initial_slot_value() const override {
    return static_cast<float>(config().adagrad_init());
  }
};

}  // namespace

double LearningRate(const OptimizerConfig& config, uint64_t step) {
  double lr = config.base_lr();
  if (config.linear_scaling() && config.reference_batch() > 0) {
    lr *= static_cast<double>(config.global_batch()) /
          static_cast<double>(config.reference_batch());
  }
  const uint64_t warmup = config.warmup_steps();
  if (step < warmup) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  const uint64_t s = step - warmup;
  switch (config.schedule()) {
    case OptimizerConfig::STEP: {
      const uint64_t size = std::max<uint64_t>(config.step_size(), 1);
      return lr * std::pow(Gamma(config), static_cast<double>(s / size));
    }
    case OptimizerConfig::COSINE: {
      const double r = config.min_lr_ratio();
      if (config.total_steps() <= warmup) return r * lr;
      const uint64_t span = config.total_steps() - warmup;
      const double p = static_cast<double>(std::min(s, span)) / span;
      return lr * (r + (1.0 - r) * 0.5 * (1.0 + std::cos(kPi * p)));
    }
    default:
      return lr;
  }
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerConfig& config) {
  OptimizerConfig c = config;
  if (c.beta1() == 0) c.set_beta1(kDefaultBeta1);
  if (c.beta2() == 0) c.set_beta2(kDefaultBeta2);
  if (c.epsilon() == 0) {
    c.set_epsilon(c.kind() == OptimizerConfig::ADAGRAD ? kDefaultAdagradEpsilon
                                                       : kDefaultEpsilon);
  }
  if (c.gamma() == 0) c.set_gamma(kDefaultGamma);
  PS_RETURN_IF_ERROR(Validate(c));
  switch (c.kind()) {
    case OptimizerConfig::SGD:
      return std::unique_ptr<Optimizer>(new Sgd(c));
    case OptimizerConfig::MOMENTUM:
      return std::unique_ptr<Optimizer>(new Momentum(c));
    case OptimizerConfig::ADAM:
      return std::unique_ptr<Optimizer>(new Adam(c, /*decoupled=*/false));
    case OptimizerConfig::ADAMW:
      return std::unique_ptr<Optimizer>(new Adam(c, /*decoupled=*/true));
    case OptimizerConfig::ADAGRAD:
      return std::unique_ptr<Optimizer>(new Adagrad(c));
    default:  // unreachable: Validate checked the kind
      return absl::InternalError("unhandled optimizer kind");
  }
}

std::vector<float> Optimizer::InitSlots(size_t n) const {
  return std::vector<float>(static_cast<size_t>(num_slots()) * n,
                            initial_slot_value());
}

}  // namespace pstrain
