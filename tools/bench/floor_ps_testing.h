// The checks both transport floors of ps_bench pass (the raw-TCP PS and the
// ZMQ PS; pull_push_steps.h): each is a measuring instrument, so its pushes
// must do the shard's work and its pulls must return it.
#ifndef PSTRAIN_TOOLS_BENCH_FLOOR_PS_TESTING_H_
#define PSTRAIN_TOOLS_BENCH_FLOOR_PS_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/bench/pull_push_steps.h"
#include "tools/bench/stats.h"

namespace pstrain::bench {

// A fresh `ps` of `elems` values pulls zeros; three pushes are applied with
// the shard's SGD rule and a pull returns exactly what the same rule gives
// locally (bit for bit).
template <typename Ps>
void ExpectPullReturnsTheWeightsTheSgdPushesMade(Ps& ps, uint64_t elems) {
  std::vector<float> weights;
  ASSERT_TRUE(ps.Pull(&weights).ok());
  EXPECT_EQ(weights, std::vector<float>(elems, 0.0f));

  pstrain::v1::OptimizerConfig config;
  config.set_kind(pstrain::v1::OptimizerConfig::SGD);
  config.set_base_lr(0.01);
  std::unique_ptr<Optimizer> sgd = *Optimizer::Create(config);
  std::vector<float> expected(elems, 0.0f);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> grad(elems);
    for (uint64_t i = 0; i < elems; ++i) grad[i] = 0.5f * step + 1e-3f * i;
    ASSERT_TRUE(ps.Push(grad).ok());
    sgd->Apply(step, step, expected.data(), grad.data(), nullptr, elems);
  }
  ASSERT_TRUE(ps.Pull(&weights).ok());
  EXPECT_EQ(weights, expected);
  EXPECT_NE(weights, std::vector<float>(elems, 0.0f));
}

// A push of 9 values to a fresh `ps` of 10 is INVALID_ARGUMENT naming the
// count, and the weights stay zero.
template <typename Ps>
void ExpectAPushOfTheWrongSizeChangesNothing(Ps& ps) {
  absl::Status s = ps.Push(std::vector<float>(9, 1.0f));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("9 values"));
  std::vector<float> weights;
  ASSERT_TRUE(ps.Pull(&weights).ok());
  EXPECT_EQ(weights, std::vector<float>(10, 0.0f));
}

// A measurement of `steps` warm steps timed the cold one, the settling ones
// and those, each pull and push.
inline void ExpectEveryStepTimed(const absl::StatusOr<PullPushSeconds>& s,
                                 int steps) {
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->pull_s.size(), 1u + kSettleSteps + steps);
  ASSERT_EQ(s->push_s.size(), 1u + kSettleSteps + steps);
  for (double x : s->pull_s) EXPECT_GT(x, 0);
  for (double x : s->push_s) EXPECT_GT(x, 0);
}

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_FLOOR_PS_TESTING_H_
