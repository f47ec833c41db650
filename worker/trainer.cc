#include "worker/trainer.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace pstrain {

double UnixSeconds() { return absl::ToUnixNanos(absl::Now()) * 1e-9; }

absl::Status Trainer::Run(const StepCallback& on_step,
                          const std::function<bool()>& should_stop) {
  const JobConfig& c = options_.config;
  const uint32_t rank = options_.rank;
  LocalStep local(c, rank, model_, data_);
  TensorList grads;
  for (int64_t step = 0; step <= c.training().steps(); ++step) {
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
    if (step == c.training().steps()) {  // final weights: evaluate and finish
      PS_RETURN_IF_ERROR(local.Evaluate(params_, &m));
      m.set_end_unix_s(UnixSeconds());
      return on_step ? on_step(m) : absl::OkStatus();
    }
    if (c.evaluation().every_steps() > 0 && step > 0 &&
        step % c.evaluation().every_steps() == 0) {
      PS_RETURN_IF_ERROR(local.Evaluate(params_, &m));
    }

    t0 = absl::Now();
    PS_ASSIGN_OR_RETURN(double loss_sum, local.Gradient(step, params_, &grads));
    m.set_compute_s(absl::ToDoubleSeconds(absl::Now() - t0));
    m.set_loss(loss_sum / local.slice());
    m.set_samples(local.slice());

    t0 = absl::Now();
    std::unique_ptr<PsOp> push =
        client_->StartPush(rank, step, local.slice(), grads, pull->reads());
    PS_RETURN_IF_ERROR(push->Wait());
    m.set_push_s(absl::ToDoubleSeconds(absl::Now() - t0));
    m.set_end_unix_s(UnixSeconds());
    if (on_step) PS_RETURN_IF_ERROR(on_step(m));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
