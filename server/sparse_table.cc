#include "server/sparse_table.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/client_text.h"
#include "common/model_spec.h"
#include "common/sparse_rows.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<SparseTable>> SparseTable::Create(
    SparseTableOptions options, const Optimizer* optimizer) {
  if (!options.spec.row_sparse()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", EchoClientText(options.spec.name()),
                     "' is not row_sparse"));
  }
  absl::StatusOr<TableShape> shape = RowSparseShape(options.spec);
  if (!shape.ok()) return shape.status();
  if (options.num_shards == 0 || options.shard_id >= options.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard id ", options.shard_id, " >= num_servers ", options.num_shards));
  }
  if (optimizer == nullptr) {
    return absl::InvalidArgumentError("sparse table without an optimizer");
  }
  return std::unique_ptr<SparseTable>(
      new SparseTable(std::move(options), optimizer, shape->rows, shape->dim));
}

SparseTable::SparseTable(SparseTableOptions options, const Optimizer* optimizer,
                         int64_t rows, int64_t dim)
    : options_(std::move(options)),
      optimizer_(optimizer),
      rows_(rows),
      dim_(dim),
      row_floats_(static_cast<uint64_t>(dim) *
                  (1 + static_cast<uint64_t>(optimizer->num_slots()))),
      initial_slots_(optimizer->InitSlots(static_cast<size_t>(dim))) {}

absl::Status SparseTable::CheckIds(absl::Span<const int64_t> ids,
                                   bool unique) const {
  for (int64_t id : ids) {
    if (id < 0 || id >= rows_) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", EchoClientText(name()), "': row id ", id,
                       " is outside the table [0, ", rows_, ")"));
    }
    if (RowShard(id, options_.num_shards) != options_.shard_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", EchoClientText(name()), "': row ", id,
                       " belongs to shard ", RowShard(id, options_.num_shards),
                       ", not to shard ", options_.shard_id));
    }
  }
  if (unique) {
    absl::flat_hash_set<int64_t> seen;
    seen.reserve(ids.size());
    for (int64_t id : ids) {
      if (!seen.insert(id).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", EchoClientText(name()), "': row id ", id,
                         " appears more than once in one push"));
      }
    }
  }
  return absl::OkStatus();
}

uint64_t SparseTable::CountNew(absl::Span<const int64_t> ids) const {
  uint64_t n = 0;
  for (int64_t id : ids) n += rows_map_.count(id) == 0 ? 1 : 0;
  return n;
}

absl::Status SparseTable::CheckFits(uint64_t touched, uint64_t fresh) const {
  const uint64_t bound = options_.max_rows;
  if (bound == 0) return absl::OkStatus();
  const bool reject = options_.on_full == SparseTableOptions::OnFull::kReject;
  // kEvict can make room by dropping rows the update does not touch, so only
  // the rows the update itself needs count; kReject keeps every stored row.
  const uint64_t needed = reject ? rows_map_.size() + fresh : touched;
  if (needed <= bound) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("tensor '", EchoClientText(name()), "': the update needs ",
                   needed, " rows stored on shard ", options_.shard_id,
                   ", above the bound of ", bound, " (server.sparse_max_rows",
                   reject ? ", server.sparse_on_full: reject)" : ")"));
}

void SparseTable::Touch(Row& row) { lru_.splice(lru_.end(), lru_, row.lru); }

void SparseTable::KeepPrevious(int64_t id) {
  if (previous_.count(id) != 0) return;
  auto it = rows_map_.find(id);
  std::vector<float>& kept = previous_[id];
  if (it != rows_map_.end()) {
    kept.assign(it->second.data.begin(), it->second.data.begin() + dim_);
  }
}

SparseTable::Row& SparseTable::Materialise(int64_t id, bool keep) {
  auto it = rows_map_.find(id);
  if (it != rows_map_.end()) {
    Touch(it->second);
    return it->second;
  }
  while (options_.max_rows > 0 && rows_map_.size() >= options_.max_rows &&
         !lru_.empty()) {
    if (keep) KeepPrevious(lru_.front());
    rows_map_.erase(lru_.front());
    lru_.pop_front();
    ++evicted_;
  }
  Row& row = rows_map_[id];
  row.data.resize(row_floats_);
  InitialValues(options_.spec, static_cast<uint64_t>(id) * dim_, dim_,
                row.data.data());
  std::copy(initial_slots_.begin(), initial_slots_.end(),
            row.data.begin() + dim_);
  row.lru = lru_.insert(lru_.end(), id);
  return row;
}

void SparseTable::Read(absl::Span<const int64_t> ids, float* out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    float* dst = out + i * dim_;
    auto it = rows_map_.find(ids[i]);
    if (it != rows_map_.end()) {
      std::copy(it->second.data.begin(), it->second.data.begin() + dim_, dst);
      Touch(it->second);
    } else {
      InitialValues(options_.spec, static_cast<uint64_t>(ids[i]) * dim_, dim_,
                    dst);
    }
  }
}

void SparseTable::ReadPrevious(absl::Span<const int64_t> ids,
                               float* out) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    float* dst = out + i * dim_;
    const std::vector<float>* before = nullptr;
    if (auto p = previous_.find(ids[i]); p != previous_.end()) {
      before = &p->second;
    }
    auto it = rows_map_.find(ids[i]);
    if (before != nullptr && !before->empty()) {
      std::copy(before->begin(), before->end(), dst);
    } else if (before == nullptr && it != rows_map_.end()) {
      std::copy(it->second.data.begin(), it->second.data.begin() + dim_, dst);
    } else {
      InitialValues(options_.spec, static_cast<uint64_t>(ids[i]) * dim_, dim_,
                    dst);
    }
  }
}

void SparseTable::Apply(absl::Span<const int64_t> ids, const float* g,
                        uint64_t schedule_step, double lr_scale,
                        bool keep_previous) {
  previous_.clear();
  if (keep_previous) {
    for (int64_t id : ids) KeepPrevious(id);
  }
  // Rows the update touches become the most recently used first, so an
  // eviction below never drops one of them (CheckFits: they fit).
  for (int64_t id : ids) {
    auto it = rows_map_.find(id);
    if (it != rows_map_.end()) Touch(it->second);
  }
  const bool has_slots = optimizer_->num_slots() > 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    Row& row = Materialise(ids[i], keep_previous);
    float* w = row.data.data();
    optimizer_->Apply(schedule_step, row.updates, w, g + i * dim_,
                      has_slots ? w + dim_ : nullptr, dim_, lr_scale, dim_);
    ++row.updates;
  }
}

std::vector<SparseRowState> SparseTable::Export() const {
  std::vector<SparseRowState> out;
  out.reserve(rows_map_.size());
  for (const auto& [id, row] : rows_map_) {
    out.push_back(SparseRowState{id, row.updates, row.data});
  }
  std::sort(out.begin(), out.end(),
            [](const SparseRowState& a, const SparseRowState& b) {
              return a.id < b.id;
            });
  return out;
}

absl::Status SparseTable::Import(const std::vector<SparseRowState>& rows) {
  if (options_.max_rows > 0 && rows.size() > options_.max_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", EchoClientText(name()), "': ", rows.size(),
        " rows to restore on shard ", options_.shard_id, ", above the bound ",
        options_.max_rows, " (server.sparse_max_rows)"));
  }
  std::vector<int64_t> ids;
  ids.reserve(rows.size());
  for (const SparseRowState& r : rows) {
    if (r.data.size() != row_floats_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", EchoClientText(name()), "': row ", r.id, " has ",
          r.data.size(), " floats, expected ", row_floats_));
    }
    ids.push_back(r.id);
  }
  if (absl::Status st = CheckIds(ids, /*unique=*/true); !st.ok()) return st;
  rows_map_.clear();
  lru_.clear();
  previous_.clear();
  for (const SparseRowState& r : rows) {
    Row& row = rows_map_[r.id];
    row.data = r.data;
    row.updates = r.updates;
    row.lru = lru_.insert(lru_.end(), r.id);
  }
  return absl::OkStatus();
}

}  // namespace pstrain
