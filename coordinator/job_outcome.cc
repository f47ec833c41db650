#include "coordinator/job_outcome.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/client_text.h"

namespace pstrain {

RunFailure WorkerErrorFailure(uint32_t worker, absl::string_view error) {
  absl::ConsumePrefix(&error, absl::StrCat("worker ", worker, ": "));
  std::string cause(error.substr(0, kMaxMessageBytes));
  if (error.size() > kMaxMessageBytes) {
    absl::StrAppend(&cause, "...(", error.size(), " bytes)");
  }
  return RunFailure{"worker", static_cast<int64_t>(worker), -1,
                    std::move(cause)};
}

std::string DivergenceText(const Divergence& d) {
  return absl::StrCat(
      "training diverged: ", d.eval ? "evaluation loss" : "loss", " is ",
      d.value, " at step ", d.step);
}

bool JobOutcomeRecorder::Fail(const RunFailure& failure, absl::Time now) {
  if (outcome_.failed) return false;
  outcome_.failed = true;
  outcome_.failure = failure;
  outcome_.message = DescribeFailure(failure);
  failed_at_ = now;
  return true;
}

void JobOutcomeRecorder::Reattribute(const RunFailure& failure) {
  if (!outcome_.failed) return;
  outcome_.failure = failure;
  outcome_.message = DescribeFailure(failure);
}

bool JobOutcomeRecorder::Diverged() {
  if (outcome_.diverged) return false;
  outcome_.diverged = true;
  return true;
}

void JobOutcomeRecorder::SetBytes(int rank, uint64_t pushed, uint64_t pulled) {
  bytes_pushed_[rank] = pushed;
  bytes_pulled_[rank] = pulled;
}

JobOutcome JobOutcomeRecorder::Summary(const StepTotals& t,
                                       absl::Time train_start) const {
  JobOutcome o = outcome_;
  o.steps = t.steps;
  o.samples = t.samples;
  o.wall_s = t.wall_s;
  if (outcome_.failed && train_start != absl::InfinitePast() &&
      failed_at_ > train_start) {
    o.wall_s =
        std::max(o.wall_s, absl::ToDoubleSeconds(failed_at_ - train_start));
  }
  o.final_loss = t.final_loss;
  o.has_accuracy = t.has_accuracy;
  o.final_accuracy = t.final_accuracy;
  o.final_eval_loss = t.final_eval_loss;
  o.has_final_eval = t.has_final_eval;
  for (uint64_t b : bytes_pushed_) o.bytes_pushed += b;
  for (uint64_t b : bytes_pulled_) o.bytes_pulled += b;
  return o;
}

}  // namespace pstrain
