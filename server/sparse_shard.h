// The row-sparse half of a parameter-server shard (docs/sparse.md): the
// shard's SparseTables (one per row_sparse tensor of the job), the worker
// clocks of row pushes and the job's consistency rule applied to them.
//
// Rows travel in their own calls (PushRows, PullRows) beside the dense Push
// and Pull, with the same headers: every worker pushes its row gradients of
// step t to every shard (an empty push where it touched none of the shard's
// rows), so the rows' clocks and the dense clocks advance together; the
// sparse version (row steps applied) is kept apart from the dense one.
//
// Consistency (the ConsistencyRule of server/consistency_rule.h, as for the
// dense shard; backup workers and DC-ASGD are not supported for rows and
// refused at Create):
//  * Bsp (sync). Each push of step t is kept (decoded, fp32) until every
//    worker pushed t. Then the step commits: for every row any worker
//    touched, the gradient is
//        g_r = (sum over workers w in rank order of n_w * g_{w,r}) / N,
//    N = sum of n_w over ALL the step's pushes (the global batch, as the
//    dense path divides; a worker that did not touch r adds 0), summed in
//    double in rank order, so the result does not depend on arrival order.
//    Each touched row runs the optimizer once at schedule step t; rows no
//    worker touched do not move (lazy). The version becomes t + 1; a
//    PullRows at clock c waits until version >= c.
//  * Ssp (async, staleness s). Each push is applied on arrival (its rows'
//    gradients as pushed; staleness_aware_lr scales the rate by
//    1 / max(tau, 1)); a PullRows at clock c waits until every worker has
//    pushed c - s row pushes (never when s < 0).
//
// Pushes are all-or-nothing and exactly-once, as dense ones: a push is
// validated whole (worker, tensors, dtype, row width, byte sizes, ids in
// the table, on this shard and unique, finite values, memory bound) before
// anything changes; the worker's last two accepted pushes (clock and a
// fingerprint of its header and rows) are remembered, so the same push again
// gets the original result and changes nothing, and a different push for an
// accepted clock is FAILED_PRECONDITION.
//
// Elastic stand-ins (training.on_failure: elastic, mode sync;
// coordinator/elastic.h). A live worker standing in for a dead rank (a new
// session of the rank) re-computes the rank's step `held` from the rows of
// version `held`, although the dead process may have pushed that step here
// (and even its next one), so the step may have committed already. A sync
// PullRows at clock c when the version is c + 1 therefore reads the rows as
// they were at version c: the commit of step c keeps the weights of the rows
// it changed (touched or evicted) until the next commit. (A live worker's
// own pull at clock c always finds the version at c: step c cannot commit
// without its push.) The stand-in's push then matches the dead process's
// bit for bit, so a shard that has it answers with its original result and
// the others accept it: no step is summed twice or lost.
//
// Memory: the tables' bound (SparseTableOptions.max_rows, per table and
// shard), plus in sync the pending pushes of one step (each at most
// max_push_bytes of wire payload, decoded to at most twice that).
//
// Thread-safe: one mutex; PullRows may block until its deadline; Close()
// wakes every waiter with UNAVAILABLE.
#ifndef PSTRAIN_SERVER_SPARSE_SHARD_H_
#define PSTRAIN_SERVER_SPARSE_SHARD_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/state.h"
#include "common/optimizer.h"
#include "proto/pstrain.pb.h"
#include "server/consistency_rule.h"
#include "server/sparse_table.h"

namespace pstrain {

struct SparseShardOptions {
  uint32_t shard_id = 0;
  uint32_t num_shards = 1;
  // The job's row_sparse tensors (others are ignored).
  std::vector<pstrain::v1::TensorSpec> tensors;
  pstrain::v1::OptimizerConfig optimizer;
  ConsistencyOptions rule;
  pstrain::v1::DType wire_dtype = pstrain::v1::DTYPE_F32;
  uint64_t max_rows = 0;  // per table and shard; 0: no bound
  SparseTableOptions::OnFull on_full = SparseTableOptions::OnFull::kEvict;
  // Wire payload (ids and values) of one push at most; beyond it the push
  // is RESOURCE_EXHAUSTED (the service stops reading it).
  uint64_t max_push_bytes = uint64_t{256} << 20;
};

// The rows of one tensor in a decoded push (ids unique) or pull.
struct RowBlock {
  size_t table = 0;  // index in SparseShard::tables()
  std::vector<int64_t> ids;
  std::vector<float> values;  // ids.size() * dim (pushes; pull replies)
};

// A validated push: its header and one block per tensor it names.
struct RowPush {
  pstrain::v1::PushHeader header;
  std::vector<RowBlock> blocks;
  uint64_t fingerprint = 0;
  uint64_t rows = 0;
};

struct RowPushResult {
  uint64_t version = 0;
  uint64_t staleness = 0;
  bool applied = false;
  uint64_t rows = 0;
};

struct RowPullResult {
  uint64_t version = 0;
  uint64_t min_clock = 0;
  double wait_seconds = 0;
  std::vector<RowBlock> blocks;  // the request's, with values
};

// Resharding K -> K' (checkpoints restored on another number of servers):
// the state shard `shard_id` of `num_shards` holds, from the states of
// every shard of the old layout (any count, same tensors and clocks): each
// row goes to RowShard(id, num_shards); version and clocks are the old
// shards' (which must agree: INVALID_ARGUMENT otherwise). Rows and their
// optimizer state move bit for bit, so training goes on exactly.
absl::StatusOr<SparseShardState> ReshardSparseState(
    const std::vector<SparseShardState>& from, uint32_t shard_id,
    uint32_t num_shards);

class SparseShard {
 public:
  // INVALID_ARGUMENT for a bad rule, optimizer, wire dtype or table spec,
  // or backup workers or DC-ASGD with row-sparse tensors.
  static absl::StatusOr<std::unique_ptr<SparseShard>> Create(
      SparseShardOptions options);

  uint32_t shard_id() const { return options_.shard_id; }
  pstrain::v1::DType wire_dtype() const { return options_.wire_dtype; }
  uint64_t max_push_bytes() const { return options_.max_push_bytes; }
  // Index of the table named `tensor`, or -1.
  int TableIndex(const std::string& tensor) const;
  // The tables' names and widths (fixed after Create).
  const std::string& table_name(size_t i) const { return names_[i]; }
  int64_t table_dim(size_t i) const { return dims_[i]; }
  size_t num_tables() const { return names_.size(); }

  // Decodes and validates a push's messages (the first carries the
  // header): INVALID_ARGUMENT naming the tensor for an unknown tensor, a
  // dtype other than the wire dtype, a row width other than the table's,
  // byte sizes that do not match, a row id outside the table or on another
  // shard, a duplicate id, or a non-finite value; RESOURCE_EXHAUSTED for
  // more than max_push_bytes. Pure: reads no state.
  absl::StatusOr<RowPush> DecodePush(
      const std::vector<pstrain::v1::PushRowsRequest>& messages) const;
  // Applies (async) or records (sync) a decoded push; see above.
  // RESOURCE_EXHAUSTED naming the tensor when the rows would pass the
  // memory bound; nothing changes on any error.
  absl::StatusOr<RowPushResult> Push(RowPush push);

  // Validates a pull's request (tensors, widths, ids; values empty):
  // INVALID_ARGUMENT naming the tensor. Pure.
  absl::StatusOr<std::vector<RowBlock>> DecodePull(
      const pstrain::v1::PullRowsRequest& request) const;
  // Waits (until `deadline`) for `clock` to be readable, then reads the
  // blocks' rows (in sync at version clock + 1: as of version clock, above).
  // DEADLINE_EXCEEDED naming the workers below the clock needed,
  // FAILED_PRECONDITION when the rows of version clock are no longer held
  // (a restore since), UNAVAILABLE after Close().
  absl::StatusOr<RowPullResult> Pull(uint32_t worker, uint64_t clock,
                                     std::vector<RowBlock> blocks,
                                     absl::Time deadline);

  void Close();
  uint64_t version() const;
  std::vector<uint64_t> clocks() const;
  size_t stored_rows(size_t table) const;
  uint64_t evicted_rows(size_t table) const;

  // Checkpoints (docs/sparse.md): the state now if no sync push is pending
  // (FAILED_PRECONDITION otherwise), and its restore (tensors, clocks and
  // rows must fit this shard: INVALID_ARGUMENT naming the mismatch changes
  // nothing).
  absl::StatusOr<SparseShardState> Snapshot() const;
  absl::Status Restore(const SparseShardState& state);
  // Checkpoint cut `cut`, as Shard::SnapshotAt (server/shard.h,
  // "Checkpoints"): waits until `deadline` for it. FAILED_PRECONDITION past
  // the cut, DEADLINE_EXCEEDED, UNAVAILABLE after Close().
  //  * Sync: the state after row step cut - 1 (version == cut and no push
  //    of step cut recorded); a standing cut (SetStandingCuts) is captured
  //    in the commit that reaches it, so a call after the shard moved on
  //    still gets it.
  //  * Async: the state in which every worker's row pushes of clocks < cut
  //    are applied and none of clock >= cut (every row clock == cut), held
  //    as the dense half holds it: while cut c (a standing cut below `last`,
  //    one a call waits for, or one a timed-out call left ordered) is not
  //    captured, a PullRows at clock >= c waits until every worker reached c
  //    (ShardProgress::next_cut, the Ssp rule); since a worker pushes rows of
  //    clock c only after reading them at c, the shard passes through
  //    "every row clock == c" and the push that completes it captures it. A
  //    call whose deadline passes leaves the cut ordered (captured when
  //    reached), so a repeated call collects it.
  absl::StatusOr<SparseShardState> SnapshotAt(uint64_t cut,
                                              absl::Time deadline);
  // Async: holds cut `cut` from now on and captures it when reached (as a
  // SnapshotAt call whose deadline passed leaves it), unless the rows are
  // at or past it; nothing in sync. For the dense half's time cuts: called
  // before the dense SnapshotAt, so the rows do not pass the cut meanwhile.
  void OrderCut(uint64_t cut);
  // Cuts captured by themselves from now on: t % every == 0 (every > 0) or
  // t == last, at most `max_held` kept (the oldest dropped); async: reads
  // are held at each such cut below `last` (above).
  void SetStandingCuts(uint64_t every, uint64_t last, size_t max_held = 2);

 private:
  explicit SparseShard(SparseShardOptions options);
  ShardProgress ProgressLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t MinClockLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Async: the smallest cut above `min_clock` that reads are held at (see
  // SnapshotAt); 0 when none, and in sync.
  uint64_t NextCutLocked(uint64_t min_clock) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where the rows stand for cuts, as the rule sees it (a row step is open
  // while pushes of it are recorded).
  CutProgress CutProgressLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rule's answers (ConsistencyRule::AtCut, PastCut): async, every row
  // clock == cut / some row clock > cut; sync, the row step boundary.
  bool AtCutLocked(uint64_t cut) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PastCutLocked(uint64_t cut) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rules that apply pushes on arrival and hold reads at cuts (async),
  // after a push: captures the cut the rows have reached, if it is
  // standing, ordered or waited for; drops ordered cuts reached.
  void ServeHeldCutsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SnapshotAt for rules that hold reads at cuts (async).
  absl::StatusOr<SparseShardState> SnapshotAtHeldCut(uint64_t cut,
                                                     absl::Time deadline);
  // The rows each table's update (the pending step plus `push`) touches
  // fits the bound.
  absl::Status CheckFitsLocked(const RowPush& push) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyPushLocked(const RowPush& push, uint64_t step, double lr_scale)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CommitStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SparseShardState CaptureLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SparseShardOptions options_;
  std::unique_ptr<ConsistencyRule> rule_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::string> names_;
  std::vector<int64_t> dims_;
  std::vector<int64_t> table_rows_;

  struct LastPush {
    bool valid = false;
    uint64_t clock = 0;
    uint64_t fingerprint = 0;
    RowPushResult result;
  };

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<SparseTable>> tables_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> clocks_ ABSL_GUARDED_BY(mu_);
  std::vector<LastPush> last_push_ ABSL_GUARDED_BY(mu_);
  std::vector<LastPush> prior_push_ ABSL_GUARDED_BY(mu_);  // the one before
  // Sync: the tables keep the rows of version_ - 1 (a commit since Create or
  // Restore).
  bool previous_held_ ABSL_GUARDED_BY(mu_) = false;
  // Sync: the open step's pushes by rank (null: not pushed yet).
  std::vector<std::unique_ptr<RowPush>> pending_ ABSL_GUARDED_BY(mu_);
  uint32_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t standing_every_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t standing_last_ ABSL_GUARDED_BY(mu_) = 0;
  size_t standing_max_held_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, SparseShardState> held_ ABSL_GUARDED_BY(mu_);  // by cut
  // Async: cuts SnapshotAt calls wait for now, and cuts timed-out calls left
  // ordered (held and captured when reached).
  std::multiset<uint64_t> waiting_cuts_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> ordered_cuts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SPARSE_SHARD_H_
