#include "worker/model/straggler_model.h"

#include <algorithm>
#include <cmath>

namespace pstrain {
namespace {

// SplitMix64's finaliser: a well-mixed 64-bit hash, the same on every
// platform (std:: distributions are not).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from (seed, rank, step, stream).
double Uniform(uint64_t seed, uint32_t rank, int64_t step, uint64_t stream) {
  uint64_t h = Mix(seed);
  h = Mix(h ^ rank);
  h = Mix(h ^ static_cast<uint64_t>(step));
  h = Mix(h ^ stream);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

}  // namespace

double TransientFactor(double p, double min_factor, uint64_t seed,
                       uint32_t rank, int64_t step) {
  if (p <= 0) return 1.0;
  if (Uniform(seed, rank, step, /*stream=*/1) >= p) return 1.0;
  // Inverse transform: x_m / (1 - u)^(1 / alpha), u in [0, 1).
  const double u = Uniform(seed, rank, step, /*stream=*/2);
  const double x = min_factor / std::pow(1.0 - u, 1.0 / kTransientParetoShape);
  return std::min(x, kTransientCap * min_factor);
}

StepSlowdown SlowdownFor(const pstrain::v1::WorkerConfig& w, uint64_t seed,
                         uint32_t rank, int64_t step) {
  StepSlowdown s;
  if (w.straggler_rank() == static_cast<int64_t>(rank)) {
    s.factor *= w.straggler_factor();
  }
  s.factor *= TransientFactor(w.transient_straggler_p(),
                              w.transient_straggler_factor(), seed, rank, step);
  if (w.pause_rank() == static_cast<int64_t>(rank) &&
      w.pause_at_step() == step) {
    s.pause = absl::Seconds(w.pause_s());
  }
  return s;
}

absl::Duration EmulatedStepTime(const pstrain::v1::WorkerConfig& w,
                                uint64_t seed, uint32_t rank, int64_t step,
                                absl::Duration base) {
  const StepSlowdown s = SlowdownFor(w, seed, rank, step);
  return base * s.factor + s.pause;
}

}  // namespace pstrain
