#include "tools/bench/zmq_ps.h"

#include "gtest/gtest.h"
#include "tools/bench/floor_ps_testing.h"

namespace pstrain::bench {
namespace {

TEST(ZmqPsTest, PullReturnsTheWeightsTheSgdPushesMade) {
  absl::StatusOr<std::unique_ptr<ZmqPs>> ps = ZmqPs::Start(1000);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ExpectPullReturnsTheWeightsTheSgdPushesMade(**ps, 1000);
}

TEST(ZmqPsTest, RejectsBadSizesAndChangesNothing) {
  EXPECT_EQ(ZmqPs::Start(0).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<ZmqPs>> ps = ZmqPs::Start(10);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ExpectAPushOfTheWrongSizeChangesNothing(**ps);
}

TEST(ZmqPsTest, MeasureTimesEveryStep) {
  ExpectEveryStepTimed(MeasureZmqPs(1 << 16, 4), 4);
}

}  // namespace
}  // namespace pstrain::bench
