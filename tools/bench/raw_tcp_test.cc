#include "tools/bench/raw_tcp.h"

#include "gtest/gtest.h"
#include "tools/bench/floor_ps_testing.h"

namespace pstrain::bench {
namespace {

// Chunks of 64: the SGD rule is applied chunk by chunk, the last one short.
TEST(RawTcpPsTest, PullReturnsTheWeightsTheSgdPushesMade) {
  absl::StatusOr<std::unique_ptr<RawTcpPs>> ps = RawTcpPs::Start(1000, 64);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ExpectPullReturnsTheWeightsTheSgdPushesMade(**ps, 1000);
}

TEST(RawTcpPsTest, RejectsBadSizesAndChangesNothing) {
  EXPECT_EQ(RawTcpPs::Start(0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RawTcpPs::Start(10, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<RawTcpPs>> ps = RawTcpPs::Start(10);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ExpectAPushOfTheWrongSizeChangesNothing(**ps);
}

TEST(RawTcpPsTest, MeasureTimesEveryStep) {
  ExpectEveryStepTimed(MeasureRawTcpPs(1 << 16, 4), 4);
}

}  // namespace
}  // namespace pstrain::bench
