#include "worker/allreduce/allreduce_trainer.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/model_spec.h"
#include "common/status_macros.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<AllReduceTrainer>> AllReduceTrainer::Create(
    TrainerOptions options, AllReducer* reducer, Model* model,
    DataSource* data) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                      Optimizer::Create(options.config.training().optimizer()));
  return std::unique_ptr<AllReduceTrainer>(new AllReduceTrainer(
      std::move(options), reducer, model, data, std::move(optimizer)));
}

AllReduceTrainer::AllReduceTrainer(TrainerOptions options, AllReducer* reducer,
                                   Model* model, DataSource* data,
                                   std::unique_ptr<Optimizer> optimizer)
    : options_(std::move(options)),
      reducer_(reducer),
      model_(model),
      data_(data),
      optimizer_(std::move(optimizer)) {
  for (const pstrain::v1::TensorSpec& spec : model_->params()) {
    std::vector<float> w(NumElements(spec));
    InitialValues(spec, 0, w.size(), w.data());
    slots_.push_back(optimizer_->InitSlots(w.size()));
    params_.push_back(std::move(w));
  }
}

void AllReduceTrainer::ApplyOptimizer(int64_t step) {
  // As a sync shard: the schedule step and the update count are both the
  // step (one update per step). The optimizer is chunking-independent, so
  // updating whole tensors equals the shards' per-chunk updates.
  for (size_t t = 0; t < params_.size(); ++t) {
    optimizer_->Apply(step, step, params_[t].data(), grads_[t].data(),
                      slots_[t].empty() ? nullptr : slots_[t].data(),
                      params_[t].size());
  }
}

absl::Status AllReduceTrainer::Run(const StepCallback& on_step,
                                   const std::function<bool()>& should_stop) {
  const JobConfig& c = options_.config;
  LocalStep local(c, options_.rank, model_, data_);
  const int64_t slice = local.slice();
  for (int64_t step = 0; step < c.training().steps(); ++step) {
    if (should_stop && should_stop()) {
      return absl::CancelledError(absl::StrCat("stopped before step ", step));
    }
    pstrain::v1::StepMetrics m;
    m.set_worker(options_.rank);
    m.set_step(step);
    if (c.evaluation().every_steps() > 0 && step > 0 &&
        step % c.evaluation().every_steps() == 0) {
      PS_RETURN_IF_ERROR(local.Evaluate(params_, &m));
    }

    absl::Time t0 = absl::Now();
    PS_ASSIGN_OR_RETURN(double loss_sum,
                        local.Gradient(step, params_, &grads_));
    m.set_compute_s(absl::ToDoubleSeconds(absl::Now() - t0));
    m.set_loss(loss_sum / slice);
    m.set_samples(slice);

    t0 = absl::Now();
    PS_RETURN_IF_ERROR(
        AllReduceWeightedMean(reducer_, step, slice, &grads_, &flat_));
    ApplyOptimizer(step);
    m.set_pull_s(absl::ToDoubleSeconds(absl::Now() - t0));
    m.set_end_unix_s(UnixSeconds());
    if (on_step) PS_RETURN_IF_ERROR(on_step(m));
  }
  PS_RETURN_IF_ERROR(reducer_->Close());

  pstrain::v1::StepMetrics m;  // the final evaluation
  m.set_worker(options_.rank);
  m.set_step(c.training().steps());
  PS_RETURN_IF_ERROR(local.Evaluate(params_, &m));
  m.set_end_unix_s(UnixSeconds());
  return on_step ? on_step(m) : absl::OkStatus();
}

absl::Status AllReduceWeightedMean(AllReducer* reducer, uint64_t step,
                                   uint64_t samples, TensorList* grads,
                                   std::vector<float>* scratch) {
  size_t total = 1;
  for (const auto& g : *grads) total += g.size();
  scratch->resize(total);
  const float n = static_cast<float>(samples);
  float* out = scratch->data();
  for (const auto& g : *grads) {
    for (float v : g) *out++ = v * n;
  }
  *out = n;
  PS_RETURN_IF_ERROR(reducer->SumInPlace(step, absl::MakeSpan(*scratch)));
  const float all = scratch->back();
  if (!(all > 0)) {
    return absl::InternalError(
        absl::StrCat("all-reduced sample count is ", all));
  }
  const float* in = scratch->data();
  for (auto& g : *grads) {
    for (float& v : g) v = *in++ / all;
  }
  return absl::OkStatus();
}

uint64_t ParamsFingerprint(const TensorList& params) {
  uint64_t h = 14695981039346656037ull;
  for (const auto& t : params) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(t.data());
    for (size_t i = 0; i < t.size() * sizeof(float); ++i) {
      h = (h ^ p[i]) * 1099511628211ull;
    }
  }
  return h;
}

}  // namespace pstrain
