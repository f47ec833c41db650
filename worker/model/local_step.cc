#include "worker/model/local_step.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/model/straggler_model.h"

namespace pstrain {

absl::StatusOr<double> LocalStep::Gradient(int64_t step, bool stretch) {
  const absl::Time start = absl::Now();
  const JobConfig& c = config_;
  const uint64_t first =
      FirstExampleId(step, rank_, c.job().workers(), slice());
  double loss_sum = 0;
  for (int64_t a = 0; a < c.training().grad_accum_steps(); ++a) {
    PS_ASSIGN_OR_RETURN(
        Batch batch, data_->TrainBatch(first + a * c.training().local_batch(),
                                       c.training().local_batch()));
    PS_ASSIGN_OR_RETURN(double loss,
                        model_->ComputeGradient(batch, /*accumulate=*/a > 0));
    loss_sum += loss * batch.n;
  }
  // The mean over equal micro-batches.
  if (c.training().grad_accum_steps() > 1) {
    const float inv =
        1.0f / static_cast<float>(c.training().grad_accum_steps());
    PS_RETURN_IF_ERROR(model_->backend()->Scale(model_->num_dense_params(), inv,
                                                model_->gradient()));
    for (size_t t = 0; t < model_->params().size(); ++t) {
      SparseRows* rows = model_->row_gradient(static_cast<int>(t));
      if (rows == nullptr) continue;
      for (float& v : rows->values) v *= inv;
    }
  }
  if (stretch) StretchCompute(start, step);
  return loss_sum;
}

absl::StatusOr<std::vector<int64_t>> LocalStep::StepRowIds(int64_t step,
                                                           int tensor) {
  const JobConfig& c = config_;
  const uint64_t first =
      FirstExampleId(step, rank_, c.job().workers(), slice());
  std::vector<int64_t> ids;
  for (int64_t a = 0; a < c.training().grad_accum_steps(); ++a) {
    PS_ASSIGN_OR_RETURN(
        Batch batch, data_->TrainBatch(first + a * c.training().local_batch(),
                                       c.training().local_batch()));
    PS_ASSIGN_OR_RETURN(std::vector<int64_t> micro,
                        model_->RowIds(tensor, batch));
    ids.insert(ids.end(), micro.begin(), micro.end());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

absl::StatusOr<std::vector<int64_t>> LocalStep::TestRowIds(int tensor) {
  PS_ASSIGN_OR_RETURN(Batch test,
                      data_->TestSlice(rank_, config_.job().workers()));
  if (test.n == 0) return std::vector<int64_t>();
  return model_->RowIds(tensor, test);
}

absl::Duration LocalStep::EmulatedCompute(int64_t step) const {
  const WorkerConfig& w = config_.worker();
  if (w.compute_ms() <= 0) return absl::ZeroDuration();
  return EmulatedStepTime(w, config_.data().seed(), rank_, step,
                          absl::Milliseconds(w.compute_ms()));
}

void LocalStep::StretchCompute(absl::Time start, int64_t step) const {
  const WorkerConfig& w = config_.worker();
  const StepSlowdown s = SlowdownFor(w, config_.data().seed(), rank_, step);
  if (w.compute_ms() <= 0 && s.factor == 1.0 &&
      s.pause == absl::ZeroDuration()) {
    return;
  }
  // Without compute_ms the slow-downs stretch the measured time.
  const absl::Duration base = w.compute_ms() > 0
                                  ? absl::Milliseconds(w.compute_ms())
                                  : absl::Now() - start;
  const absl::Duration left = start + base * s.factor + s.pause - absl::Now();
  if (left > absl::ZeroDuration()) absl::SleepFor(left);
}

absl::Status LocalStep::Evaluate(pstrain::v1::StepMetrics* m, bool whole) {
  PS_ASSIGN_OR_RETURN(Batch test,
                      whole ? data_->TestSlice(0, 1)
                            : data_->TestSlice(rank_, config_.job().workers()));
  if (test.n == 0) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(EvalResult r, model_->EvaluateResident(test));
  m->set_eval_correct(r.correct);
  m->set_eval_total(r.total);
  m->set_eval_loss_sum(r.loss_sum);
  return absl::OkStatus();
}

}  // namespace pstrain
