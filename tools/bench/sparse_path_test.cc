// MeasureSparsePath (ps_path.h): a small row-sparse cluster runs its steps,
// and the figures it reports are consistent (rows/s and value bytes/s of
// the same steps); bad sizes are refused.
#include <gtest/gtest.h>

#include "tools/bench/ps_path.h"

namespace pstrain::bench {
namespace {

TEST(SparsePathTest, PullsAndPushesRowsOnTwoShards) {
  absl::StatusOr<SparsePathResult> r = MeasureSparsePath(
      /*unique_rows=*/64, /*dim=*/4, /*servers=*/2, /*workers=*/2,
      /*steps=*/3, /*table_rows=*/10000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->warm_steps, 3);
  EXPECT_GT(r->pull_rows_per_s, 0);
  EXPECT_GT(r->push_rows_per_s, 0);
  EXPECT_DOUBLE_EQ(r->pull_bytes_per_s, r->pull_rows_per_s * 4 * 4);
  EXPECT_DOUBLE_EQ(r->push_bytes_per_s, r->push_rows_per_s * 4 * 4);
}

TEST(SparsePathTest, RefusesMoreRowsThanTheTableSpares) {
  EXPECT_EQ(MeasureSparsePath(6000, 4, 1, 1, 1, 10000).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureSparsePath(16, 0, 1, 1, 1, 10000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain::bench
