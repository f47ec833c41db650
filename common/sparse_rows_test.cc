#include "common/sparse_rows.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Consecutive ids and strided ids both spread evenly: every shard within 5
// standard deviations of rows / K (binomial: sqrt(rows * p * (1 - p))).
TEST(RowShardTest, BalancedForConsecutiveAndStridedIds) {
  for (uint32_t k : {2u, 3u, 7u, 16u}) {
    for (int64_t stride : {int64_t{1}, int64_t{1024}, int64_t{7919}}) {
      const int64_t n = 200000;
      std::vector<int64_t> per(k, 0);
      for (int64_t i = 0; i < n; ++i) ++per[RowShard(i * stride, k)];
      const double mean = static_cast<double>(n) / k;
      const double sd = std::sqrt(n * (1.0 / k) * (1.0 - 1.0 / k));
      for (uint32_t s = 0; s < k; ++s) {
        EXPECT_LT(std::abs(per[s] - mean), 5 * sd)
            << "k=" << k << " stride=" << stride << " shard " << s;
      }
    }
  }
}

TEST(RowShardTest, DependsOnlyOnRowAndShardCount) {
  EXPECT_EQ(RowShard(12345, 1), 0u);
  EXPECT_EQ(RowShard(12345, 5), SplitMix64(12345) % 5);
  EXPECT_EQ(RowShard(0, 4), RowShard(0, 4));
  // splitmix64's published first output for seed 0 (state += golden gamma).
  EXPECT_EQ(SplitMix64(0), 0xe220a8397b1dcdafULL);
}

TEST(RowIdsTest, RoundTripAndBadLength) {
  std::string bytes;
  AppendRowIds({3, -1, int64_t{1} << 40}, &bytes);
  ASSERT_EQ(bytes.size(), 24u);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 3u);  // little-endian
  auto ids = DecodeRowIds(bytes, "emb");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int64_t>{3, -1, int64_t{1} << 40}));
  bytes.push_back('x');
  auto bad = DecodeRowIds(bytes, "emb");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'emb'"), std::string::npos);
}

TEST(RowSparseShapeTest, NeedsRowsAndDim) {
  pstrain::v1::TensorSpec spec;
  spec.set_name("emb");
  spec.add_shape(10);
  EXPECT_FALSE(RowSparseShape(spec).ok());
  spec.add_shape(4);
  auto s = RowSparseShape(spec);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->rows, 10);
  EXPECT_EQ(s->dim, 4);
  spec.set_shape(1, 0);
  EXPECT_EQ(RowSparseShape(spec).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
