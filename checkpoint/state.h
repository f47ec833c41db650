// The state of one parameter-server shard at a consistent cut, as Shard
// exports it (Shard::Snapshot) and takes it back (Shard::Restore); the unit a
// checkpoint (checkpoint/checkpoint.h) stores per shard. Plain data, keyed by
// tensor element ranges, so a checkpoint can be read back by ranges onto any
// other shard layout. See server/shard.h ("Checkpoints") for what the cut is.
#ifndef PSTRAIN_CHECKPOINT_STATE_H_
#define PSTRAIN_CHECKPOINT_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {

// Elements [offset, offset + length) of one tensor: its weights and the
// optimizer's slots for them.
struct ChunkState {
  std::string tensor;
  uint64_t offset = 0;  // first element within the tensor
  uint64_t length = 0;
  std::vector<float> weights;  // length values
  // num_slots * length values, slot-major: [slot0[0..length), slot1[...)...]
  // (Optimizer::InitSlots' layout; slot meanings in common/optimizer.h).
  std::vector<float> slots;
  // Sync only: the fixed-point accumulator's exponent E for the next step
  // (server/shard.h, "Sync sum"); has_exponent false when the rule keeps
  // none (async) or it is unknown (the shard then starts from E = 32).
  bool has_exponent = false;
  int32_t exponent = 0;
};

// One stored row of a row-sparse table (server/sparse_table.h): weights
// (dim floats) then the optimizer's slots (num_slots * dim floats), and the
// row's own update count (Adam's bias correction).
struct SparseRowState {
  int64_t id = 0;
  uint64_t updates = 0;
  std::vector<float> data;
};

// The row half of a shard at a cut (server/sparse_shard.h; no sync push
// pending): per row-sparse tensor its stored rows (by id), the row steps
// applied and the worker clocks of row pushes.
struct SparseShardState {
  uint64_t version = 0;
  std::vector<uint64_t> clocks;
  std::vector<std::string> tensors;
  std::vector<std::vector<SparseRowState>> rows;  // tensors order
};

struct ShardState {
  // The cut: sync, the number of steps applied (the state after step
  // cut - 1); async, the clock every worker had reached.
  uint64_t cut = 0;
  uint64_t version = 0;          // optimizer steps applied by the shard
  std::vector<uint64_t> clocks;  // clocks pushed, per worker
  // The learning-rate schedule's next step: sync, the version; async, the
  // cut clock (a push of clock c runs the schedule at step c).
  uint64_t schedule_step = 0;
  int num_slots = 0;  // Optimizer::num_slots()
  // The shard's chunks, in Shard::chunks() order.
  std::vector<ChunkState> chunks;
  // A job with row-sparse tensors: the rows this shard holds at the cut.
  bool has_rows = false;
  SparseShardState rows;
};

}  // namespace pstrain

#endif  // PSTRAIN_CHECKPOINT_STATE_H_
