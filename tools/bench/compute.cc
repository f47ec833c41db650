#include "tools/bench/compute.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/optimizer.h"

namespace pstrain::bench {

using pstrain::v1::OptimizerConfig;

// Keeps the compiler from dropping a loop whose result is never read.
static volatile float g_sink;

double TriadBytesPerSecond(uint64_t elems, int repeats) {
  std::vector<float> a(elems, 0.0f), b(elems, 1.0f), c(elems, 2.0f);
  const float s = 3.0f;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const absl::Time start = absl::Now();
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
    for (uint64_t i = 0; i < elems; ++i) pa[i] = pb[i] + s * pc[i];
    const double t = absl::ToDoubleSeconds(absl::Now() - start);
    g_sink = a[elems / 2];
    best = std::max(best, 12.0 * elems / t);
  }
  return best;
}

std::string OptimizerName(OptimizerConfig::Kind kind) {
  switch (kind) {
    case OptimizerConfig::SGD:
      return "sgd";
    case OptimizerConfig::MOMENTUM:
      return "momentum";
    case OptimizerConfig::ADAM:
      return "adam";
    case OptimizerConfig::ADAMW:
      return "adamw";
    case OptimizerConfig::ADAGRAD:
      return "adagrad";
    default:
      return "unknown";
  }
}

absl::StatusOr<double> OptimizerBytesPerSecond(OptimizerConfig::Kind kind,
                                               uint64_t elems,
                                               uint64_t chunk_elems,
                                               int repeats) {
  OptimizerConfig config;
  config.set_kind(kind);
  config.set_base_lr(0.01);
  if (kind == OptimizerConfig::MOMENTUM) config.set_momentum(0.9);
  if (kind == OptimizerConfig::ADAMW) config.set_weight_decay(0.01);
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(config);
  if (!opt.ok()) return opt.status();
  chunk_elems = std::clamp<uint64_t>(chunk_elems, 1, elems);
  std::vector<float> w(elems, 0.5f), g(elems, 1e-3f);
  std::vector<std::vector<float>> slots;
  for (uint64_t off = 0; off < elems; off += chunk_elems) {
    slots.push_back((*opt)->InitSlots(std::min(chunk_elems, elems - off)));
  }
  const int streams = 3 + 2 * (*opt)->num_slots();
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const absl::Time start = absl::Now();
    size_t c = 0;
    for (uint64_t off = 0; off < elems; off += chunk_elems, ++c) {
      const uint64_t n = std::min(chunk_elems, elems - off);
      (*opt)->Apply(/*step=*/r, /*update_count=*/r, w.data() + off,
                    g.data() + off,
                    slots[c].empty() ? nullptr : slots[c].data(), n);
    }
    const double t = absl::ToDoubleSeconds(absl::Now() - start);
    g_sink = w[elems / 2];
    best = std::max(best, 4.0 * streams * elems / t);
  }
  return best;
}

}  // namespace pstrain::bench
