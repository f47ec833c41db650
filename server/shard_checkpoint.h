// A shard's side of checkpoints (checkpoint/checkpoint.h has the format):
// saving a shard's part of a cut and restoring a shard from a checkpoint of
// any shard layout. The format itself knows nothing of Shard, so the
// coordinator and the all-reduce workers use it without linking the shard.
#ifndef PSTRAIN_SERVER_SHARD_CHECKPOINT_H_
#define PSTRAIN_SERVER_SHARD_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "server/shard.h"

namespace pstrain {

// A server's part of checkpoint `step`: waits (until `deadline`) for `shard`
// to reach cut `step` (Shard::SnapshotAt; its rows too in a job with
// row-sparse tensors) and writes its file into CheckpointDir(root, step).
// The returned entry goes to whoever writes the manifest once every shard's
// entry is in.
absl::StatusOr<CheckpointFile> SaveShardAt(Shard& shard, uint32_t num_shards,
                                           CheckpointEnv* env,
                                           const std::string& root,
                                           uint64_t step, absl::Time deadline);

// Restores `shard` (built from `options`) from `reader`:
// CheckCompatible, then StateFor(shard.chunks()) and Shard::Restore; in a
// job with row-sparse tensors also RowsFor and SparseShard::Restore (rows
// checked first, so a checkpoint without them changes nothing).
absl::Status RestoreShard(const CheckpointReader& reader,
                          const ShardOptions& options, Shard& shard);

// The element ranges of `shard`'s chunks, for CheckpointReader::StateFor.
std::vector<TensorRange> ShardRanges(const Shard& shard);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SHARD_CHECKPOINT_H_
