#include "tools/bench/push_frame_parse.h"

#include <gtest/gtest.h>

namespace pstrain::bench {
namespace {

// Both parses accept the frame, in slices smaller than a chunk too.
TEST(MeasurePushFrameParse, BothPathsParseTheFrame) {
  for (size_t slice : {size_t{1000}, size_t{64} << 10}) {
    absl::StatusOr<PushFrameParseTimes> t = MeasurePushFrameParse(2, slice, 1);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_GT(t->frame_bytes, 2u << 20);
    EXPECT_GT(t->protobuf_s, 0);
    EXPECT_GT(t->in_place_s, 0);
    EXPECT_GT(t->ratio, 0);
  }
}

TEST(MeasurePushFrameParse, BadOptionsAreRefused) {
  EXPECT_EQ(MeasurePushFrameParse(0, 1024, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasurePushFrameParse(1, 1024, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain::bench
