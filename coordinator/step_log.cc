#include "coordinator/step_log.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"

namespace pstrain {

StepLog::StepLog(StepLogOptions options)
    : options_(std::move(options)),
      next_row_(static_cast<uint64_t>(options_.first_step)) {
  totals_.steps = options_.first_step;
  excused_.resize(options_.num_workers);
  next_own_step_.assign(options_.num_workers, 0);
}

uint64_t StepLog::RowOf(const pstrain::v1::StepMetrics& m) const {
  if (!options_.model_clock) return m.step();
  return m.finished() ? static_cast<uint64_t>(options_.steps) : m.model_step();
}

uint64_t StepLog::NextStep(uint32_t worker) const {
  uint64_t step = next_row_;
  for (auto it = pending_.find(step);
       it != pending_.end() && worker < it->second.reported.size() &&
       it->second.reported[worker];
       it = pending_.find(++step)) {
  }
  return step;
}

void StepLog::Excuse(uint32_t worker, uint64_t from) {
  if (worker >= excused_.size()) return;
  auto& ranges = excused_[worker];
  if (!ranges.empty() && ranges.back().second == UINT64_MAX) return;
  ranges.emplace_back(from, UINT64_MAX);
}

void StepLog::Expect(uint32_t worker, uint64_t from) {
  if (worker >= excused_.size()) return;
  auto& ranges = excused_[worker];
  if (ranges.empty() || ranges.back().second != UINT64_MAX) return;
  ranges.back().second = std::max(from, ranges.back().first);
  if (ranges.back().first == ranges.back().second) ranges.pop_back();
}

void StepLog::RolledBack(uint64_t step) {
  rolled_back_to_ = std::max(rolled_back_to_, step);
}

std::map<uint64_t, StepLog::Pending>::iterator StepLog::NextRow() {
  auto it = pending_.find(next_row_);
  while (it == pending_.end() && next_row_ < rolled_back_to_) {
    it = pending_.find(++next_row_);
  }
  return it;
}

bool StepLog::Complete(uint64_t step, const Pending& p) const {
  if (p.reports == 0) return false;
  if (options_.model_clock) return p.reports >= options_.num_workers;
  if (step < rolled_back_to_) return true;
  if (options_.records_per_row > 0 && p.reports >= options_.records_per_row) {
    return true;
  }
  for (uint32_t w = 0; w < options_.num_workers; ++w) {
    if (p.reported[w]) continue;
    bool excused = false;
    for (const auto& [from, to] : excused_[w]) {
      excused = excused || (step >= from && step < to);
    }
    if (!excused) return false;
  }
  return true;
}

absl::Status StepLog::Add(
    uint32_t worker,
    const google::protobuf::RepeatedPtrField<pstrain::v1::StepMetrics>&
        records) {
  const uint64_t last = static_cast<uint64_t>(options_.steps);
  std::set<uint64_t> new_steps;
  for (const auto& m : records) {
    if (m.worker() != worker) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker ", worker, " reported a step of worker ", m.worker()));
    }
    if (options_.model_clock) {
      // A worker makes at most N x steps pushes, then its final record.
      const uint64_t most = last * options_.num_workers;
      if (m.step() > most || (!m.finished() && m.model_step() > most)) {
        return absl::OutOfRangeError(absl::StrCat(
            "worker ", worker, " reported step ", m.step(), " (model step ",
            m.model_step(), ") but the model takes ", options_.steps,
            " steps of ", options_.num_workers, " pushes"));
      }
      if (!m.finished() && m.model_step() >= last) continue;  // past the end
    } else if (m.step() > last) {
      return absl::OutOfRangeError(
          absl::StrCat("worker ", worker, " reported step ", m.step(),
                       " but the job has ", options_.steps, " steps (step ",
                       options_.steps, " is the final evaluation)"));
    }
    const uint64_t row = RowOf(m);
    if (row >= next_row_ && !pending_.count(row)) new_steps.insert(row);
  }
  if (static_cast<int64_t>(pending_.size() + new_steps.size()) >
      options_.max_pending_steps) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker ", worker, "'s report would leave ",
                     pending_.size() + new_steps.size(),
                     " steps waiting for other workers' reports (at most ",
                     options_.max_pending_steps, ")"));
  }
  for (const auto& m : records) {
    if (options_.model_clock) {
      // Records come in the worker's step order: a lower step is a repeat.
      if (m.step() < next_own_step_[worker]) continue;
      next_own_step_[worker] = m.step() + 1;
      if (!m.finished() && m.model_step() >= last) {
        ++records_past_end_;
        continue;
      }
    }
    const uint64_t row = RowOf(m);
    if (row < next_row_) continue;  // already a row: a repeat
    Pending& p = pending_[row];
    if (p.reported.empty()) p.reported.assign(options_.num_workers, false);
    if (p.reported[worker] && !options_.model_clock) {
      continue;  // a repeat of a counted record
    }
    p.reported[worker] = true;
    ++p.reports;
    p.loss_sum += m.loss() * m.samples();
    p.samples += m.samples();
    p.compute_s += m.compute_s();
    p.pull_s += m.pull_s();
    p.push_s += m.push_s();
    p.end_unix_s = std::max(p.end_unix_s, m.end_unix_s());
    p.eval_correct += m.eval_correct();
    p.eval_total += m.eval_total();
    p.eval_loss_sum += m.eval_loss_sum();
    if (!divergence_) {
      if (!std::isfinite(m.loss())) {
        divergence_ = Divergence{worker, m.step(), m.loss(), false};
      } else if (!std::isfinite(m.eval_loss_sum())) {
        divergence_ = Divergence{worker, m.step(), m.eval_loss_sum(), true};
      }
    }
  }
  return absl::OkStatus();
}

std::vector<MetricsRow> StepLog::TakeCompleteRows(absl::Time train_start) {
  std::vector<MetricsRow> rows;
  const double start = absl::ToUnixNanos(train_start) * 1e-9;
  const uint64_t last = static_cast<uint64_t>(options_.steps);
  for (auto it = NextRow();
       it != pending_.end() && Complete(it->first, it->second);
       ++next_row_, it = NextRow()) {
    const Pending& p = it->second;
    const uint32_t n = p.reports;
    // Record `steps` is the final evaluation, not a training step.
    const bool final_eval = it->first == last;
    const double wall = std::max(0.0, p.end_unix_s - start);
    const double loss = p.samples ? p.loss_sum / p.samples : 0.0;
    if (!final_eval) {
      totals_.steps = static_cast<int64_t>(it->first) + 1;
      totals_.samples += p.samples;
      totals_.final_loss = loss;
      totals_.wall_s = wall;
    }
    MetricsRow r;
    r.step = static_cast<int64_t>(it->first);
    r.wall_s = wall;
    if (!final_eval) r.loss = loss;
    r.samples = static_cast<int64_t>(p.samples);
    r.samples_per_s = wall > 0 ? totals_.samples / wall : 0.0;
    r.compute_s = p.compute_s / n;
    r.pull_s = p.pull_s / n;
    r.push_s = p.push_s / n;
    r.comm_s = r.pull_s + r.push_s;
    if (p.eval_total > 0) {
      r.eval_loss = p.eval_loss_sum / p.eval_total;
      if (options_.classifier) {
        r.eval_accuracy = static_cast<double>(p.eval_correct) / p.eval_total;
      }
      if (final_eval) {
        totals_.has_accuracy = options_.classifier;
        totals_.final_accuracy =
            static_cast<double>(p.eval_correct) / p.eval_total;
        totals_.final_eval_loss = *r.eval_loss;
        totals_.has_final_eval = true;
      }
    }
    rows.push_back(r);
    pending_.erase(it);
  }
  return rows;
}

}  // namespace pstrain
