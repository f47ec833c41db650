// Learning-rate schedules and element-wise optimizers (SGD, momentum, Adam,
// AdamW, AdaGrad) over flat fp32 chunks. Shared by parameter-server shards and
// the all-reduce mode, so updates are deterministic and chunking-independent:
// updating a vector in pieces gives bit-identical results to updating it whole.
#ifndef PSTRAIN_COMMON_OPTIMIZER_H_
#define PSTRAIN_COMMON_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// Learning rate at 0-based `step`. Starts from base_lr, multiplied by
// global_batch / reference_batch when linear_scaling; then linear warm-up,
// lr * (step + 1) / warmup_steps while step < warmup_steps; then the schedule
// applied to s = step - warmup_steps:
//   CONSTANT / SCHEDULE_UNSPECIFIED: lr.
//   STEP:   lr * gamma^floor(s / step_size)  (gamma 0 means 0.1).
//   COSINE: lr * (r + (1 - r) * (1 + cos(pi * p)) / 2), r = min_lr_ratio,
//           p = min(s, D) / D, D = total_steps - warmup_steps; so lr at
//           p = 0, r * lr from step total_steps on.
// Meant for configs that Optimizer::Create accepts; on others it still returns
// a finite value (degenerate divisors are ignored) but the value is
// unspecified.
double LearningRate(const pstrain::v1::OptimizerConfig& config, uint64_t step);

// An update rule for flat fp32 parameters. Stateless apart from the config:
// per-element state ("slots") is owned by the caller and passed to Apply, so
// one Optimizer serves any number of chunks.
class Optimizer {
 public:
  // Validates `config` and fills defaults for fields left 0: beta1 0.9,
  // beta2 0.999, epsilon 1e-8 (1e-10 for ADAGRAD), gamma 0.1. Returns
  // INVALID_ARGUMENT naming the offending field otherwise.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const pstrain::v1::OptimizerConfig& config);

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // fp32 state slots per parameter element: SGD 0, MOMENTUM 1, ADAM/ADAMW 2
  // (first, second moment), ADAGRAD 1 (squared-gradient accumulator).
  virtual int num_slots() const = 0;

  // Fresh state for n elements: num_slots() * n floats laid out
  // [slot0[0..n), slot1[0..n), ...]; the AdaGrad accumulator starts at
  // adagrad_init, everything else at 0.
  std::vector<float> InitSlots(size_t n) const;

  // Updates w[0..n) in place from gradient g[0..n). `step` is the 0-based
  // schedule step (selects the learning rate); `update_count` is how many
  // updates this chunk had before (Adam's bias correction uses
  // t = update_count + 1). `lr_scale` multiplies the scheduled learning rate
  // of this update only (e.g. 1 / staleness for staleness-aware async SGD);
  // everything the rule does with the learning rate, AdamW's decoupled decay
  // included, uses the scaled value, and 1 gives bit-identical results to no
  // scaling. `slots` holds element i's slot j at slots[j * slot_stride + i]
  // (slot_stride 0: n, InitSlots(n)'s layout; a caller updating elements
  // [o, o + n) of a chunk of N passes slots + o and N) and is updated in
  // place; it may be null when num_slots() is 0. The buffers must not
  // overlap. Thread-compatible: concurrent calls on disjoint chunks are
  // safe. Deterministic: element i's result depends only on element i's
  // inputs, step, update_count and lr_scale.
  void Apply(uint64_t step, uint64_t update_count, float* w, const float* g,
             float* slots, size_t n, double lr_scale = 1.0,
             size_t slot_stride = 0) const {
    ApplyWithLr(LearningRate(config_, step) * lr_scale, update_count, w, g,
                slots, n, slot_stride == 0 ? n : slot_stride);
  }

  // A step's only gradient term, held as the floats it arrived as
  // (server/shard.cc, one worker applying on arrival): element i's gradient
  // is float(double(round(n * x[i] * to_fixed)) * scale), x the unaligned
  // floats at `src`, what server/fixed_point_kernels.h HeldToFloat writes
  // when `samples` is a power of two (scale = from_fixed / samples, normal).
  struct HeldGradient {
    const char* src = nullptr;
    double n = 1;         // the term's samples
    double to_fixed = 1;  // 2^-lsb
    double scale = 1;     // from_fixed / samples
  };
  // Apply with the gradient computed from `held` as each element is
  // updated, in one pass: bit for bit HeldToFloat into a buffer then Apply
  // (server:fixed_point_kernels_test and server:shard_test check it).
  // False, with nothing done, for a rule
  // without a one-pass form (SGD and momentum have one). Needs every
  // |n * x[i] * to_fixed| below 2^51, as HeldToFloat does.
  bool ApplyHeld(uint64_t step, uint64_t update_count, float* w,
                 const HeldGradient& held, float* slots, size_t n,
                 double lr_scale = 1.0, size_t slot_stride = 0) const {
    return ApplyHeldWithLr(LearningRate(config_, step) * lr_scale, update_count,
                           w, held, slots, n,
                           slot_stride == 0 ? n : slot_stride);
  }

  // The validated config, with defaults filled in.
  const pstrain::v1::OptimizerConfig& config() const { return config_; }

 protected:
  explicit Optimizer(const pstrain::v1::OptimizerConfig& config)
      : config_(config) {}

 private:
  // The update rule proper, at learning rate `lr` (already scheduled and
  // scaled); the other arguments are Apply's, with slot_stride >= n.
  virtual void ApplyWithLr(double lr, uint64_t update_count, float* w,
                           const float* g, float* slots, size_t n,
                           size_t slot_stride) const = 0;
  // ApplyHeld's rule at `lr`; false: no one-pass form.
  virtual bool ApplyHeldWithLr(double, uint64_t, float*, const HeldGradient&,
                               float*, size_t, size_t) const {
    return false;
  }

  // Initial value of every slot (only AdaGrad's accumulator is not 0).
  virtual float initial_slot_value() const { return 0.0f; }

  const pstrain::v1::OptimizerConfig config_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_OPTIMIZER_H_
