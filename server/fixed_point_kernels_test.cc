#include "server/fixed_point_kernels.h"

#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/cpu_features.h"
#include "common/optimizer.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace fixed_point {
namespace {

// Lengths around the vector widths (4, 8 and 16 lanes, unrolled by the
// compiler): empty, shorter than a vector, odd tails, and a long run.
const uint64_t kLengths[] = {0,   1,   2,   3,   5,   7,    8,    9,
                             15,  16,  17,  31,  33,  63,   64,   65,
                             127, 128, 129, 255, 257, 1000, 1023, 4097};

// Random floats with magnitudes over many binades and both signs, some
// zeros and negative zeros, as bytes at an odd offset (payloads need not be
// aligned).
struct Floats {
  std::vector<char> storage;
  const char* bytes() const { return storage.data() + 1; }
  char* bytes() { return storage.data() + 1; }
  float at(uint64_t i) const {
    float f;
    std::memcpy(&f, bytes() + i * sizeof(float), sizeof(f));
    return f;
  }
};

Floats RandomFloats(std::mt19937_64& rng, uint64_t len, int max_exp) {
  Floats f;
  f.storage.assign(len * sizeof(float) + 1, 0);
  std::uniform_real_distribution<float> mant(0.5f, 1.0f);
  std::uniform_int_distribution<int> exp(-30, max_exp);
  std::uniform_int_distribution<int> kind(0, 19);
  for (uint64_t i = 0; i < len; ++i) {
    float x;
    switch (kind(rng)) {
      case 0:
        x = 0.0f;
        break;
      case 1:
        x = -0.0f;
        break;
      default:
        x = std::ldexp(mant(rng), exp(rng));
        if (rng() & 1) x = -x;
    }
    std::memcpy(f.bytes() + i * sizeof(float), &x, sizeof(x));
  }
  return f;
}

std::vector<const Kernels*> Builds() {
  std::vector<const Kernels*> builds = {&BaselineKernels()};
  if (HasAvx2()) builds.push_back(&Avx2Kernels());
  if (HasAvx512()) builds.push_back(&Avx512Kernels());
  return builds;
}

// The comparisons below need both builds; a CPU without AVX2 says so
// instead of passing on the baseline alone.
#define REQUIRE_AVX2()                              \
  if (!HasAvx2())                                   \
  GTEST_SKIP() << "this CPU has no AVX2: only the " \
                  "baseline build can run here"

TEST(FixedPointKernelsTest, MaxAbsBitsMatchesScalarAndBuildsAgree) {
  std::mt19937_64 rng(1);
  for (uint64_t len : kLengths) {
    Floats f = RandomFloats(rng, len, 20);
    uint32_t want = 0;
    for (uint64_t i = 0; i < len; ++i) {
      uint32_t bits;
      const float a = std::fabs(f.at(i));
      std::memcpy(&bits, &a, sizeof(bits));
      want = std::max(want, bits);
    }
    for (const Kernels* k : Builds()) {
      EXPECT_EQ(k->max_abs_bits(f.bytes(), len, nullptr), want) << len;
      std::vector<char> copy(len * sizeof(float) + 3, 'x');
      EXPECT_EQ(k->max_abs_bits(f.bytes(), len, copy.data() + 3), want);
      EXPECT_EQ(std::memcmp(copy.data() + 3, f.bytes(), len * sizeof(float)), 0)
          << len;
    }
    EXPECT_EQ(MaxAbsBits(f.bytes(), len), want);
  }
}

TEST(FixedPointKernelsTest, MaxAbsBitsFlagsNonFiniteAnywhereIncludingTail) {
  std::mt19937_64 rng(2);
  for (uint64_t len : {1u, 7u, 9u, 33u, 1023u}) {
    for (float bad : {std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      for (uint64_t pos : {uint64_t{0}, len / 2, len - 1}) {
        Floats f = RandomFloats(rng, len, 20);
        std::memcpy(f.bytes() + pos * sizeof(float), &bad, sizeof(bad));
        for (const Kernels* k : Builds()) {
          EXPECT_GE(k->max_abs_bits(f.bytes(), len, nullptr), kNonFiniteBits)
              << "len " << len << " pos " << pos;
        }
      }
    }
  }
}

TEST(FixedPointKernelsTest, AddFixedFastIsLlrintAndBuildsAgreeBitExactly) {
  REQUIRE_AVX2();
  std::mt19937_64 rng(3);
  for (uint64_t len : kLengths) {
    // |n * g * to_fixed| < 2^51: |g| < 2^20, n <= 8, to_fixed = 2^27.
    Floats f = RandomFloats(rng, len, 19);
    const double n = 1 + rng() % 8;
    const double to_fixed = std::ldexp(1.0, 27);
    std::vector<int64_t> start(len);
    for (int64_t& a : start)
      a = static_cast<int64_t>(rng() % (1u << 30)) - (1 << 29);
    std::vector<int64_t> want = start;
    for (uint64_t i = 0; i < len; ++i) {
      want[i] += std::llrint(n * static_cast<double>(f.at(i)) * to_fixed);
    }
    for (const Kernels* k : Builds()) {
      std::vector<int64_t> acc = start;
      k->add_fixed_fast(f.bytes(), len, n, to_fixed, acc.data());
      EXPECT_EQ(acc, want) << len;
    }
  }
}

TEST(FixedPointKernelsTest, FixedFitsFastFindsALargeValueAnywhere) {
  REQUIRE_AVX2();
  const int64_t limit = int64_t{1} << 51;
  for (uint64_t len : kLengths) {
    if (len == 0) continue;
    for (uint64_t pos : {uint64_t{0}, len / 2, len - 1}) {
      for (int64_t v : {limit - 1, -limit, limit, -limit - 1,
                        std::numeric_limits<int64_t>::min()}) {
        std::vector<int64_t> acc(len, 12345);
        acc[pos] = v;
        const bool want = v >= -limit && v < limit;
        // -2^51 fits: its double is exact and the fast path handles it.
        for (const Kernels* k : Builds()) {
          EXPECT_EQ(k->fixed_fits_fast(acc.data(), len), want)
              << len << " " << pos << " " << v;
        }
      }
    }
  }
  for (const Kernels* k : Builds()) {
    EXPECT_TRUE(k->fixed_fits_fast(nullptr, 0));
  }
}

// Bits of a float vector, so that -0.0 and 0.0 (and NaN payloads) differ.
std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  // memcpy's pointers must not be null, even for 0 bytes (UBSan).
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

TEST(FixedPointKernelsTest, FixedToFloatFastEqualsScalarAndBuildsAgree) {
  REQUIRE_AVX2();
  std::mt19937_64 rng(4);
  // Powers of two (the multiply path) and not (the divide path).
  for (double samples : {1.0, 4.0, 128.0, 3.0, 100.0}) {
    for (uint64_t len : kLengths) {
      std::vector<int64_t> acc(len);
      for (int64_t& a : acc) {
        a = static_cast<int64_t>(rng() >> 14) - (int64_t{1} << 49);
      }
      const double from_fixed = std::ldexp(1.0, -27);
      std::vector<float> want(len);
      for (uint64_t i = 0; i < len; ++i) {
        want[i] = static_cast<float>(static_cast<double>(acc[i]) * from_fixed /
                                     samples);
      }
      for (const Kernels* k : Builds()) {
        for (bool fast : {false, true}) {
          std::vector<int64_t> a = acc;
          std::vector<float> g(len, 7.0f);
          k->fixed_to_float(a.data(), len, from_fixed, samples, fast, g.data());
          EXPECT_EQ(Bits(g), Bits(want))
              << "len " << len << " samples " << samples << " fast " << fast;
          EXPECT_EQ(a, std::vector<int64_t>(len, 0));
        }
      }
    }
  }
}

TEST(FixedPointKernelsTest, FixedToFloatScalarTakesValuesBeyondTheFastRange) {
  REQUIRE_AVX2();
  std::vector<int64_t> acc = {int64_t{1} << 60, -(int64_t{1} << 55) - 3,
                              std::numeric_limits<int64_t>::max(), 5, -7};
  std::vector<float> want(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    want[i] = static_cast<float>(static_cast<double>(acc[i]) * 0.25 / 3.0);
  }
  for (const Kernels* k : Builds()) {
    std::vector<int64_t> a = acc;
    ASSERT_FALSE(k->fixed_fits_fast(a.data(), a.size()));
    std::vector<float> g(a.size());
    k->fixed_to_float(a.data(), a.size(), 0.25, 3.0, /*fast=*/false, g.data());
    EXPECT_EQ(Bits(g), Bits(want));
  }
}

TEST(FixedPointKernelsTest, HeldToFloatIsAddThenConvertAndBuildsAgree) {
  REQUIRE_AVX2();
  std::mt19937_64 rng(5);
  for (double samples : {1.0, 32.0, 5.0}) {
    for (uint64_t len : kLengths) {
      Floats f = RandomFloats(rng, len, 19);
      const double n = 1 + rng() % 8;
      const int exponent = 20 + static_cast<int>(rng() % 8);
      const double to_fixed = std::ldexp(1.0, 47 - exponent);
      const double from_fixed = std::ldexp(1.0, exponent - 47);
      // The unfused path: add into zeros, then convert.
      std::vector<int64_t> acc(len, 0);
      BaselineKernels().add_fixed_fast(f.bytes(), len, n, to_fixed, acc.data());
      std::vector<float> want(len);
      BaselineKernels().fixed_to_float(acc.data(), len, from_fixed, samples,
                                       /*fast=*/true, want.data());
      for (const Kernels* k : Builds()) {
        std::vector<float> g(len, 7.0f);
        k->held_to_float(f.bytes(), len, n, to_fixed, from_fixed, samples,
                         g.data());
        EXPECT_EQ(Bits(g), Bits(want))
            << "len " << len << " samples " << samples;
      }
    }
  }
}

// Optimizer::ApplyHeld (the rule's pass computing each element's held
// gradient as HeldToFloat does) leaves the weights and momentum that
// HeldToFloat into a buffer and then Apply leave, bit for bit, at every
// length around the vector widths, for SGD and momentum with and without
// weight decay and Nesterov; a rule without a one-pass form refuses and
// changes nothing.
TEST(FixedPointKernelsTest, OptimizerApplyHeldEqualsHeldToFloatThenApply) {
  std::mt19937_64 rng(11);
  struct Rule {
    pstrain::v1::OptimizerConfig::Kind kind;
    double weight_decay;
    bool nesterov;
  };
  for (const Rule& rule :
       {Rule{pstrain::v1::OptimizerConfig::SGD, 0, false},
        Rule{pstrain::v1::OptimizerConfig::SGD, 0.01, false},
        Rule{pstrain::v1::OptimizerConfig::MOMENTUM, 0, false},
        Rule{pstrain::v1::OptimizerConfig::MOMENTUM, 0.01, true},
        Rule{pstrain::v1::OptimizerConfig::MOMENTUM, 0, true}}) {
    pstrain::v1::OptimizerConfig config;
    config.set_kind(rule.kind);
    config.set_base_lr(0.05);
    config.set_momentum(0.9);
    config.set_weight_decay(rule.weight_decay);
    config.set_nesterov(rule.nesterov);
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(config);
    ASSERT_TRUE(opt.ok()) << opt.status();
    for (double samples : {1.0, 4.0, 64.0}) {
      for (uint64_t len : kLengths) {
        Floats f = RandomFloats(rng, len, 19);
        const int exponent = 20 + static_cast<int>(rng() % 8);
        const double to_fixed = std::ldexp(1.0, 47 - exponent);
        const double from_fixed = std::ldexp(1.0, exponent - 47);
        Floats w0 = RandomFloats(rng, len, 3);
        Floats b0 = RandomFloats(rng, len, 3);
        std::vector<float> w1(len), w2(len), b1(len), b2(len);
        for (uint64_t i = 0; i < len; ++i) {
          w1[i] = w2[i] = w0.at(i);
          b1[i] = b2[i] = b0.at(i);
        }
        const std::vector<float> before = w1;
        std::vector<float> g(len);
        HeldToFloat(f.bytes(), len, samples, to_fixed, from_fixed, samples,
                    g.data());
        (*opt)->Apply(3, 3, w2.data(), g.data(), b2.data(), len);
        ASSERT_TRUE((*opt)->ApplyHeld(
            3, 3, w1.data(),
            Optimizer::HeldGradient{f.bytes(), samples, to_fixed,
                                    from_fixed / samples},
            b1.data(), len));
        EXPECT_EQ(Bits(w1), Bits(w2))
            << "len " << len << " samples " << samples << " kind " << rule.kind;
        EXPECT_EQ(Bits(b1), Bits(b2)) << "len " << len;
        if (len >= 16) EXPECT_NE(Bits(w1), Bits(before));  // it applied
      }
    }
  }
  pstrain::v1::OptimizerConfig adam;
  adam.set_kind(pstrain::v1::OptimizerConfig::ADAM);
  adam.set_base_lr(0.05);
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(adam);
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<float> w(16, 1.0f), slots(32, 0.0f);
  Floats f = RandomFloats(rng, 16, 3);
  EXPECT_FALSE((*opt)->ApplyHeld(0, 0, w.data(),
                                 Optimizer::HeldGradient{f.bytes(), 1, 1, 1},
                                 slots.data(), 16));
  EXPECT_EQ(w, std::vector<float>(16, 1.0f));
}

TEST(FixedPointKernelsTest, FreeFunctionsUseTheBuildThisCpuRuns) {
  std::mt19937_64 rng(6);
  const uint64_t len = 257;
  Floats f = RandomFloats(rng, len, 19);
  const Kernels& k = HasAvx512() ? Avx512Kernels()
                     : HasAvx2() ? Avx2Kernels()
                                 : BaselineKernels();
  EXPECT_EQ(&ChosenKernels(), &k);
  std::vector<int64_t> a(len, 0), b(len, 0);
  AddFixedFast(f.bytes(), len, 3.0, 1024.0, a.data());
  k.add_fixed_fast(f.bytes(), len, 3.0, 1024.0, b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(FixedFitsFast(a.data(), len), k.fixed_fits_fast(b.data(), len));
  std::vector<float> ga(len), gb(len);
  FixedToFloat(a.data(), len, 1.0 / 1024, 4.0, true, ga.data());
  k.fixed_to_float(b.data(), len, 1.0 / 1024, 4.0, true, gb.data());
  EXPECT_EQ(Bits(ga), Bits(gb));
  HeldToFloat(f.bytes(), len, 3.0, 1024.0, 1.0 / 1024, 4.0, ga.data());
  k.held_to_float(f.bytes(), len, 3.0, 1024.0, 1.0 / 1024, 4.0, gb.data());
  EXPECT_EQ(Bits(ga), Bits(gb));
}

// The one-pass loops (Optimizer::ApplyHeld) and the free functions pick
// their build once per process, the widest this CPU runs; the narrower
// builds' paths are run here by this test binary run again with
// PSTRAIN_MAX_CPU_ISA capping them (common/cpu_features.h).
TEST(FixedPointKernelsTest, NarrowerBuildsPassTheDispatchedTests) {
  if (std::getenv("PSTRAIN_MAX_CPU_ISA") != nullptr) {
    GTEST_SKIP() << "a capped run of this binary: it does not start more";
  }
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(n, 0);
  const CpuIsa detected = DetectedCpuIsa();
  int runs = 0;
  for (CpuIsa cap : {CpuIsa::kBaseline, CpuIsa::kAvx2}) {
    if (cap >= detected) continue;
    const std::string command =
        std::string("PSTRAIN_MAX_CPU_ISA=") + CpuIsaName(cap) + " '" + exe +
        "' --gtest_filter='FixedPointKernelsTest.OptimizerApplyHeld*:"
        "FixedPointKernelsTest.FreeFunctions*'";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    ++runs;
  }
  if (runs == 0) {
    GTEST_SKIP() << "this CPU runs only the baseline build: nothing narrower";
  }
}

}  // namespace
}  // namespace fixed_point
}  // namespace pstrain
