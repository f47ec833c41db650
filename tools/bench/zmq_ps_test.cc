#include "tools/bench/zmq_ps.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/bench/stats.h"

namespace pstrain::bench {
namespace {

// Pushes are applied with the shard's SGD rule and a pull returns exactly
// what the same rule gives locally (bit for bit).
TEST(ZmqPsTest, PullReturnsTheWeightsTheSgdPushesMade) {
  constexpr uint64_t kElems = 1000;
  absl::StatusOr<std::unique_ptr<ZmqPs>> ps = ZmqPs::Start(kElems);
  ASSERT_TRUE(ps.ok()) << ps.status();
  std::vector<float> weights;
  ASSERT_TRUE((*ps)->Pull(&weights).ok());
  EXPECT_EQ(weights, std::vector<float>(kElems, 0.0f));

  pstrain::v1::OptimizerConfig config;
  config.set_kind(pstrain::v1::OptimizerConfig::SGD);
  config.set_base_lr(0.01);
  std::unique_ptr<Optimizer> sgd = *Optimizer::Create(config);
  std::vector<float> expected(kElems, 0.0f);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> grad(kElems);
    for (uint64_t i = 0; i < kElems; ++i) grad[i] = 0.5f * step + 1e-3f * i;
    ASSERT_TRUE((*ps)->Push(grad).ok());
    sgd->Apply(step, step, expected.data(), grad.data(), nullptr, kElems);
  }
  ASSERT_TRUE((*ps)->Pull(&weights).ok());
  EXPECT_EQ(weights, expected);
  EXPECT_NE(weights, std::vector<float>(kElems, 0.0f));
}

TEST(ZmqPsTest, RejectsBadSizesAndChangesNothing) {
  EXPECT_EQ(ZmqPs::Start(0).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<ZmqPs>> ps = ZmqPs::Start(10);
  ASSERT_TRUE(ps.ok()) << ps.status();
  absl::Status s = (*ps)->Push(std::vector<float>(9, 1.0f));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("9 values"));
  std::vector<float> weights;
  ASSERT_TRUE((*ps)->Pull(&weights).ok());
  EXPECT_EQ(weights, std::vector<float>(10, 0.0f));
}

// One cold step, the settling ones and `steps` warm ones, each pull and push
// timed.
TEST(ZmqPsTest, MeasureTimesEveryStep) {
  absl::StatusOr<PullPushSeconds> s = MeasureZmqPs(1 << 16, 4);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->pull_s.size(), 1u + kSettleSteps + 4u);
  ASSERT_EQ(s->push_s.size(), 1u + kSettleSteps + 4u);
  for (double x : s->pull_s) EXPECT_GT(x, 0);
  for (double x : s->push_s) EXPECT_GT(x, 0);
}

}  // namespace
}  // namespace pstrain::bench
