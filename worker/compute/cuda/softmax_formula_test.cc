// The CUDA kernel's softmax cross-entropy formula (softmax_formula.h), in
// float on the CPU, against a double reference: large logits with a small
// loss, large losses, ties, negative logits and random rows of odd widths.
#include "worker/compute/cuda/softmax_formula.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace cuda {
namespace {

// The loss in double: log(sum_j exp(z_j - m)) + m - z_label.
double Reference(const std::vector<float>& z, int64_t label) {
  const double m = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (float v : z) sum += std::exp(double{v} - m);
  return std::log(sum) + (m - z[label]);
}

// The float formula the kernel used before: log(sum) + max - z_label.
float NaiveFloat(const std::vector<float>& z, int64_t label) {
  const float m = *std::max_element(z.begin(), z.end());
  float sum = 0;
  for (float v : z) sum += expf(v - m);
  return logf(sum) + m - z[label];
}

float Formula(const std::vector<float>& z, int64_t label) {
  return SoftmaxCrossEntropyRow(z.data(), z.size(), label);
}

double RelErr(double got, double want) {
  return std::abs(got - want) / std::abs(want);
}

TEST(SoftmaxFormulaTest, LargeLogitsSmallLoss) {
  const std::vector<float> z = {1e4f, 1e4f - 10, 1e4f - 12.5f, 1e4f - 30};
  const double want = Reference(z, 0);
  ASSERT_GT(want, 4e-5);
  ASSERT_LT(want, 6e-5);
  EXPECT_LE(RelErr(Formula(z, 0), want), 1e-5)
      << Formula(z, 0) << " vs " << want;
  // The case is a real test: the old float form is off by far more.
  EXPECT_GT(RelErr(NaiveFloat(z, 0), want), 1e-2)
      << NaiveFloat(z, 0) << " vs " << want;
}

TEST(SoftmaxFormulaTest, SmallLossNearOneWithoutLargeLogits) {
  // sum = 1 + 2e-7 rounds in float; log1p(rest) keeps it.
  const std::vector<float> z = {0, -16, -17, -18};
  const double want = Reference(z, 0);
  EXPECT_LE(RelErr(Formula(z, 0), want), 1e-5);
  EXPECT_GT(RelErr(NaiveFloat(z, 0), want), 1e-2);
}

TEST(SoftmaxFormulaTest, LargeLossAndNegativeLogits) {
  const std::vector<float> big = {1e4f, 1e4f - 10};
  EXPECT_LE(RelErr(Formula(big, 1), Reference(big, 1)), 1e-6);
  const std::vector<float> neg = {-1e4f, -1e4f - 3, -1e4f - 0.25f};
  for (int64_t y = 0; y < 3; ++y) {
    EXPECT_LE(RelErr(Formula(neg, y), Reference(neg, y)), 1e-5) << y;
  }
}

TEST(SoftmaxFormulaTest, TiesAndOneColumn) {
  const std::vector<float> tie = {3, 1, 3};
  for (int64_t y = 0; y < 3; ++y) {
    EXPECT_LE(RelErr(Formula(tie, y), Reference(tie, y)), 1e-6) << y;
  }
  EXPECT_NEAR(Formula(tie, 0), std::log(2.0 + std::exp(-2.0)), 1e-6);
  const std::vector<float> one = {42};
  EXPECT_EQ(Formula(one, 0), 0.0f);
}

TEST(SoftmaxFormulaTest, RandomRowsOfOddWidths) {
  std::mt19937 rng(3);
  for (int64_t cols : {2, 3, 7, 31, 33, 100, 257}) {
    for (float scale : {0.1f, 3.0f, 50.0f}) {
      std::normal_distribution<float> normal(0, scale);
      std::vector<float> z(cols);
      for (float& v : z) v = normal(rng);
      for (int64_t y : {int64_t{0}, cols / 2, cols - 1}) {
        const double want = Reference(z, y);
        EXPECT_NEAR(Formula(z, y), want, 1e-5 * std::max(1.0, want))
            << "cols " << cols << " scale " << scale << " label " << y;
      }
    }
  }
}

TEST(SoftmaxFormulaTest, ProbabilitiesSumToOne) {
  const std::vector<float> z = {1e4f, 1e4f - 1, 1e4f - 2, 1e4f - 40};
  float rest = 0;
  for (size_t j = 1; j < z.size(); ++j) rest += expf(z[j] - z[0]);
  double total = 0;
  for (float v : z) total += SoftmaxProbability(v, z[0], rest);
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_NEAR(
      SoftmaxProbability(z[1], z[0], rest),
      std::exp(-1.0) / (1 + std::exp(-1.0) + std::exp(-2.0) + std::exp(-40.0)),
      1e-6);
}

TEST(SoftmaxFormulaTest, NanPropagates) {
  const std::vector<float> z = {1, NAN, 2};
  EXPECT_TRUE(std::isnan(Formula(z, 0)));
}

}  // namespace
}  // namespace cuda
}  // namespace pstrain
