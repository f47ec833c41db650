// ring_bench's flags: the compared settings (--compare_segment_bytes,
// --compare_link_args) and their bad values.
#include "tools/bench/ring_bench_flags.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "worker/allreduce/grpc_transport.h"

ABSL_DECLARE_FLAG(int, compare_segment_bytes);
ABSL_DECLARE_FLAG(std::string, compare_link_args);

namespace pstrain::bench {
namespace {

class RingBenchFlagsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    absl::SetFlag(&FLAGS_compare_segment_bytes, 0);
    absl::SetFlag(&FLAGS_compare_link_args, "");
  }
};

TEST_F(RingBenchFlagsTest, NothingComparedByDefault) {
  absl::StatusOr<RingRoundsOptions> o = RingRoundsOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->compare.has_value());
  EXPECT_EQ(o->ring.link_args, RingLinkArgs());
}

TEST_F(RingBenchFlagsTest, ComparedLinkArgsReplaceOrJoinTheShippedOnes) {
  absl::SetFlag(&FLAGS_compare_link_args,
                "grpc.http2.bdp_probe=1,grpc.http2.max_frame_size=1048576");
  absl::SetFlag(&FLAGS_compare_segment_bytes, 262144);
  absl::StatusOr<RingRoundsOptions> o = RingRoundsOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_TRUE(o->compare.has_value());
  EXPECT_EQ(o->ring.link_args, RingLinkArgs());  // the shipped side as is
  std::vector<std::pair<std::string, int>> want = RingLinkArgs();
  for (auto& [key, value] : want) {
    if (key == "grpc.http2.bdp_probe") value = 1;
  }
  want.emplace_back("grpc.http2.max_frame_size", 1048576);
  EXPECT_EQ(o->compare->link_args, want);
  EXPECT_EQ(o->compare->ring.segment_elems, 65536u);
  EXPECT_EQ(o->ring.ring.segment_elems, (1u << 20) / 4);
}

TEST_F(RingBenchFlagsTest, BadComparedSettingsAreNamed) {
  for (const char* bad : {"grpc.http2.bdp_probe", "grpc.x=one", "=3"}) {
    absl::SetFlag(&FLAGS_compare_link_args, bad);
    absl::StatusOr<RingRoundsOptions> o = RingRoundsOptionsFromFlags();
    ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(o.status().message(), "--compare_link_args"))
        << o.status();
    EXPECT_TRUE(absl::StrContains(o.status().message(), bad)) << o.status();
  }
  absl::SetFlag(&FLAGS_compare_link_args, "");
  absl::SetFlag(&FLAGS_compare_segment_bytes, 6);
  absl::StatusOr<RingRoundsOptions> o = RingRoundsOptionsFromFlags();
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(o.status().message(), "--compare_segment_bytes"))
      << o.status();
}

}  // namespace
}  // namespace pstrain::bench
