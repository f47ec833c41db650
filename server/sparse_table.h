// The rows one shard holds of one row-sparse tensor (TensorSpec.row_sparse,
// docs/sparse.md): an embedding table [rows, dim] of which this shard owns
// the rows r with RowShard(r, num_shards) == shard_id (common/sparse_rows.h).
//
// Lazy rows. A row takes memory only once a gradient touches it: until then
// it reads as its initial value, element (r, c) being the init rule's
// counter-based value of flat index r * dim + c (common/model_spec.h), the
// same on every shard and run, so resharding and restarts stay bit-exact.
// A table of 10^8 virtual rows costs memory only for the rows pushed.
//
// Lazy optimizer state. Each stored row keeps its weights, its optimizer
// slots (Optimizer::num_slots() vectors of dim floats: Adam's moments,
// AdaGrad's accumulator) and its own update count, which Adam's bias
// correction uses (t = the row's updates + 1). A row is updated only in the
// steps whose gradient touches it; rows not touched do not move (and their
// moments do not decay), the "lazy" rule of most recommendation trainers.
// This differs from dense Adam, which also moves a row whose gradient is 0
// by its remaining momentum; SGD and AdaGrad without weight decay are the
// same either way (a zero gradient changes nothing).
//
// Memory bound (max_rows > 0): at most max_rows rows of the table stored on
// this shard, that is at most about max_rows * (dim * 4 * (1 + slots) + 96)
// bytes (the 96: the row's map entry, vector and recency node). At the bound,
// OnFull::kEvict drops the least recently used rows (reads and updates count
// as uses) that the update does not touch: an evicted row reads as its
// initial value again, with fresh slots and update count. OnFull::kReject
// refuses an update that would store more than max_rows rows
// (RESOURCE_EXHAUSTED naming the tensor; nothing changes). An update
// touching more than max_rows rows at once is refused either way.
//
// Not thread-safe (thread-compatible): the owner (SparseShard) serialises
// every call.
#ifndef PSTRAIN_SERVER_SPARSE_TABLE_H_
#define PSTRAIN_SERVER_SPARSE_TABLE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "checkpoint/state.h"
#include "common/optimizer.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

struct SparseTableOptions {
  pstrain::v1::TensorSpec spec;  // row_sparse, shape [rows, dim]
  uint32_t shard_id = 0;
  uint32_t num_shards = 1;
  // Rows of this table stored on this shard at most; 0: no bound.
  uint64_t max_rows = 0;
  enum class OnFull { kEvict, kReject };
  OnFull on_full = OnFull::kEvict;
};

class SparseTable {
 public:
  // `optimizer` must outlive the table. INVALID_ARGUMENT for a spec that is
  // not row_sparse [rows >= 1, dim >= 1] or a bad shard id.
  static absl::StatusOr<std::unique_ptr<SparseTable>> Create(
      SparseTableOptions options, const Optimizer* optimizer);

  const std::string& name() const { return options_.spec.name(); }
  int64_t rows() const { return rows_; }
  int64_t dim() const { return dim_; }
  uint64_t max_rows() const { return options_.max_rows; }

  // OK when every id is a row of the table held by this shard and, with
  // `unique`, no id appears twice; else INVALID_ARGUMENT naming the tensor
  // and the first bad id.
  absl::Status CheckIds(absl::Span<const int64_t> ids, bool unique) const;
  // OK when an update touching `touched` distinct rows, `fresh` of them not
  // stored, fits the bound (kEvict: touched <= max_rows; kReject: stored +
  // fresh <= max_rows); else RESOURCE_EXHAUSTED naming the tensor, the rows
  // needed and the bound.
  absl::Status CheckFits(uint64_t touched, uint64_t fresh) const;
  // Rows not stored among `ids` (checked).
  uint64_t CountNew(absl::Span<const int64_t> ids) const;
  bool Stored(int64_t id) const { return rows_map_.count(id) != 0; }

  // Writes the current values of `ids` (checked) to out[ids.size() * dim]:
  // stored rows as they are (marked recently used), others their initial
  // values. Stores nothing.
  void Read(absl::Span<const int64_t> ids, float* out);
  // Runs the optimizer on each row of `ids` (checked, unique, CheckFits OK)
  // with gradient g[i * dim, (i + 1) * dim) for ids[i], at schedule step
  // `schedule_step` and rate scale `lr_scale` (Optimizer::Apply), creating
  // rows on first touch and evicting at the bound (above).
  // With `keep_previous` (mode sync: one Apply per step), the weights every
  // row whose read value the update changes (the rows it touches and the
  // rows it evicts) had before it are kept until the next such Apply, for
  // ReadPrevious; without, what was kept is dropped.
  void Apply(absl::Span<const int64_t> ids, const float* g,
             uint64_t schedule_step, double lr_scale,
             bool keep_previous = false);
  // Drops what the last Apply kept (a step that touched no row of the table
  // changes none of its reads).
  void ForgetPrevious() { previous_.clear(); }
  // As Read, the values before the last Apply with `keep_previous` (rows it
  // did not change read as they are now). Marks nothing as used: the read
  // the values belong to already did.
  void ReadPrevious(absl::Span<const int64_t> ids, float* out) const;

  size_t stored_rows() const { return rows_map_.size(); }
  uint64_t evicted_rows() const { return evicted_; }
  // Floats per stored row: dim * (1 + slots).
  uint64_t row_floats() const { return row_floats_; }

  // Every stored row, by increasing id.
  std::vector<SparseRowState> Export() const;
  // Replaces every row by `rows` (each of this table and shard, unique,
  // row_floats() floats, at most max_rows of them); INVALID_ARGUMENT naming
  // the tensor and the row changes nothing. Recency follows `rows`' order.
  absl::Status Import(const std::vector<SparseRowState>& rows);

 private:
  struct Row {
    std::vector<float> data;
    uint64_t updates = 0;
    std::list<int64_t>::iterator lru;
  };
  SparseTable(SparseTableOptions options, const Optimizer* optimizer,
              int64_t rows, int64_t dim);
  // `keep` records an evicted row's weights in previous_.
  Row& Materialise(int64_t id, bool keep = false);
  void KeepPrevious(int64_t id);
  void Touch(Row& row);

  const SparseTableOptions options_;
  const Optimizer* const optimizer_;
  const int64_t rows_;
  const int64_t dim_;
  const uint64_t row_floats_;
  std::vector<float> initial_slots_;  // one row's slots, fresh
  std::unordered_map<int64_t, Row> rows_map_;
  std::list<int64_t> lru_;  // least recently used first
  uint64_t evicted_ = 0;
  // ReadPrevious: by id, the weights before the last kept Apply (empty: the
  // row was not stored, it read as its initial value).
  std::unordered_map<int64_t, std::vector<float>> previous_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SPARSE_TABLE_H_
