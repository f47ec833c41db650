#include "worker/allreduce/row_replicas.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {

namespace {

// A float holds integers below 2^24 exactly: ids travel as 24-bit limbs,
// counts as single floats below that bound.
constexpr int kLimbBits = 24;
constexpr uint64_t kLimb = uint64_t{1} << kLimbBits;

int LimbsFor(int64_t rows) {
  int limbs = 1;
  for (uint64_t top = static_cast<uint64_t>(rows - 1) >> kLimbBits; top > 0;
       top >>= kLimbBits) {
    ++limbs;
  }
  return limbs;
}

// A float the ring summed from integers: the integer, or false.
bool AsCount(float v, uint64_t* out) {
  if (!(v >= 0) || v >= static_cast<float>(kLimb) || v != std::floor(v)) {
    return false;
  }
  *out = static_cast<uint64_t>(v);
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RowReplicas>> RowReplicas::Create(
    Model* model, const Optimizer* optimizer, Mode mode, int ranks, int rank) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of ", ranks, " ranks"));
  }
  std::unique_ptr<RowReplicas> r(new RowReplicas(model, mode, ranks, rank));
  uint64_t table_floats = 0;
  for (size_t t = 0; t < model->params().size(); ++t) {
    const pstrain::v1::TensorSpec& spec = model->params()[t];
    if (!spec.row_sparse()) continue;
    SparseTableOptions options;
    options.spec = spec;  // one shard of one: every row, no bound
    PS_ASSIGN_OR_RETURN(std::unique_ptr<SparseTable> replica,
                        SparseTable::Create(options, optimizer));
    Table table;
    table.tensor = static_cast<int>(t);
    table.rows = replica->rows();
    table.dim = replica->dim();
    table.limbs = LimbsFor(table.rows);
    table.replica = std::move(replica);
    table_floats += static_cast<uint64_t>(table.rows * table.dim);
    r->tables_.push_back(std::move(table));
  }
  if (r->tables_.empty()) return r;
  const uint64_t dense = static_cast<uint64_t>(model->num_dense_params());
  const uint64_t floats =
      mode == Mode::kDense
          ? dense + table_floats + 1
          : dense + 1 + static_cast<uint64_t>(ranks) * (1 + r->tables_.size());
  try {
    r->flat_.assign(floats, 0.0f);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "allreduce.sparse: dense needs a gradient buffer of ", floats,
        " floats (", floats * 4,
        " bytes) for the whole table; it could not "
        "be allocated (use allreduce.sparse: allgather or mode sync)"));
  }
  return r;
}

absl::Status RowReplicas::SetRows(
    const std::vector<std::vector<int64_t>>& ids) {
  for (size_t k = 0; k < tables_.size(); ++k) {
    Table& table = tables_[k];
    SparseRows rows;
    rows.ids = ids[k];
    rows.values.resize(rows.ids.size() * table.dim);
    PS_RETURN_IF_ERROR(table.replica->CheckIds(rows.ids, true));
    table.replica->Read(rows.ids, rows.values.data());
    PS_RETURN_IF_ERROR(model_->SetRows(table.tensor, std::move(rows)));
  }
  return absl::OkStatus();
}

absl::Status RowReplicas::SetStepRows(LocalStep* local, int64_t step) {
  std::vector<std::vector<int64_t>> ids(tables_.size());
  for (size_t k = 0; k < tables_.size(); ++k) {
    PS_ASSIGN_OR_RETURN(ids[k], local->StepRowIds(step, tables_[k].tensor));
  }
  return SetRows(ids);
}

absl::Status RowReplicas::SetTestRows(LocalStep* local) {
  std::vector<std::vector<int64_t>> ids(tables_.size());
  for (size_t k = 0; k < tables_.size(); ++k) {
    PS_ASSIGN_OR_RETURN(ids[k], local->TestRowIds(tables_[k].tensor));
  }
  return SetRows(ids);
}

absl::StatusOr<std::vector<float>> RowReplicas::ReadRows(
    int tensor, absl::Span<const int64_t> ids) {
  for (Table& table : tables_) {
    if (table.tensor != tensor) continue;
    PS_RETURN_IF_ERROR(table.replica->CheckIds(ids, false));
    std::vector<float> out(ids.size() * table.dim);
    table.replica->Read(ids, out.data());
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor ", tensor, " is not a row-sparse table"));
}

uint64_t RowReplicas::stored_rows() const {
  uint64_t n = 0;
  for (const Table& table : tables_) n += table.replica->stored_rows();
  return n;
}

absl::Status RowReplicas::Exchange(AllReducer* reducer, uint64_t step,
                                   uint64_t samples, HostBuffer* host) {
  const int64_t dense = model_->num_dense_params();
  DeviceBuffer* grad = model_->gradient();
  if (grad == nullptr || grad->size() < dense + 1 || host->size() < dense + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "row exchange: the model's gradient has ",
        grad == nullptr ? 0 : grad->size(), " floats on the backend and ",
        host->size(), " on the host, needs ", dense + 1));
  }
  for (const Table& table : tables_) {
    if (model_->row_gradient(table.tensor) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "row exchange: no row gradient for '",
          model_->params()[table.tensor].name(), "' after the step"));
    }
  }
  // The dense tensors' gradient times n, as AllReduceWeightedMeanOfModel.
  const float n = static_cast<float>(samples);
  PS_RETURN_IF_ERROR(model_->backend()->Scale(dense, n, grad));
  PS_RETURN_IF_ERROR(model_->backend()->CopyToHost(*grad, dense, flat_.data()));
  return mode_ == Mode::kDense ? ExchangeDense(reducer, step, n, host)
                               : ExchangeAllGather(reducer, step, n, host);
}

absl::Status RowReplicas::ExchangeDense(AllReducer* reducer, uint64_t step,
                                        float n, HostBuffer* host) {
  // [dense gradient * n | each table's [rows, dim] gradient * n | n]
  const int64_t dense = model_->num_dense_params();
  float* const tables = flat_.data() + dense;
  std::fill(tables, flat_.data() + flat_.size(), 0.0f);
  float* base = tables;
  for (const Table& table : tables_) {
    const SparseRows& g = *model_->row_gradient(table.tensor);
    for (size_t i = 0; i < g.ids.size(); ++i) {
      float* dst = base + g.ids[i] * table.dim;
      const float* src = &g.values[i * table.dim];
      for (int64_t c = 0; c < table.dim; ++c) dst[c] = src[c] * n;
    }
    base += table.rows * table.dim;
  }
  flat_.back() = n;
  PS_RETURN_IF_ERROR(reducer->SumInPlace(step, absl::MakeSpan(flat_)));
  const float all = flat_.back();
  if (!(all > 0)) {
    return absl::InternalError(
        absl::StrCat("all-reduced sample count is ", all));
  }
  float* out = host->data();
  for (int64_t k = 0; k < dense; ++k) out[k] = flat_[k] / all;
  out[dense] = all;
  // The rows some rank touched: those whose summed gradient is not zero.
  base = tables;
  std::vector<int64_t> ids;
  std::vector<float> g;
  for (Table& table : tables_) {
    ids.clear();
    g.clear();
    for (int64_t r = 0; r < table.rows; ++r) {
      const float* row = base + r * table.dim;
      if (std::all_of(row, row + table.dim, [](float v) { return v == 0; })) {
        continue;
      }
      ids.push_back(r);
      for (int64_t c = 0; c < table.dim; ++c) g.push_back(row[c] / all);
    }
    table.replica->Apply(ids, g.data(), step, 1.0);
    base += table.rows * table.dim;
  }
  return absl::OkStatus();
}

absl::Status RowReplicas::ExchangeAllGather(AllReducer* reducer, uint64_t step,
                                            float n, HostBuffer* host) {
  // [dense gradient * n | n | per rank: n_r, then each table's row count],
  // this rank's counts in its slot and zeros elsewhere: the sum gives every
  // rank every count (integers below 2^24, exact in fp32).
  const int64_t dense = model_->num_dense_params();
  const size_t per_rank = 1 + tables_.size();
  float* const counts = flat_.data() + dense + 1;
  std::fill(flat_.data() + dense, flat_.data() + flat_.size(), 0.0f);
  flat_[dense] = n;
  float* mine = counts + rank_ * per_rank;
  mine[0] = n;
  for (size_t k = 0; k < tables_.size(); ++k) {
    const size_t rows = model_->row_gradient(tables_[k].tensor)->ids.size();
    if (rows >= kLimb) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a step touched ", rows, " rows of '",
          model_->params()[tables_[k].tensor].name(),
          "'; allreduce.sparse: allgather takes at most 2^24 - 1 per rank"));
    }
    mine[1 + k] = static_cast<float>(rows);
  }
  PS_RETURN_IF_ERROR(reducer->SumInPlace(step, absl::MakeSpan(flat_)));
  const float all = flat_[dense];
  if (!(all > 0)) {
    return absl::InternalError(
        absl::StrCat("all-reduced sample count is ", all));
  }
  float* out = host->data();
  for (int64_t k = 0; k < dense; ++k) out[k] = flat_[k] / all;
  out[dense] = all;

  // Every rank's block: per table, its ids (limbs floats each) and then
  // its gradient rows.
  std::vector<uint64_t> samples(ranks_), sizes(ranks_, 0);
  std::vector<std::vector<uint64_t>> rows(
      ranks_, std::vector<uint64_t>(tables_.size()));
  for (int r = 0; r < ranks_; ++r) {
    const float* c = counts + r * per_rank;
    if (!AsCount(c[0], &samples[r])) {
      return absl::DataLossError(absl::StrCat(
          "all-gather: rank ", r, "'s sample count came as ", c[0]));
    }
    for (size_t k = 0; k < tables_.size(); ++k) {
      if (!AsCount(c[1 + k], &rows[r][k])) {
        return absl::DataLossError(absl::StrCat(
            "all-gather: rank ", r, "'s row count came as ", c[1 + k]));
      }
      sizes[r] += rows[r][k] * (tables_[k].limbs + tables_[k].dim);
    }
  }
  std::vector<uint64_t> offsets(ranks_ + 1, 0);
  for (int r = 0; r < ranks_; ++r) offsets[r + 1] = offsets[r] + sizes[r];
  gathered_.assign(offsets[ranks_], 0.0f);
  float* p = gathered_.data() + offsets[rank_];
  for (const Table& table : tables_) {
    const SparseRows& g = *model_->row_gradient(table.tensor);
    for (int64_t id : g.ids) {
      uint64_t v = static_cast<uint64_t>(id);
      for (int l = 0; l < table.limbs; ++l, v >>= kLimbBits) {
        *p++ = static_cast<float>(v & (kLimb - 1));
      }
    }
    p = std::copy(g.values.begin(), g.values.end(), p);
  }
  PS_RETURN_IF_ERROR(
      reducer->AllGather(step, sizes, absl::MakeSpan(gathered_)));

  // A sync shard's commit (server/sparse_shard.cc): in double, rank by
  // rank, n_r times each of its rows, then divided by the step's samples.
  double total = 0;
  for (uint64_t s : samples) total += static_cast<double>(s);
  std::vector<const float*> at(ranks_);
  for (int r = 0; r < ranks_; ++r) at[r] = gathered_.data() + offsets[r];
  for (size_t k = 0; k < tables_.size(); ++k) {
    Table& table = tables_[k];
    std::vector<std::vector<int64_t>> block_ids(ranks_);
    std::vector<int64_t> ids;
    for (int r = 0; r < ranks_; ++r) {
      for (uint64_t i = 0; i < rows[r][k]; ++i) {
        uint64_t id = 0;
        for (int l = table.limbs - 1; l >= 0; --l) {
          uint64_t limb = 0;
          if (!AsCount(at[r][i * table.limbs + l], &limb)) {
            return absl::DataLossError(absl::StrCat(
                "all-gather: rank ", r, "'s row id ", i, " of '",
                model_->params()[table.tensor].name(), "' is not an id"));
          }
          id = (id << kLimbBits) | limb;
        }
        block_ids[r].push_back(static_cast<int64_t>(id));
      }
      absl::Status valid = table.replica->CheckIds(block_ids[r], true);
      if (!valid.ok()) {
        return absl::DataLossError(absl::StrCat("all-gather: rank ", r,
                                                "'s block: ", valid.message()));
      }
      ids.insert(ids.end(), block_ids[r].begin(), block_ids[r].end());
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    absl::flat_hash_map<int64_t, size_t> index;
    index.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
    const int64_t dim = table.dim;
    std::vector<double> sum(ids.size() * dim, 0.0);
    for (int r = 0; r < ranks_; ++r) {
      const double nr = static_cast<double>(samples[r]);
      const float* values = at[r] + rows[r][k] * table.limbs;
      for (size_t i = 0; i < block_ids[r].size(); ++i) {
        double* dst = &sum[index[block_ids[r][i]] * dim];
        const float* src = values + i * dim;
        for (int64_t c = 0; c < dim; ++c) dst[c] += nr * src[c];
      }
      at[r] = values + rows[r][k] * dim;  // the next table's part
    }
    std::vector<float> g(sum.size());
    for (size_t i = 0; i < sum.size(); ++i) {
      g[i] = total > 0 ? static_cast<float>(sum[i] / total) : 0.0f;
    }
    table.replica->Apply(ids, g.data(), step, 1.0);
  }
  return absl::OkStatus();
}

}  // namespace pstrain
