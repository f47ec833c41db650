#include "server/sparse_shard.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/client_text.h"
#include "common/sparse_rows.h"
#include "common/tensor_codec.h"

namespace pstrain {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) { return SplitMix64(h ^ SplitMix64(v)); }

uint64_t HashBytes(const std::string& s) {
  return absl::Hash<absl::string_view>()(s);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SparseShard>> SparseShard::Create(
    SparseShardOptions options) {
  if (options.rule.backup_workers > 0 || options.rule.dc_lambda != 0) {
    bool any = false;
    for (const auto& t : options.tensors) any = any || t.row_sparse();
    if (any) {
      return absl::InvalidArgumentError(
          "row-sparse tensors do not support training.backup_workers or "
          "training.dc_lambda");
    }
  }
  absl::StatusOr<std::unique_ptr<ConsistencyRule>> rule =
      MakeConsistencyRule(options.rule);
  if (!rule.ok()) return rule.status();
  if (!IsWireDtype(options.wire_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("wire dtype ", DtypeName(options.wire_dtype),
                     " is not one of DTYPE_F32, DTYPE_BF16, DTYPE_F16"));
  }
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      Optimizer::Create(options.optimizer);
  if (!optimizer.ok()) return optimizer.status();
  std::unique_ptr<SparseShard> shard(new SparseShard(std::move(options)));
  shard->rule_ = std::move(*rule);
  shard->optimizer_ = std::move(*optimizer);
  absl::MutexLock lock(&shard->mu_);
  for (const auto& spec : shard->options_.tensors) {
    if (!spec.row_sparse()) continue;
    SparseTableOptions t;
    t.spec = spec;
    t.shard_id = shard->options_.shard_id;
    t.num_shards = shard->options_.num_shards;
    t.max_rows = shard->options_.max_rows;
    t.on_full = shard->options_.on_full;
    absl::StatusOr<std::unique_ptr<SparseTable>> table =
        SparseTable::Create(std::move(t), shard->optimizer_.get());
    if (!table.ok()) return table.status();
    if (shard->TableIndex(spec.name()) >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("row-sparse tensor '", EchoClientText(spec.name()),
                       "' is listed twice"));
    }
    shard->names_.push_back(spec.name());
    shard->dims_.push_back((*table)->dim());
    shard->table_rows_.push_back((*table)->rows());
    shard->tables_.push_back(std::move(*table));
  }
  const uint32_t n = shard->options_.rule.num_workers;
  shard->clocks_.assign(n, 0);
  shard->last_push_.resize(n);
  shard->prior_push_.resize(n);
  shard->pending_.resize(n);
  return shard;
}

SparseShard::SparseShard(SparseShardOptions options)
    : options_(std::move(options)) {}

int SparseShard::TableIndex(const std::string& tensor) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == tensor) return static_cast<int>(i);
  }
  return -1;
}

namespace {

// The rows of one table (rows, dim) on shard `shard` of `shards`: the
// checks every piece's ids get.
absl::Status CheckIdsOf(const std::string& tensor, int64_t rows, uint32_t shard,
                        uint32_t shards, absl::Span<const int64_t> ids) {
  for (int64_t id : ids) {
    if (id < 0 || id >= rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", EchoClientText(tensor), "': row id ", id,
                       " is outside the table [0, ", rows, ")"));
    }
    if (RowShard(id, shards) != shard) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", EchoClientText(tensor), "': row ", id,
                       " belongs to shard ", RowShard(id, shards),
                       ", not to shard ", shard));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RowPush> SparseShard::DecodePush(
    const std::vector<pstrain::v1::PushRowsRequest>& messages) const {
  if (messages.empty() || !messages[0].has_header()) {
    return absl::InvalidArgumentError(
        "row push without a header in its first message");
  }
  RowPush push;
  push.header = messages[0].header();
  const uint32_t w = push.header.worker();
  if (w >= options_.rule.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("row push from worker ", w, ", the job has ",
                     options_.rule.num_workers, " workers"));
  }
  const uint64_t element_bytes = WireElementBytes(options_.wire_dtype);
  uint64_t bytes = 0;
  std::vector<int> block_of(names_.size(), -1);
  std::vector<absl::flat_hash_set<int64_t>> seen(names_.size());
  uint64_t fp = Mix(Mix(push.header.clock(), push.header.num_samples()),
                    push.header.read_min_clock());
  for (size_t m = 0; m < messages.size(); ++m) {
    if (m > 0 && messages[m].has_header()) {
      return absl::InvalidArgumentError(
          absl::StrCat("row push message ", m, " carries a second header"));
    }
    for (const pstrain::v1::SparseRows& piece : messages[m].rows()) {
      bytes += piece.ids().size() + piece.values().size();
      if (bytes > options_.max_push_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("row push over ", options_.max_push_bytes,
                         " bytes of ids and values (tensor '",
                         EchoClientText(piece.tensor()), "')"));
      }
      const int t = TableIndex(piece.tensor());
      if (t < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "row push names tensor '", EchoClientText(piece.tensor()),
            "', not a row-sparse tensor of the job"));
      }
      const std::string& name = names_[t];
      const int64_t dim = dims_[t];
      if (piece.dtype() != options_.wire_dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", name, "': dtype ", DtypeName(piece.dtype()),
            " does not match the job's wire dtype ",
            DtypeName(options_.wire_dtype), " (network.wire_dtype)"));
      }
      if (piece.dim() != static_cast<uint64_t>(dim)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", name, "': rows of width ", piece.dim(),
                         ", the table's rows have ", dim, " elements"));
      }
      absl::StatusOr<std::vector<int64_t>> ids =
          DecodeRowIds(piece.ids(), name);
      if (!ids.ok()) return ids.status();
      const uint64_t expected = ids->size() * dim * element_bytes;
      if (piece.values().size() != expected) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", name, "': ", piece.values().size(),
                         " bytes of values for ", ids->size(), " rows of ", dim,
                         " ", DtypeName(options_.wire_dtype), " elements (",
                         expected, " bytes)"));
      }
      if (absl::Status st = CheckIdsOf(name, table_rows_[t], options_.shard_id,
                                       options_.num_shards, *ids);
          !st.ok()) {
        return st;
      }
      for (int64_t id : *ids) {
        if (!seen[t].insert(id).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("tensor '", name, "': row id ", id,
                           " appears more than once in one push"));
        }
      }
      if (block_of[t] < 0) {
        block_of[t] = static_cast<int>(push.blocks.size());
        push.blocks.push_back(RowBlock{static_cast<size_t>(t), {}, {}});
      }
      RowBlock& block = push.blocks[block_of[t]];
      const size_t at = block.values.size();
      block.values.resize(at + ids->size() * dim);
      if (!ids->empty()) {  // an empty piece has no buffer to decode into
        DecodeElements(options_.wire_dtype, piece.values().data(),
                       ids->size() * dim, block.values.data() + at);
      }
      for (size_t i = at; i < block.values.size(); ++i) {
        if (!std::isfinite(block.values[i])) {
          const size_t row = (i - at) / dim;
          return absl::InvalidArgumentError(absl::StrCat(
              "tensor '", name, "': row ", (*ids)[row], " element ",
              (i - at) % dim, " is not finite (", block.values[i], ")"));
        }
      }
      block.ids.insert(block.ids.end(), ids->begin(), ids->end());
      push.rows += ids->size();
      fp = Mix(Mix(fp, t),
               Mix(HashBytes(piece.ids()), HashBytes(piece.values())));
    }
  }
  push.fingerprint = fp;
  return push;
}

absl::StatusOr<std::vector<RowBlock>> SparseShard::DecodePull(
    const pstrain::v1::PullRowsRequest& request) const {
  std::vector<RowBlock> blocks;
  for (const pstrain::v1::SparseRows& piece : request.rows()) {
    const int t = TableIndex(piece.tensor());
    if (t < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row pull names tensor '", EchoClientText(piece.tensor()),
          "', not a row-sparse tensor of the job"));
    }
    const std::string& name = names_[t];
    if (!piece.values().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "': a row pull request carries values"));
    }
    if (piece.dim() != 0 && piece.dim() != static_cast<uint64_t>(dims_[t])) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': rows of width ", piece.dim(),
                       ", the table's rows have ", dims_[t], " elements"));
    }
    absl::StatusOr<std::vector<int64_t>> ids = DecodeRowIds(piece.ids(), name);
    if (!ids.ok()) return ids.status();
    if (absl::Status st = CheckIdsOf(name, table_rows_[t], options_.shard_id,
                                     options_.num_shards, *ids);
        !st.ok()) {
      return st;
    }
    blocks.push_back(RowBlock{static_cast<size_t>(t), std::move(*ids), {}});
  }
  return blocks;
}

ShardProgress SparseShard::ProgressLocked() const {
  ShardProgress p;
  p.version = version_;
  p.min_clock = MinClockLocked();
  p.next_cut = NextCutLocked(p.min_clock);
  return p;
}

uint64_t SparseShard::MinClockLocked() const {
  return clocks_.empty() ? 0
                         : *std::min_element(clocks_.begin(), clocks_.end());
}

uint64_t SparseShard::NextCutLocked(uint64_t min_clock) const {
  if (!rule_->HoldsReadsAtCuts()) return 0;
  uint64_t next = 0;
  auto consider = [&](uint64_t cut) {
    // The final cut needs no hold: no push of clock training.steps exists.
    if (cut > min_clock && cut != standing_last_ && (next == 0 || cut < next)) {
      next = cut;
    }
  };
  if (standing_every_ > 0 && standing_max_held_ > 0) {
    consider((min_clock / standing_every_ + 1) * standing_every_);
  }
  for (uint64_t cut : waiting_cuts_) consider(cut);
  for (uint64_t cut : ordered_cuts_) consider(cut);
  return next;
}

CutProgress SparseShard::CutProgressLocked() const {
  CutProgress p;
  p.version = version_;
  p.step_open = recorded_ > 0;
  p.min_clock = MinClockLocked();
  if (!clocks_.empty()) {
    const auto [lowest, highest] =
        std::minmax_element(clocks_.begin(), clocks_.end());
    p.lowest_clock = *lowest;
    p.highest_clock = *highest;
  }
  return p;
}

bool SparseShard::AtCutLocked(uint64_t cut) const {
  return rule_->AtCut(cut, CutProgressLocked());
}

bool SparseShard::PastCutLocked(uint64_t cut) const {
  return rule_->PastCut(cut, CutProgressLocked());
}

void SparseShard::ServeHeldCutsLocked() {
  const uint64_t v = rule_->ReachedCut(CutProgressLocked());
  if (v == 0 || !AtCutLocked(v)) return;
  const bool standing = ordered_cuts_.count(v) > 0 ||
                        (standing_max_held_ > 0 &&
                         (v == standing_last_ ||
                          (standing_every_ > 0 && v % standing_every_ == 0)));
  if ((standing || waiting_cuts_.count(v) > 0) && held_.count(v) == 0) {
    held_[v] = CaptureLocked();
    while (held_.size() > std::max<size_t>(standing_max_held_, 1) &&
           held_.begin()->first < v) {
      held_.erase(held_.begin());
    }
  }
  for (auto it = ordered_cuts_.begin(); it != ordered_cuts_.end();) {
    it = *it <= v ? ordered_cuts_.erase(it) : ++it;
  }
}

absl::Status SparseShard::CheckFitsLocked(const RowPush& push) const {
  for (const RowBlock& b : push.blocks) {
    const SparseTable& table = *tables_[b.table];
    absl::flat_hash_set<int64_t> touched(b.ids.begin(), b.ids.end());
    for (const auto& p : pending_) {
      if (p == nullptr) continue;
      for (const RowBlock& o : p->blocks) {
        if (o.table == b.table) touched.insert(o.ids.begin(), o.ids.end());
      }
    }
    uint64_t fresh = 0;
    for (int64_t id : touched) fresh += table.Stored(id) ? 0 : 1;
    if (absl::Status st = table.CheckFits(touched.size(), fresh); !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

void SparseShard::ApplyPushLocked(const RowPush& push, uint64_t step,
                                  double lr_scale) {
  for (const RowBlock& b : push.blocks) {
    tables_[b.table]->Apply(b.ids, b.values.data(), step, lr_scale);
  }
}

void SparseShard::CommitStepLocked() {
  double samples = 0;
  for (const auto& p : pending_) {
    if (p != nullptr) samples += static_cast<double>(p->header.num_samples());
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    const int64_t dim = dims_[t];
    std::vector<int64_t> ids;
    for (const auto& p : pending_) {
      if (p == nullptr) continue;
      for (const RowBlock& b : p->blocks) {
        if (b.table == t) ids.insert(ids.end(), b.ids.begin(), b.ids.end());
      }
    }
    if (ids.empty()) {
      tables_[t]->ForgetPrevious();
      continue;
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    absl::flat_hash_map<int64_t, size_t> at;
    at.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) at[ids[i]] = i;
    std::vector<double> sum(ids.size() * dim, 0.0);
    // Rank order: the same sum whatever the order the pushes arrived in.
    for (const auto& p : pending_) {
      if (p == nullptr) continue;
      const double n = static_cast<double>(p->header.num_samples());
      for (const RowBlock& b : p->blocks) {
        if (b.table != t) continue;
        for (size_t i = 0; i < b.ids.size(); ++i) {
          double* dst = &sum[at[b.ids[i]] * dim];
          const float* g = &b.values[i * dim];
          for (int64_t c = 0; c < dim; ++c) dst[c] += n * g[c];
        }
      }
    }
    std::vector<float> g(sum.size());
    for (size_t i = 0; i < sum.size(); ++i) {
      g[i] = samples > 0 ? static_cast<float>(sum[i] / samples) : 0.0f;
    }
    tables_[t]->Apply(ids, g.data(), version_, 1.0, /*keep_previous=*/true);
  }
  previous_held_ = true;
  for (auto& p : pending_) p.reset();
  recorded_ = 0;
  ++version_;
  if (standing_max_held_ > 0 &&
      ((standing_every_ > 0 && version_ % standing_every_ == 0) ||
       version_ == standing_last_)) {
    held_[version_] = CaptureLocked();
    while (held_.size() > standing_max_held_) held_.erase(held_.begin());
  }
}

SparseShardState SparseShard::CaptureLocked() const {
  SparseShardState s;
  s.version = version_;
  s.clocks = clocks_;
  for (size_t t = 0; t < tables_.size(); ++t) {
    s.tensors.push_back(names_[t]);
    s.rows.push_back(tables_[t]->Export());
  }
  return s;
}

void SparseShard::SetStandingCuts(uint64_t every, uint64_t last,
                                  size_t max_held) {
  absl::MutexLock lock(&mu_);
  standing_every_ = every;
  standing_last_ = last;
  standing_max_held_ = max_held;
}

absl::StatusOr<SparseShardState> SparseShard::SnapshotAt(uint64_t cut,
                                                         absl::Time deadline) {
  if (rule_->HoldsReadsAtCuts()) return SnapshotAtHeldCut(cut, deadline);
  absl::MutexLock lock(&mu_);
  // Reads already stop at the cut (Bsp: a step boundary): wait until the
  // rows are at it or have left it behind.
  auto decided = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const CutProgress p = CutProgressLocked();
    return closed_ || held_.count(cut) > 0 || rule_->AtCut(cut, p) ||
           rule_->ReachedCut(p) > cut;
  };
  mu_.AwaitWithDeadline(absl::Condition(&decided), deadline);
  if (auto it = held_.find(cut); it != held_.end()) {
    SparseShardState s = std::move(it->second);
    held_.erase(it);
    return s;
  }
  if (closed_) return absl::UnavailableError("shard closed");
  if (AtCutLocked(cut)) return CaptureLocked();
  if (PastCutLocked(cut)) {
    return absl::FailedPreconditionError(
        absl::StrCat("rows are past cut ", cut, " (row step ", version_,
                     recorded_ > 0 ? " has pushes recorded)" : ")"));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "rows did not reach cut ", cut, " (row step ", version_, ")"));
}

void SparseShard::OrderCut(uint64_t cut) {
  if (!rule_->HoldsReadsAtCuts()) return;
  absl::MutexLock lock(&mu_);
  if (held_.count(cut) == 0 && !PastCutLocked(cut) && !AtCutLocked(cut)) {
    ordered_cuts_.insert(cut);
  }
}

absl::StatusOr<SparseShardState> SparseShard::SnapshotAtHeldCut(
    uint64_t cut, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto take = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                  mu_) -> std::optional<SparseShardState> {
    if (auto it = held_.find(cut); it != held_.end()) {
      SparseShardState s = std::move(it->second);
      held_.erase(it);
      return s;
    }
    if (AtCutLocked(cut)) return CaptureLocked();
    return std::nullopt;
  };
  if (closed_) return absl::UnavailableError("shard closed");
  if (std::optional<SparseShardState> s = take()) return std::move(*s);
  auto past = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rows are past cut ", cut, " (row clocks ", absl::StrJoin(clocks_, ","),
        "): the workers must stop before pushing that clock"));
  };
  if (PastCutLocked(cut)) return past();
  // Held from now on: reads at clocks >= cut wait for every worker to reach
  // it, and the push that completes it captures it (ServeHeldCutsLocked).
  waiting_cuts_.insert(cut);
  auto decided = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || held_.count(cut) > 0 || AtCutLocked(cut) ||
           PastCutLocked(cut);
  };
  mu_.AwaitWithDeadline(absl::Condition(&decided), deadline);
  waiting_cuts_.erase(waiting_cuts_.find(cut));
  if (closed_) return absl::UnavailableError("shard closed");
  if (std::optional<SparseShardState> s = take()) return std::move(*s);
  if (PastCutLocked(cut)) return past();
  ordered_cuts_.insert(cut);  // still held; captured when reached
  std::string behind;
  for (size_t w = 0; w < clocks_.size(); ++w) {
    if (clocks_[w] < cut) {
      absl::StrAppend(&behind, behind.empty() ? "" : ", ", w, "@", clocks_[w]);
    }
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "rows did not reach cut ", cut, "; behind (worker@clock): ", behind));
}

absl::StatusOr<RowPushResult> SparseShard::Push(RowPush push) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("shard closed");
  const pstrain::v1::PushHeader& h = push.header;
  const uint32_t w = h.worker();
  if (w >= clocks_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("row push from worker ", w,
                                                   ", the job has ",
                                                   clocks_.size(), " workers"));
  }
  for (const LastPush* last : {&last_push_[w], &prior_push_[w]}) {
    if (last->valid && last->clock == h.clock()) {
      if (last->fingerprint == push.fingerprint) return last->result;
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", w, "'s row push for clock ", h.clock(),
                       " was already accepted with other contents"));
    }
  }
  if (h.clock() != clocks_[w]) {
    return absl::FailedPreconditionError(
        absl::StrCat("row push of worker ", w, " for clock ", h.clock(),
                     ", its next clock on this shard is ", clocks_[w]));
  }
  const uint64_t staleness =
      h.clock() >= h.read_min_clock() ? h.clock() - h.read_min_clock() : 0;
  absl::StatusOr<PushDecision> decision =
      rule_->OnPush(h.clock(), staleness, ProgressLocked());
  if (!decision.ok()) return decision.status();
  if (absl::Status st = CheckFitsLocked(push); !st.ok()) return st;

  RowPushResult result;
  result.staleness = staleness;
  result.rows = push.rows;
  // Kept apart: a sync push moves into pending_ (and `h` with it).
  const uint64_t fingerprint = push.fingerprint;
  const uint64_t clock = h.clock();
  switch (decision->action) {
    case PushDecision::Action::kRecord:
      pending_[w] = std::make_unique<RowPush>(std::move(push));
      ++recorded_;
      ++clocks_[w];
      if (rule_->StepComplete(recorded_)) {
        CommitStepLocked();
        result.applied = true;
      }
      break;
    case PushDecision::Action::kApply:
      ApplyPushLocked(push, decision->schedule_step, decision->lr_scale);
      ++version_;
      ++clocks_[w];
      result.applied = true;
      ServeHeldCutsLocked();
      break;
    case PushDecision::Action::kDrop:  // backup workers: refused at Create
      return absl::InternalError("row push dropped");
  }
  result.version = version_;
  prior_push_[w] = last_push_[w];
  last_push_[w] = LastPush{true, clock, fingerprint, result};
  return result;
}

absl::StatusOr<RowPullResult> SparseShard::Pull(uint32_t worker, uint64_t clock,
                                                std::vector<RowBlock> blocks,
                                                absl::Time deadline) {
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  if (worker >= clocks_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("row pull from worker ",
                                                   worker, ", the job has ",
                                                   clocks_.size(), " workers"));
  }
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || rule_->Readable(clock, ProgressLocked());
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (closed_) return absl::UnavailableError("shard closed");
  const ShardProgress p = ProgressLocked();
  if (!rule_->Readable(clock, p)) {
    const uint64_t need = rule_->RequiredClock(clock, p);
    std::string laggards;
    for (size_t w = 0; w < clocks_.size(); ++w) {
      if (clocks_[w] < need) {
        absl::StrAppend(&laggards, laggards.empty() ? "" : ", ", w, "@",
                        clocks_[w]);
      }
    }
    return absl::DeadlineExceededError(
        absl::StrCat("row pull at clock ", clock, " waited for row pushes of ",
                     "clock ", need, " from workers ", laggards));
  }
  // A stand-in's re-computation of a step that already committed here (see
  // the top of sparse_shard.h): the rows of version `clock`.
  const bool previous = rule_->ReadsBeforeCompletedStep(clock, p);
  if (previous && !previous_held_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "row pull at clock ", clock, ": the rows of version ", clock,
        " are no longer held (row step ", version_, " was restored)"));
  }
  RowPullResult result;
  result.version = previous ? clock : version_;
  ShardProgress read = p;
  read.version = result.version;
  result.min_clock = rule_->ReadMinClock(clock, read);
  result.wait_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (RowBlock& b : blocks) {
    b.values.resize(b.ids.size() * dims_[b.table]);
    if (previous) {
      tables_[b.table]->ReadPrevious(b.ids, b.values.data());
    } else {
      tables_[b.table]->Read(b.ids, b.values.data());
    }
  }
  result.blocks = std::move(blocks);
  return result;
}

void SparseShard::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

uint64_t SparseShard::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

std::vector<uint64_t> SparseShard::clocks() const {
  absl::MutexLock lock(&mu_);
  return clocks_;
}

size_t SparseShard::stored_rows(size_t table) const {
  absl::MutexLock lock(&mu_);
  return tables_[table]->stored_rows();
}

uint64_t SparseShard::evicted_rows(size_t table) const {
  absl::MutexLock lock(&mu_);
  return tables_[table]->evicted_rows();
}

absl::StatusOr<SparseShardState> SparseShard::Snapshot() const {
  absl::MutexLock lock(&mu_);
  if (recorded_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "row step ", version_, " has ", recorded_, " pushes pending"));
  }
  return CaptureLocked();
}

absl::Status SparseShard::Restore(const SparseShardState& state) {
  absl::MutexLock lock(&mu_);
  if (state.tensors != names_ || state.rows.size() != names_.size()) {
    return absl::InvalidArgumentError(
        "row state's tensors are not this shard's row-sparse tensors");
  }
  if (state.clocks.size() != clocks_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("row state has ", state.clocks.size(),
                     " worker clocks, the job has ", clocks_.size()));
  }
  // Every table is rebuilt aside first, so a bad row changes nothing.
  std::vector<std::unique_ptr<SparseTable>> fresh;
  size_t t = 0;
  for (const auto& spec : options_.tensors) {
    if (!spec.row_sparse()) continue;
    SparseTableOptions o;
    o.spec = spec;
    o.shard_id = options_.shard_id;
    o.num_shards = options_.num_shards;
    o.max_rows = options_.max_rows;
    o.on_full = options_.on_full;
    absl::StatusOr<std::unique_ptr<SparseTable>> table =
        SparseTable::Create(std::move(o), optimizer_.get());
    if (!table.ok()) return table.status();
    if (absl::Status st = (*table)->Import(state.rows[t]); !st.ok()) return st;
    fresh.push_back(std::move(*table));
    ++t;
  }
  tables_ = std::move(fresh);
  version_ = state.version;
  clocks_ = state.clocks;
  for (auto& l : last_push_) l = LastPush{};
  for (auto& l : prior_push_) l = LastPush{};
  previous_held_ = false;
  for (auto& p : pending_) p.reset();
  recorded_ = 0;
  held_.clear();
  ordered_cuts_.clear();
  return absl::OkStatus();
}

absl::StatusOr<SparseShardState> ReshardSparseState(
    const std::vector<SparseShardState>& from, uint32_t shard_id,
    uint32_t num_shards) {
  if (from.empty()) {
    return absl::InvalidArgumentError("resharding rows of no shard");
  }
  if (num_shards == 0 || shard_id >= num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard id ", shard_id, " >= num_servers ", num_shards));
  }
  SparseShardState out;
  out.version = from[0].version;
  out.clocks = from[0].clocks;
  out.tensors = from[0].tensors;
  out.rows.resize(out.tensors.size());
  for (size_t k = 0; k < from.size(); ++k) {
    const SparseShardState& s = from[k];
    if (s.version != out.version || s.clocks != out.clocks ||
        s.tensors != out.tensors || s.rows.size() != out.tensors.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row state of old shard ", k,
          " is not at the same cut (version, clocks, tensors) as shard 0's"));
    }
    for (size_t t = 0; t < s.rows.size(); ++t) {
      for (const SparseRowState& r : s.rows[t]) {
        if (RowShard(r.id, num_shards) == shard_id) out.rows[t].push_back(r);
      }
    }
  }
  for (auto& rows : out.rows) {
    std::sort(rows.begin(), rows.end(),
              [](const SparseRowState& a, const SparseRowState& b) {
                return a.id < b.id;
              });
  }
  return out;
}

}  // namespace pstrain
