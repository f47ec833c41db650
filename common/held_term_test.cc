#include "common/held_term.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "absl/base/casts.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

uint32_t Bits(float x) { return absl::bit_cast<uint32_t>(x); }

struct Grid {
  double n;
  int lsb;  // to_fixed = 2^-lsb, from_fixed = 2^lsb
};

// The floats a test runs through both forms for one grid: the edges (zeros,
// subnormals, the smallest and largest normal magnitudes the grid allows,
// terms at and around one half and at the 2^23 and 2^51 bounds, every one
// of both signs) and random bit patterns below the grid's bound.
std::vector<float> Inputs(const Grid& g, std::mt19937& rng) {
  const double bound = std::ldexp(1.0, 51) / g.n * std::ldexp(1.0, g.lsb);
  std::vector<float> xs = {0.0f, FLT_TRUE_MIN, FLT_MIN, 1e-30f, 1.0f, 3.0f};
  for (int e = -40; e <= 52; ++e) {  // terms of 2^e units of the grid
    const double unit = std::ldexp(1.0, g.lsb) / g.n;
    for (double m : {0.5, 0.75, 1.0, 1.25, 1.5, 2.5}) {
      xs.push_back(static_cast<float>(std::ldexp(m, e) * unit));
    }
  }
  std::uniform_int_distribution<uint32_t> bits(0, 0x7f7fffffu);
  for (int i = 0; i < 200000; ++i)
    xs.push_back(absl::bit_cast<float>(bits(rng)));
  std::vector<float> out;
  for (float x : xs) {
    if (!(std::fabs(static_cast<double>(x)) < bound)) continue;
    out.push_back(x);
    out.push_back(-x);
  }
  return out;
}

// Bit for bit HeldTermElement wherever HeldTermInFloats allows the float
// form: grids with terms summed over 1 to 2^20 samples, fine and coarse
// (outputs that are subnormal, or round to 0 either way).
TEST(HeldTermTest, InFloatsGivesTheSameBits) {
  std::mt19937 rng(7);
  int grids = 0;
  for (Grid g : {Grid{1, -40}, Grid{4, -40}, Grid{1, -20}, Grid{64, -60},
                 Grid{1024, -30}, Grid{1 << 20, -10}, Grid{2, -100},
                 Grid{8, 20}, Grid{1, -126}}) {
    const double to_fixed = std::ldexp(1.0, -g.lsb);
    const double scale = std::ldexp(1.0, g.lsb) / g.n;
    float k = 0, scale_f = 0;
    ASSERT_TRUE(HeldTermInFloats(g.n, to_fixed, scale, &k, &scale_f))
        << "n " << g.n << " lsb " << g.lsb;
    EXPECT_EQ(static_cast<double>(k), g.n * to_fixed);
    EXPECT_EQ(static_cast<double>(scale_f), scale);
    ++grids;
    int nonzero = 0;
    for (float x : Inputs(g, rng)) {
      const float want = HeldTermElement(x, g.n, to_fixed, scale);
      const float got = HeldTermElementInFloats(x, k, scale_f);
      ASSERT_EQ(Bits(got), Bits(want))
          << "x " << x << " (bits " << Bits(x) << ") n " << g.n << " lsb "
          << g.lsb << ": " << got << " vs " << want;
      nonzero += want != 0;
    }
    EXPECT_GT(nonzero, 0) << "n " << g.n << " lsb " << g.lsb;
  }
  EXPECT_EQ(grids, 9);
}

// A term that rounds to 0 is +0 in both forms, whatever its sign.
TEST(HeldTermTest, TermsRoundingToZeroArePositiveZero) {
  const double to_fixed = std::ldexp(1.0, 10), scale = std::ldexp(1.0, -10);
  float k = 0, scale_f = 0;
  ASSERT_TRUE(HeldTermInFloats(1, to_fixed, scale, &k, &scale_f));
  for (float x : {-0.0f, 0.0f, -1e-6f, -std::ldexp(0.5f, -10)}) {
    EXPECT_EQ(Bits(HeldTermElementInFloats(x, k, scale_f)), Bits(0.0f)) << x;
    EXPECT_EQ(Bits(HeldTermElement(x, 1, to_fixed, scale)), Bits(0.0f)) << x;
  }
  // -1.5 units round to -2 (ties to even), not to 0.
  EXPECT_EQ(HeldTermElementInFloats(-1.5f * std::ldexp(1.0f, -10), k, scale_f),
            -2.0f * std::ldexp(1.0f, -10));
}

// Where the float form could differ it is not offered: samples or a grid
// that is not a power of two, and factors beyond the normal floats.
TEST(HeldTermTest, InFloatsRefusesWhatItCannotMatch) {
  float k = 1, scale_f = 1;
  EXPECT_FALSE(HeldTermInFloats(3, 1024, 1.0 / 3072, &k, &scale_f));
  EXPECT_FALSE(HeldTermInFloats(1, 1000, 0.001, &k, &scale_f));
  EXPECT_FALSE(HeldTermInFloats(1, std::ldexp(1.0, 130), std::ldexp(1.0, -130),
                                &k, &scale_f));
  EXPECT_FALSE(HeldTermInFloats(4, std::ldexp(1.0, 126), std::ldexp(1.0, -128),
                                &k, &scale_f));  // 4 * 2^126 is no float
  EXPECT_FALSE(HeldTermInFloats(1, 1, std::ldexp(1.0, -140), &k, &scale_f));
  EXPECT_EQ(k, 1);  // nothing written
  EXPECT_EQ(scale_f, 1);
}

}  // namespace
}  // namespace pstrain
