#include "common/low_precision.h"

#include <atomic>
#include <cstring>

#include "common/logging.h"

namespace pstrain {

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

constexpr uint32_t kF32Inf = 0x7f800000u;
// 65520 = 65504 + half an fp16 ulp: from here on fp16 rounding would reach
// infinity; the encoder saturates instead.
constexpr uint32_t kF16Overflow = 0x477ff000u;
constexpr uint16_t kF16MaxBits = 0x7bffu;  // 65504
constexpr uint16_t kF16InfBits = 0x7c00u;
// 2^-14, the smallest normal fp16.
constexpr uint32_t kF16MinNormal = 0x38800000u;

}  // namespace

uint16_t FloatToBf16(float f) {
  const uint32_t u = Bits(f);
  if ((u & 0x7fffffffu) > kF32Inf) {
    // NaN: keep sign and the top payload bits, force quiet so a payload
    // living only in the low bits cannot turn into infinity.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  // Adding 0x7fff (+1 when the kept part is odd) carries into the kept bits
  // exactly when the dropped half is above the midpoint, or at it with an
  // odd kept part. A carry out of the mantissa bumps the exponent, which is
  // the correct rounding (up to infinity past the largest finite value).
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float Bf16ToFloat(uint16_t h) {
  return FromBits(static_cast<uint32_t>(h) << 16);
}

uint16_t FloatToF16(float f) {
  const uint32_t u = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > kF32Inf) {
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  if (a == kF32Inf) return static_cast<uint16_t>(sign | kF16InfBits);
  if (a >= kF16Overflow) return static_cast<uint16_t>(sign | kF16MaxBits);
  if (a >= kF16MinNormal) {
    // Rebias the exponent (127 -> 15: subtract 112 << 23, written as adding
    // its two's complement) and round the 13 dropped bits to nearest even;
    // a carry into the exponent is again the correct rounding.
    const uint32_t odd = (a >> 13) & 1u;
    return static_cast<uint16_t>(sign | ((a + 0xc8000fffu + odd) >> 13));
  }
  // fp16 subnormal (or zero): the result is round(|f| * 2^24). With f = full
  // * 2^(e - 150) (full the 24-bit significand), that is full >> (126 - e).
  const int e = static_cast<int>(a >> 23);
  const int shift = 126 - e;              // >= 14 here
  if (e == 0 || shift > 24) return sign;  // below half the smallest subnormal
  const uint32_t full = (a & 0x7fffffu) | 0x800000u;
  uint32_t r = full >> shift;
  const uint32_t rem = full & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;  // 0x400: smallest normal
  return static_cast<uint16_t>(sign | r);
}

float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return FromBits(sign | kF32Inf | (mant << 13));
  if (exp != 0) return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return FromBits(sign);
  // Subnormal mant * 2^-24: normalise into an fp32 normal.
  int s = 0;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    ++s;
  }
  return FromBits(sign | (static_cast<uint32_t>(113 - s) << 23) |
                  ((mant & 0x3ffu) << 13));
}

void FloatsToBf16(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

void Bf16ToFloats(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

size_t FloatsToF16(const float* in, size_t n, uint16_t* out) {
  size_t saturated = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = Bits(in[i]) & 0x7fffffffu;
    saturated += static_cast<size_t>(a >= kF16Overflow && a < kF32Inf);
    out[i] = FloatToF16(in[i]);
  }
  return saturated;
}

void F16ToFloats(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = F16ToFloat(in[i]);
}

namespace {
std::atomic<uint64_t> f16_saturated{0};
}  // namespace

void NoteF16Saturation(absl::string_view tensor, uint64_t count) {
  if (count == 0) return;
  const uint64_t before =
      f16_saturated.fetch_add(count, std::memory_order_relaxed);
  const uint64_t after = before + count;
  if (before != 0 &&
      before / kF16SaturationLogEvery == after / kF16SaturationLogEvery) {
    return;
  }
  PS_LOG_WARN(
      "fp16 wire: %d finite value(s) of tensor '%s' beyond fp16's range sent "
      "as +-65504 (saturated; %d so far in this process, logged at most once "
      "per %d); network.wire_dtype: bf16 keeps fp32's range",
      count, tensor, after, kF16SaturationLogEvery);
}

uint64_t F16SaturationCount() {
  return f16_saturated.load(std::memory_order_relaxed);
}

}  // namespace pstrain
