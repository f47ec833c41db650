#include "worker/ps/trainer.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/model_spec.h"
#include "common/status_macros.h"

namespace pstrain {

double UnixSeconds() { return absl::ToUnixNanos(absl::Now()) * 1e-9; }

absl::Status Trainer::Run(const StepCallback& on_step,
                          const std::function<bool()>& should_stop) {
  const JobConfig& c = options_.config;
  const uint32_t rank = options_.rank;
  LocalStep local(c, rank, model_, data_);
  // The pull decodes the weights straight into `pulled` and the push encodes
  // its chunks straight from `pushed`, which the gradient is downloaded
  // into: both pinned on CUDA, so each crossing is one DMA, no staging copy.
  ComputeBackend* backend = model_->backend();
  const int64_t total = model_->num_params();
  PS_ASSIGN_OR_RETURN(HostBuffer pulled, backend->AllocateHost(total));
  PS_ASSIGN_OR_RETURN(HostBuffer pushed, backend->AllocateHost(total));
  MutableTensorViews pull_into;
  TensorViews weights, grads;
  int64_t offset = 0;
  for (const pstrain::v1::TensorSpec& spec : model_->params()) {
    const int64_t n = NumElements(spec);
    pull_into.emplace_back(pulled.data() + offset, n);
    weights.emplace_back(pulled.data() + offset, n);
    grads.emplace_back(pushed.data() + offset, n);
    offset += n;
  }
  for (int64_t step = options_.start_step; step <= c.training().steps();
       ++step) {
    if (should_stop && should_stop()) {
      return absl::CancelledError(absl::StrCat("stopped before step ", step));
    }
    pstrain::v1::StepMetrics m;
    m.set_worker(rank);
    m.set_step(step);

    absl::Time t0 = absl::Now();
    std::unique_ptr<PsOp> pull = client_->StartPull(rank, step, pull_into);
    PS_RETURN_IF_ERROR(pull->Wait());
    // The pulled weights cross to the backend once, for the evaluation and
    // every micro-batch of the step.
    PS_RETURN_IF_ERROR(model_->SetParams(weights));
    m.set_pull_s(absl::ToDoubleSeconds(absl::Now() - t0));
    if (step == c.training().steps()) {  // final weights: evaluate and finish
      params_.clear();
      for (absl::Span<const float> w : weights) {
        params_.emplace_back(w.begin(), w.end());
      }
      PS_RETURN_IF_ERROR(local.Evaluate(&m));
      m.set_end_unix_s(UnixSeconds());
      return on_step ? on_step(m) : absl::OkStatus();
    }
    if (c.evaluation().every_steps() > 0 && step > 0 &&
        step % c.evaluation().every_steps() == 0) {
      PS_RETURN_IF_ERROR(local.Evaluate(&m));
    }

    t0 = absl::Now();
    PS_ASSIGN_OR_RETURN(double loss_sum, local.Gradient(step));
    PS_RETURN_IF_ERROR(
        backend->CopyToHost(*model_->gradient(), total, pushed.data()));
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
