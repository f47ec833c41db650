#include "server/shard_checkpoint.h"

#include <algorithm>
#include <vector>

#include "common/status_macros.h"

namespace pstrain {

absl::StatusOr<CheckpointFile> SaveShardAt(Shard& shard, uint32_t num_shards,
                                           CheckpointEnv* env,
                                           const std::string& root,
                                           uint64_t step, absl::Time deadline) {
  // Async: the rows hold the cut while the dense half waits for it.
  if (shard.sparse() != nullptr) shard.sparse()->OrderCut(step);
  PS_ASSIGN_OR_RETURN(ShardState state, shard.SnapshotAt(step, deadline));
  if (shard.sparse() != nullptr) {
    PS_ASSIGN_OR_RETURN(state.rows, shard.sparse()->SnapshotAt(step, deadline));
    state.has_rows = true;
  }
  return WriteShardFile(env, CheckpointDir(root, step), shard.shard_id(),
                        num_shards, state);
}

std::vector<TensorRange> ShardRanges(const Shard& shard) {
  std::vector<TensorRange> ranges;
  ranges.reserve(shard.chunks().size());
  for (const LocalChunk& c : shard.chunks()) {
    ranges.push_back({c.tensor, c.tensor_offset, c.length});
  }
  return ranges;
}

absl::Status RestoreShard(const CheckpointReader& reader,
                          const ShardOptions& options, Shard& shard) {
  PS_RETURN_IF_ERROR(reader.CheckCompatible(
      options.shard_map, options.rule.num_workers, options.optimizer.kind()));
  PS_ASSIGN_OR_RETURN(ShardState state, reader.StateFor(ShardRanges(shard)));
  const SparseShard* sparse = shard.sparse();
  if (sparse == nullptr) return shard.Restore(state);
  std::vector<std::string> tables;
  for (size_t t = 0; t < sparse->num_tables(); ++t) {
    tables.push_back(sparse->table_name(t));
  }
  PS_ASSIGN_OR_RETURN(
      SparseShardState rows,
      reader.RowsFor(tables, options.shard_id,
                     std::max<uint32_t>(options.num_shards, 1)));
  PS_RETURN_IF_ERROR(shard.Restore(state));
  return shard.sparse()->Restore(rows);
}

}  // namespace pstrain
