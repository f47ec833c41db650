#include "worker/trainer.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace pstrain {

namespace {
double UnixSeconds() { return absl::ToUnixNanos(absl::Now()) * 1e-9; }
}  // namespace

void Trainer::StretchCompute(absl::Time start) const {
  const WorkerConfig& w = options_.config.worker;
  const bool straggler =
      w.straggler_rank == static_cast<int64_t>(options_.rank);
  if (w.compute_ms <= 0 && !straggler) return;
  absl::Duration target =
      w.compute_ms > 0 ? absl::Milliseconds(w.compute_ms) : absl::Now() - start;
  if (straggler) target *= w.straggler_factor;
  const absl::Duration left = start + target - absl::Now();
  if (left > absl::ZeroDuration()) absl::SleepFor(left);
}

absl::Status Trainer::Evaluate(pstrain::v1::StepMetrics* m) {
  PS_ASSIGN_OR_RETURN(Batch test,
                      data_->TestSlice(options_.rank, options_.config.workers));
  if (test.n == 0) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(EvalResult r, model_->Evaluate(params_, test));
  m->set_eval_correct(r.correct);
  m->set_eval_total(r.total);
  m->set_eval_loss_sum(r.loss_sum);
  return absl::OkStatus();
}

absl::Status Trainer::Run(const StepCallback& on_step,
                          const std::function<bool()>& should_stop) {
  const JobConfig& c = options_.config;
  const uint32_t rank = options_.rank;
  const int64_t slice = c.local_batch * c.grad_accum_steps;
  TensorList grads, micro;
  for (int64_t step = 0; step <= c.steps; ++step) {
    if (should_stop && should_stop()) {
      return absl::CancelledError(absl::StrCat("stopped before step ", step));
    }
    pstrain::v1::StepMetrics m;
    m.set_worker(rank);
    m.set_step(step);

    absl::Time t0 = absl::Now();
    std::unique_ptr<PsOp> pull = client_->StartPull(rank, step, &params_);
    PS_RETURN_IF_ERROR(pull->Wait());
    m.set_pull_s(absl::ToDoubleSeconds(absl::Now() - t0));
    if (step == c.steps) {  // final weights: evaluate and finish
      PS_RETURN_IF_ERROR(Evaluate(&m));
      m.set_end_unix_s(UnixSeconds());
      return on_step ? on_step(m) : absl::OkStatus();
    }
    if (c.eval_every > 0 && step > 0 && step % c.eval_every == 0) {
      PS_RETURN_IF_ERROR(Evaluate(&m));
    }

    // Gradient of the mean loss over this rank's slice of the global batch,
    // accumulated over micro-batches (weighted by their sizes).
    t0 = absl::Now();
    const uint64_t first = FirstExampleId(step, rank, c.workers, slice);
    double loss_sum = 0;
    for (int64_t a = 0; a < c.grad_accum_steps; ++a) {
      PS_ASSIGN_OR_RETURN(
          Batch batch,
          data_->TrainBatch(first + a * c.local_batch, c.local_batch));
      PS_ASSIGN_OR_RETURN(double loss,
                          model_->LossAndGradient(params_, batch, &micro));
      loss_sum += loss * batch.n;
      if (a == 0) {
        grads = micro;
      } else {
        for (size_t i = 0; i < grads.size(); ++i) {
          for (size_t j = 0; j < grads[i].size(); ++j)
            grads[i][j] += micro[i][j];
        }
      }
    }
    if (c.grad_accum_steps > 1) {
      const float inv = 1.0f / static_cast<float>(c.grad_accum_steps);
      for (auto& g : grads) {
        for (float& v : g) v *= inv;
      }
    }
    StretchCompute(t0);
    m.set_compute_s(absl::ToDoubleSeconds(absl::Now() - t0));
    m.set_loss(loss_sum / slice);
    m.set_samples(slice);

    t0 = absl::Now();
    std::unique_ptr<PsOp> push =
        client_->StartPush(rank, step, slice, grads, pull->reads());
    PS_RETURN_IF_ERROR(push->Wait());
    m.set_push_s(absl::ToDoubleSeconds(absl::Now() - t0));
    m.set_end_unix_s(UnixSeconds());
    if (on_step) PS_RETURN_IF_ERROR(on_step(m));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
