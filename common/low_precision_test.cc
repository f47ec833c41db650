#include "common/low_precision.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

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

// The value of a 16-bit pattern from its fields, in double: an independent
// reference for the decoders. exp_bits / mant_bits / bias describe the format.
double Reference(uint16_t h, int exp_bits, int mant_bits, int bias) {
  const int sign = h >> 15;
  const int exp = (h >> mant_bits) & ((1 << exp_bits) - 1);
  const int mant = h & ((1 << mant_bits) - 1);
  double v;
  if (exp == (1 << exp_bits) - 1) {
    v = mant == 0 ? std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(mant, 1 - bias - mant_bits);
  } else {
    v = std::ldexp(mant + (1 << mant_bits), exp - bias - mant_bits);
  }
  return sign ? -v : v;
}

TEST(LowPrecisionTest, Bf16DecodeIsExactForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = Bf16ToFloat(static_cast<uint16_t>(h));
    const double want = Reference(static_cast<uint16_t>(h), 8, 7, 127);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << std::hex << h;
    }
    EXPECT_EQ(std::signbit(got), (h >> 15) != 0) << std::hex << h;
    // Every non-NaN pattern survives encode(decode(h)); NaN stays NaN.
    const uint16_t back = FloatToBf16(got);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(back))) << std::hex << h;
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(LowPrecisionTest, F16DecodeIsExactForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = F16ToFloat(static_cast<uint16_t>(h));
    const double want = Reference(static_cast<uint16_t>(h), 5, 10, 15);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << std::hex << h;
    }
    EXPECT_EQ(std::signbit(got), (h >> 15) != 0) << std::hex << h;
    const uint16_t back = FloatToF16(got);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(F16ToFloat(back))) << std::hex << h;
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(LowPrecisionTest, Bf16RoundsToNearestTiesToEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.0.
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  // Just above a tie rounds up, just below rounds down.
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(FloatToBf16(FromBits(0x3f807fff)), 0x3f80);
  EXPECT_EQ(FloatToBf16(-1.0f - std::ldexp(1.0f, -8)), 0xbf80);
  // Rounding up across a binade boundary bumps the exponent.
  EXPECT_EQ(FloatToBf16(FromBits(0x3fffffff)), 0x4000);
}

TEST(LowPrecisionTest, Bf16SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBf16(inf), 0x7f80);
  EXPECT_EQ(FloatToBf16(-inf), 0xff80);
  // The largest float is above the largest bf16's midpoint: infinity.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBf16(FromBits(0x7f7f7fff)), 0x7f7f);  // just below: finite
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  // NaNs stay NaN, with a payload only in the dropped bits too, and keep
  // their sign.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t h = FloatToBf16(FromBits(nan));
    EXPECT_TRUE(std::isnan(Bf16ToFloat(h))) << std::hex << nan;
    EXPECT_EQ(h >> 15, nan >> 31) << std::hex << nan;
  }
  // Subnormals: same exponent range as fp32, so they round like normals.
  EXPECT_EQ(FloatToBf16(FromBits(0x00010000)), 0x0001);
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000)), 0x0000);  // tie to even 0
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000)), 0x0002);  // tie to even 2
  EXPECT_EQ(FloatToBf16(FromBits(0x00000001)), 0x0000);
  EXPECT_EQ(FloatToBf16(FromBits(0x007fffff)), 0x0080);  // up to a normal
}

TEST(LowPrecisionTest, F16RoundsToNearestTiesToEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even 1.0.
  EXPECT_EQ(FloatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToF16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)),
            0x3c01);
  EXPECT_EQ(FloatToF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
}

// A finite value beyond fp16's range saturates to +-65504 instead of
// rounding to +-inf (a weight of -131008 used to be pulled as -inf);
// +-inf and NaN stay what they are.
TEST(LowPrecisionTest, F16SaturatesFiniteValuesAndKeepsInfinityAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToF16(-131008.0f), 0xfbff);
  EXPECT_EQ(F16ToFloat(FloatToF16(-131008.0f)), -65504.0f);
  EXPECT_EQ(F16ToFloat(FloatToF16(70000.0f)), 65504.0f);
  // Below the midpoint 65520 plain rounding already gives 65504.
  EXPECT_EQ(FloatToF16(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7bff);  // rounding would tie to inf
  EXPECT_EQ(FloatToF16(-65520.0f), 0xfbff);
  EXPECT_EQ(FloatToF16(1e6f), 0x7bff);
  EXPECT_EQ(FloatToF16(std::numeric_limits<float>::max()), 0x7bff);
  EXPECT_EQ(FloatToF16(-std::numeric_limits<float>::max()), 0xfbff);
  EXPECT_EQ(F16ToFloat(0x7bff), kF16Max);
  EXPECT_EQ(FloatToF16(inf), 0x7c00);
  EXPECT_EQ(FloatToF16(-inf), 0xfc00);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t h = FloatToF16(FromBits(nan));
    EXPECT_TRUE(std::isnan(F16ToFloat(h))) << std::hex << nan;
    EXPECT_EQ(h >> 15, nan >> 31) << std::hex << nan;
  }
}

TEST(LowPrecisionTest, F16Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // smallest fp16 subnormal
  EXPECT_EQ(FloatToF16(tiny), 0x0001);
  EXPECT_EQ(FloatToF16(-tiny), 0x8001);
  EXPECT_EQ(FloatToF16(0.5f * tiny), 0x0000);  // tie to even 0
  EXPECT_EQ(FloatToF16(std::nextafter(0.5f * tiny, 1.0f)), 0x0001);
  EXPECT_EQ(FloatToF16(1.5f * tiny), 0x0002);  // tie to even 2
  EXPECT_EQ(FloatToF16(2.5f * tiny), 0x0002);  // tie to even 2
  EXPECT_EQ(FloatToF16(0.25f * tiny), 0x0000);
  EXPECT_EQ(FloatToF16(-0.25f * tiny), 0x8000);
  EXPECT_EQ(FloatToF16(FromBits(0x00000001)), 0x0000);  // fp32 subnormal
  EXPECT_EQ(FloatToF16(1023 * tiny), 0x03ff);           // largest subnormal
  // Halfway between the largest subnormal and 2^-14 rounds to even 2^-14.
  EXPECT_EQ(FloatToF16(1023.5f * tiny), 0x0400);
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -14)), 0x0400);
}

// Nearest neighbour by search over the sorted finite values, ties to the
// even pattern: a reference for the encoders independent of their bit
// tricks. `finite` holds (value, pattern) for every finite non-negative
// pattern, ascending; `overflow` is where rounding reaches infinity, and
// from there a finite value is `saturated` (the pattern of the largest
// finite value, or `inf` where the format does not saturate).
uint16_t ReferenceEncode(float x,
                         const std::vector<std::pair<double, uint16_t>>& finite,
                         double overflow, uint16_t inf, uint16_t saturated) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(x)) return sign | inf;
  if (a >= overflow) return sign | saturated;
  auto hi = std::lower_bound(finite.begin(), finite.end(),
                             std::make_pair(a, uint16_t{0}));
  if (hi->first == a) return sign | hi->second;
  auto lo = hi - 1;
  const double dl = a - lo->first, dh = hi->first - a;
  if (dl < dh) return sign | lo->second;
  if (dh < dl) return sign | hi->second;
  return sign | ((lo->second & 1) == 0 ? lo->second : hi->second);
}

std::vector<std::pair<double, uint16_t>> FiniteValues(float (*decode)(uint16_t),
                                                      uint16_t inf) {
  std::vector<std::pair<double, uint16_t>> out;
  for (uint32_t h = 0; h < inf; ++h) {
    out.emplace_back(decode(static_cast<uint16_t>(h)), h);
  }
  // Infinity stands in for the next power of two (an even pattern, so the
  // midpoint above the largest finite value ties to infinity).
  out.emplace_back(2 * out.back().first - out[out.size() - 2].first, inf);
  return out;
}

// Every 65,537th fp32 pattern (all exponents, scattered mantissas) plus
// patterns right at and around the rounding midpoints.
std::vector<uint32_t> SamplePatterns(int dropped_bits) {
  std::vector<uint32_t> out;
  for (uint64_t u = 0; u <= 0xffffffffu; u += 65537) out.push_back(u);
  std::mt19937 rng(1);
  const uint32_t mid = 1u << (dropped_bits - 1);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t base = rng() & ~((1u << dropped_bits) - 1);
    for (int d = -1; d <= 1; ++d) out.push_back(base + mid + d);
  }
  return out;
}

TEST(LowPrecisionTest, Bf16EncodeMatchesNearestEvenSearch) {
  const auto finite = FiniteValues(&Bf16ToFloat, 0x7f80);
  // Midpoint between the largest bf16 and 2^128.
  const double overflow = std::ldexp(2.0 - std::ldexp(1.0, -8), 127);
  for (uint32_t u : SamplePatterns(16)) {
    const float x = FromBits(u);
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToBf16(x),
              ReferenceEncode(x, finite, overflow, 0x7f80, 0x7f80))
        << std::hex << u;
  }
}

TEST(LowPrecisionTest, F16EncodeMatchesNearestEvenSearch) {
  const auto finite = FiniteValues(&F16ToFloat, 0x7c00);
  for (uint32_t u : SamplePatterns(13)) {
    const float x = FromBits(u);
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToF16(x),
              ReferenceEncode(x, finite, 65520.0, 0x7c00, 0x7bff))
        << std::hex << u;
  }
}

TEST(LowPrecisionTest, Bf16ErrorIsBoundedForNormals) {
  // Round to nearest with 8 significant bits: |x - q(x)| <= half an ulp
  // = 2^-8 * 2^floor(log2 |x|) <= 2^-8 |x| (the unit roundoff).
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t u = rng();
    const uint32_t exp = (u >> 23) & 0xff;
    if (exp == 0 || exp == 0xff) continue;           // normals only
    if ((u & 0x7fffffffu) >= 0x7f7f8000u) continue;  // rounds to infinity
    const float x = FromBits(u);
    const double q = Bf16ToFloat(FloatToBf16(x));
    const double err = std::fabs(static_cast<double>(x) - q);
    ASSERT_LE(err, std::ldexp(std::fabs(static_cast<double>(x)), -8))
        << std::hex << u;
  }
}

TEST(LowPrecisionTest, F16ErrorIsBoundedForNormals) {
  // 11 significant bits: |x - q(x)| <= 2^-11 |x| from 2^-14 to 65504.
  std::mt19937 rng(8);
  std::uniform_real_distribution<double> log2_abs(-14, 15.99);
  for (int i = 0; i < 1000000; ++i) {
    const float x = static_cast<float>(std::exp2(log2_abs(rng))) *
                    (rng() & 1 ? 1.0f : -1.0f);
    const double q = F16ToFloat(FloatToF16(x));
    const double err = std::fabs(static_cast<double>(x) - q);
    ASSERT_LE(err, std::ldexp(std::fabs(static_cast<double>(x)), -11)) << x;
  }
}

TEST(LowPrecisionTest, ArraysMatchScalars) {
  std::vector<float> x = {0.0f, -1.5f, 3.14159f, 1e-6f, -70000.0f, 1e30f};
  std::vector<uint16_t> b(x.size()), f(x.size());
  std::vector<float> bx(x.size()), fx(x.size());
  FloatsToBf16(x.data(), x.size(), b.data());
  FloatsToF16(x.data(), x.size(), f.data());
  Bf16ToFloats(b.data(), b.size(), bx.data());
  F16ToFloats(f.data(), f.size(), fx.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(b[i], FloatToBf16(x[i]));
    EXPECT_EQ(f[i], FloatToF16(x[i]));
    EXPECT_EQ(Bits(bx[i]), Bits(Bf16ToFloat(b[i])));
    EXPECT_EQ(Bits(fx[i]), Bits(F16ToFloat(f[i])));
  }
  EXPECT_EQ(fx[4], -kF16Max);  // saturated
  EXPECT_EQ(fx[5], kF16Max);
}

// FloatsToF16 counts the finite values it saturated: not those that round
// to 65504 anyway, nor +-inf and NaN.
TEST(LowPrecisionTest, F16EncodeCountsSaturatedValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1.0f,     65504.0f,   65519.0f,
                                65520.0f, -131008.0f, 70000.0f,
                                inf,      -inf,       std::nanf("")};
  std::vector<uint16_t> f(x.size());
  EXPECT_EQ(FloatsToF16(x.data(), x.size(), f.data()), 3u);
  const std::vector<uint16_t> want = {0x3c00, 0x7bff, 0x7bff, 0x7bff,
                                      0xfbff, 0x7bff, 0x7c00, 0xfc00};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(f[i], want[i]) << i;
  EXPECT_TRUE(std::isnan(F16ToFloat(f[8])));
}

// NoteF16Saturation adds to the process-wide count and logs a warning
// naming the tensor on the first value and then once per
// kF16SaturationLogEvery values, not on every call.
TEST(LowPrecisionTest, F16SaturationIsCountedAndLoggedAtMostOncePerN) {
  const uint64_t before = F16SaturationCount();
  NoteF16Saturation("unused", 0);
  EXPECT_EQ(F16SaturationCount(), before);
  // Passing a multiple of N always logs.
  testing::internal::CaptureStderr();
  NoteF16Saturation("layer1/w", kF16SaturationLogEvery);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(absl::StrContains(log, "'layer1/w'")) << log;
  EXPECT_TRUE(absl::StrContains(log, "65504")) << log;
  uint64_t total = before + kF16SaturationLogEvery;
  EXPECT_EQ(F16SaturationCount(), total);
  // Then N - 1 single values pass at most one multiple of N: one line.
  testing::internal::CaptureStderr();
  for (uint64_t i = 0; i + 1 < kF16SaturationLogEvery; ++i) {
    NoteF16Saturation("layer2/w", 1);
  }
  log = testing::internal::GetCapturedStderr();
  total += kF16SaturationLogEvery - 1;
  EXPECT_EQ(F16SaturationCount(), total);
  const size_t lines = std::count(log.begin(), log.end(), '\n');
  EXPECT_LE(lines, 1u) << log;
}

}  // namespace
}  // namespace pstrain
