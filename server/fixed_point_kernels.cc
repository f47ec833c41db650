#include "server/fixed_point_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/cpu_features.h"
#include "common/held_term.h"

namespace pstrain {
namespace fixed_point {
namespace {

// See the header for the conversions' argument; each *Body is inlined into
// a baseline, an AVX2 and an AVX-512 function, so one source gives all three
// builds (compiled without contraction: the AVX-512 target allows FMA, and
// every build must round each operation as the baseline does).
constexpr double kMagic = kRoundToIntegerMagic;  // 1.5 * 2^52
int64_t MagicBits() {
  int64_t bits;
  std::memcpy(&bits, &kMagic, sizeof(bits));
  return bits;
}

// MaxAbsBits (fixed_point_kernels.h).
inline __attribute__((always_inline)) uint32_t MaxAbsBitsBody(
    const char* __restrict src, uint64_t len, char* __restrict dst) {
  uint32_t max_bits = 0;
  if (dst != nullptr) {
    for (uint64_t i = 0; i < len; ++i) {
      uint32_t bits;
      std::memcpy(&bits, src + i * sizeof(float), sizeof(bits));
      std::memcpy(dst + i * sizeof(float), &bits, sizeof(bits));
      bits &= 0x7fffffffu;
      max_bits = bits > max_bits ? bits : max_bits;
    }
    return max_bits;
  }
  for (uint64_t i = 0; i < len; ++i) {
    uint32_t bits;
    std::memcpy(&bits, src + i * sizeof(float), sizeof(bits));
    bits &= 0x7fffffffu;
    max_bits = bits > max_bits ? bits : max_bits;
  }
  return max_bits;
}

// acc[i] += llrint(n * g[i] * to_fixed), for terms known below 2^51.
inline __attribute__((always_inline)) void AddFixedFastBody(
    const char* src, uint64_t len, double n, double to_fixed, int64_t* acc) {
  const int64_t magic_bits = MagicBits();
  for (uint64_t i = 0; i < len; ++i) {
    float g;
    std::memcpy(&g, src + i * sizeof(float), sizeof(float));
    const double r = n * static_cast<double>(g) * to_fixed + kMagic;
    int64_t bits;
    std::memcpy(&bits, &r, sizeof(bits));
    acc[i] += bits - magic_bits;
  }
}

// True if every acc[i] is below 2^51 in magnitude.
inline __attribute__((always_inline)) bool FixedFitsFastBody(const int64_t* acc,
                                                             uint64_t len) {
  uint64_t out = 0;
  for (uint64_t i = 0; i < len; ++i) {
    out |= (static_cast<uint64_t>(acc[i]) + (uint64_t{1} << 51)) >> 52;
  }
  return out == 0;
}

// FixedToFloatBody's loops; kScale: (y * from_fixed) / samples computed as
// y * scale, scale = from_fixed / samples (see FixedToFloatBody).
template <bool kScale>
inline __attribute__((always_inline)) void FixedToFloatLoops(
    int64_t* acc, uint64_t len, double from_fixed, double samples, double scale,
    bool fast, float* g) {
  if (fast) {
    const int64_t magic_bits = MagicBits();
    for (uint64_t i = 0; i < len; ++i) {
      const int64_t bits = acc[i] + magic_bits;
      double d;
      std::memcpy(&d, &bits, sizeof(d));
      const double y = d - kMagic;
      g[i] = static_cast<float>(kScale ? y * scale : y * from_fixed / samples);
      acc[i] = 0;
    }
    return;
  }
  for (uint64_t i = 0; i < len; ++i) {
    const double y = static_cast<double>(acc[i]);
    g[i] = static_cast<float>(kScale ? y * scale : y * from_fixed / samples);
    acc[i] = 0;
  }
}

// g[i] = float(double(acc[i]) * from_fixed / samples), acc[i] = 0; the
// fast conversion needs FixedFitsFast. When `samples` is a power of two and
// from_fixed / samples a normal double, the divide is a multiply by that
// quotient, bit for bit the same: y is an integer, so y * from_fixed (a
// power of two 2^L, normal) is exact and normal, and both sides are the
// same exact value rounded once (as in HeldToFloatBody).
inline __attribute__((always_inline)) void FixedToFloatBody(
    int64_t* acc, uint64_t len, double from_fixed, double samples, bool fast,
    float* g) {
  int e = 0;
  const double scale = from_fixed / samples;
  if (std::frexp(samples, &e) == 0.5 && scale >= DBL_MIN) {
    FixedToFloatLoops<true>(acc, len, from_fixed, samples, scale, fast, g);
  } else {
    FixedToFloatLoops<false>(acc, len, from_fixed, samples, scale, fast, g);
  }
}

// g[i] = float(double(fixed(n * src[i])) * from_fixed / samples) for a
// chunk whose only term of the step is the floats at `src`: AddFixedFastBody
// into a zero accumulator and FixedToFloatBody's fast case fused, the same
// operations on the same doubles (the integer round trip through the
// accumulator is exact: r - kMagic is the term's fixed-point value, and it
// is also double(acc) where FixedToFloat takes its scalar case), so the
// result is bit for bit theirs. Needs the terms known below 2^51. When
// `samples` is a power of two and from_fixed / samples a normal double,
// (y * from_fixed) / samples is computed as y * (from_fixed / samples): both
// sides are the same exact value rounded once (y * from_fixed is exact, 2^L
// staying normal), and a multiply costs a fraction of a divide.
inline __attribute__((always_inline)) void HeldToFloatBody(
    const char* src, uint64_t len, double n, double to_fixed, double from_fixed,
    double samples, bool in_floats, float* g) {
  int e = 0;
  const double scale = from_fixed / samples;
  if (std::frexp(samples, &e) == 0.5 && scale >= DBL_MIN) {
    // In float arithmetic where that gives the same bits
    // (common/held_term.h) and the build has a rounding instruction.
    float k = 0, scale_f = 0;
    if (in_floats && HeldTermInFloats(n, to_fixed, scale, &k, &scale_f)) {
      for (uint64_t i = 0; i < len; ++i) {
        float x;
        std::memcpy(&x, src + i * sizeof(float), sizeof(float));
        g[i] = HeldTermElementInFloats(x, k, scale_f);
      }
      return;
    }
    for (uint64_t i = 0; i < len; ++i) {
      float x;
      std::memcpy(&x, src + i * sizeof(float), sizeof(float));
      g[i] = HeldTermElement(x, n, to_fixed, scale);
    }
    return;
  }
  for (uint64_t i = 0; i < len; ++i) {
    float x;
    std::memcpy(&x, src + i * sizeof(float), sizeof(float));
    const double r = n * static_cast<double>(x) * to_fixed + kMagic;
    g[i] = static_cast<float>((r - kMagic) * from_fixed / samples);
  }
}

// `in_floats`: whether the build may take the held term in floats, whose
// rounding (nearbyint) is an instruction from SSE4.1 on and a libm call per
// element in the baseline build.
#define PSTRAIN_KERNEL_BUILD(suffix, attr, in_floats)                          \
  attr uint32_t MaxAbsBits##suffix(const char* src, uint64_t len, char* dst) { \
    return MaxAbsBitsBody(src, len, dst);                                      \
  }                                                                            \
  attr void AddFixedFast##suffix(const char* src, uint64_t len, double n,      \
                                 double to_fixed, int64_t* acc) {              \
    AddFixedFastBody(src, len, n, to_fixed, acc);                              \
  }                                                                            \
  attr bool FixedFitsFast##suffix(const int64_t* acc, uint64_t len) {          \
    return FixedFitsFastBody(acc, len);                                        \
  }                                                                            \
  attr void FixedToFloat##suffix(int64_t* acc, uint64_t len,                   \
                                 double from_fixed, double samples, bool fast, \
                                 float* g) {                                   \
    FixedToFloatBody(acc, len, from_fixed, samples, fast, g);                  \
  }                                                                            \
  attr void HeldToFloat##suffix(const char* src, uint64_t len, double n,       \
                                double to_fixed, double from_fixed,            \
                                double samples, float* g) {                    \
    HeldToFloatBody(src, len, n, to_fixed, from_fixed, samples, in_floats, g); \
  }

PSTRAIN_KERNEL_BUILD(Baseline, , false)
PSTRAIN_KERNEL_BUILD(Avx2, __attribute__((target("avx2"))), true)
PSTRAIN_KERNEL_BUILD(Avx512,
                     __attribute__((target("avx512f,avx512dq,avx512bw,"
                                           "avx512vl"))),
                     true)
#undef PSTRAIN_KERNEL_BUILD

constexpr Kernels kBaseline = {MaxAbsBitsBaseline, AddFixedFastBaseline,
                               FixedFitsFastBaseline, FixedToFloatBaseline,
                               HeldToFloatBaseline};
constexpr Kernels kAvx2 = {MaxAbsBitsAvx2, AddFixedFastAvx2, FixedFitsFastAvx2,
                           FixedToFloatAvx2, HeldToFloatAvx2};
constexpr Kernels kAvx512 = {MaxAbsBitsAvx512, AddFixedFastAvx512,
                             FixedFitsFastAvx512, FixedToFloatAvx512,
                             HeldToFloatAvx512};

// The build the free functions use, chosen once.
const Kernels& Chosen() {
  static const Kernels& chosen = CpuHasAvx512() ? kAvx512
                                 : CpuHasAvx2() ? kAvx2
                                                : kBaseline;
  return chosen;
}

}  // namespace

bool HasAvx2() { return CpuHasAvx2(); }
bool HasAvx512() { return CpuHasAvx512(); }

const Kernels& BaselineKernels() { return kBaseline; }
const Kernels& Avx2Kernels() { return kAvx2; }
const Kernels& Avx512Kernels() { return kAvx512; }
const Kernels& ChosenKernels() { return Chosen(); }

uint32_t MaxAbsBits(const char* src, uint64_t len, char* dst) {
  return Chosen().max_abs_bits(src, len, dst);
}

void AddFixedFast(const char* src, uint64_t len, double n, double to_fixed,
                  int64_t* acc) {
  Chosen().add_fixed_fast(src, len, n, to_fixed, acc);
}

bool FixedFitsFast(const int64_t* acc, uint64_t len) {
  return Chosen().fixed_fits_fast(acc, len);
}

void FixedToFloat(int64_t* acc, uint64_t len, double from_fixed, double samples,
                  bool fast, float* g) {
  Chosen().fixed_to_float(acc, len, from_fixed, samples, fast, g);
}

void HeldToFloat(const char* src, uint64_t len, double n, double to_fixed,
                 double from_fixed, double samples, float* g) {
  Chosen().held_to_float(src, len, n, to_fixed, from_fixed, samples, g);
}

}  // namespace fixed_point
}  // namespace pstrain
