#include "common/sharding.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace pstrain {
namespace {

v1::TensorSpec Tensor(const std::string& name, std::vector<int64_t> shape) {
  v1::TensorSpec t;
  t.set_name(name);
  for (int64_t d : shape) t.add_shape(d);
  t.set_dtype(v1::DTYPE_F32);
  return t;
}

TEST(ShardingTest, OneHugeTensorIsSpreadEvenly) {
  // 10 chunks of 1000 elements plus a 7-element tail over 3 shards.
  auto map = BuildShardMap({Tensor("big", {10007})}, 3, 1000);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->chunks_size(), 11);
  auto bytes = BytesPerShard(*map, 3);
  auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  EXPECT_LE(*hi - *lo, 1000 * sizeof(float));
  EXPECT_GT(*lo, 0u);
  // Chunks tile the tensor without gaps or overlap.
  uint64_t next = 0;
  for (const auto& c : map->chunks()) {
    EXPECT_EQ(c.offset(), next);
    next += c.length();
  }
  EXPECT_EQ(next, 10007u);
}

TEST(ShardingTest, ManyUnevenTensorsStayWithinOneChunk) {
  std::vector<v1::TensorSpec> ts;
  for (int i = 0; i < 17; ++i)
    ts.push_back(Tensor("t" + std::to_string(i), {37 * i + 5, 3}));
  for (int shards : {1, 2, 3, 5, 8}) {
    auto map = BuildShardMap(ts, shards, 64);
    ASSERT_TRUE(map.ok());
    auto bytes = BytesPerShard(*map, shards);
    auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
    EXPECT_LE(*hi - *lo, 64 * sizeof(float)) << shards << " shards";
  }
}

TEST(ShardingTest, RejectsBadInput) {
  EXPECT_EQ(BuildShardMap({Tensor("a", {4})}, 0, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      BuildShardMap({Tensor("a", {4}), Tensor("a", {4})}, 1, 4).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildShardMap({Tensor("a", {4})}, 1, (4u << 20)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShardingTest, AutoChunkUsesEveryShardForSmallModels) {
  std::vector<v1::TensorSpec> ts = {Tensor("w", {64, 128}), Tensor("b", {128})};
  uint64_t elems = AutoChunkElems(ts, 4);
  auto map = BuildShardMap(ts, 4, elems);
  ASSERT_TRUE(map.ok());
  for (uint64_t b : BytesPerShard(*map, 4)) EXPECT_GT(b, 0u);
}

// Large models get chunks of kAutoMaxChunkBytes (a shard sums and applies a
// chunk once it is whole: the chunk is the pipeline's grain), smaller ones
// about eight per shard; an explicit size may be larger than the automatic
// cap.
TEST(ShardingTest, AutoChunksAreAtMostOneMiB) {
  static_assert(kAutoMaxChunkBytes == (1u << 20));
  static_assert(kAutoMaxChunkBytes <= kMaxChunkBytes);
  std::vector<v1::TensorSpec> big = {Tensor("w", {16 << 20})};  // 64 MiB
  EXPECT_EQ(AutoChunkElems(big, 1), kAutoMaxChunkBytes / sizeof(float));
  EXPECT_EQ(AutoChunkElems(big, 2), kAutoMaxChunkBytes / sizeof(float));
  std::vector<v1::TensorSpec> small = {Tensor("w", {1 << 20})};  // 4 MiB
  EXPECT_EQ(AutoChunkElems(small, 1), (1u << 20) / 8);           // 512 KiB
  EXPECT_EQ(AutoChunkElems(small, 2), (1u << 20) / 16);
  EXPECT_TRUE(BuildShardMap(big, 1, kMaxChunkBytes / sizeof(float)).ok());
}

// A row-sparse table of 10^8 rows is listed but gets no chunks and does not
// count towards the automatic chunk size.
TEST(ShardingTest, RowSparseTablesGetNoChunks) {
  v1::TensorSpec emb = Tensor("emb", {100000000, 16});
  emb.set_row_sparse(true);
  std::vector<v1::TensorSpec> dense = {Tensor("w", {64, 128})};
  std::vector<v1::TensorSpec> both = {emb, dense[0]};
  EXPECT_EQ(AutoChunkElems(both, 2), AutoChunkElems(dense, 2));
  auto map = BuildShardMap(both, 2, AutoChunkElems(both, 2));
  ASSERT_TRUE(map.ok());
  ASSERT_EQ(map->tensors_size(), 2);
  EXPECT_TRUE(map->tensors(0).row_sparse());
  for (const auto& c : map->chunks()) EXPECT_EQ(c.tensor(), "w");
}

}  // namespace
}  // namespace pstrain
