#include "common/sharding.h"

#include <algorithm>
#include <numeric>
#include <queue>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/model_spec.h"

namespace pstrain {

using pstrain::v1::ChunkInfo;
using pstrain::v1::ShardMap;
using pstrain::v1::TensorSpec;

uint64_t AutoChunkElems(const std::vector<TensorSpec>& tensors,
                        int num_shards) {
  uint64_t total = 0;
  for (const TensorSpec& t : tensors) {
    if (!t.row_sparse()) total += NumElements(t);
  }
  const uint64_t min_elems = 1024 / sizeof(float);
  const uint64_t max_elems = kAutoMaxChunkBytes / sizeof(float);
  uint64_t target =
      total / (8 * static_cast<uint64_t>(std::max(num_shards, 1)));
  return std::clamp(target, min_elems, max_elems);
}

absl::StatusOr<ShardMap> BuildShardMap(const std::vector<TensorSpec>& tensors,
                                       int num_shards, uint64_t chunk_elems) {
  if (num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_shards must be >= 1, got ", num_shards));
  }
  if (chunk_elems == 0 || chunk_elems * sizeof(float) > kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk size must be in [1, ", kMaxChunkBytes / sizeof(float),
        "] elements, got ", chunk_elems));
  }
  ShardMap map;
  absl::flat_hash_set<std::string> names;
  for (const TensorSpec& t : tensors) {
    if (t.name().empty() || !names.insert(t.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor names must be unique and non-empty: '", t.name(), "'"));
    }
    if (NumElements(t) <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name(), "' has no elements"));
    }
    *map.add_tensors() = t;
    // Row-sparse tables are spread by row (common/sparse_rows.h), not cut
    // into chunks.
    if (t.row_sparse()) continue;
    const uint64_t n = static_cast<uint64_t>(NumElements(t));
    for (uint64_t off = 0, i = 0; off < n; off += chunk_elems, ++i) {
      ChunkInfo* c = map.add_chunks();
      c->set_tensor(t.name());
      c->set_index(static_cast<uint32_t>(i));
      c->set_offset(off);
      c->set_length(std::min(chunk_elems, n - off));
    }
  }
  // Largest first, ties in declaration order; then each chunk goes to the
  // least loaded shard (lowest id on ties). Invariant: max - min <= largest.
  std::vector<int> order(map.chunks_size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return map.chunks(a).length() > map.chunks(b).length();
  });
  using Load = std::pair<uint64_t, int>;  // (elements, shard)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (int s = 0; s < num_shards; ++s) heap.push({0, s});
  for (int idx : order) {
    auto [load, shard] = heap.top();
    heap.pop();
    ChunkInfo* c = map.mutable_chunks(idx);
    c->set_shard(shard);
    heap.push({load + c->length(), shard});
  }
  return map;
}

std::vector<uint64_t> BytesPerShard(const ShardMap& map, int num_shards) {
  std::vector<uint64_t> bytes(num_shards, 0);
  for (const ChunkInfo& c : map.chunks()) {
    if (c.shard() < bytes.size())
      bytes[c.shard()] += c.length() * sizeof(float);
  }
  return bytes;
}

}  // namespace pstrain
