#include "worker/allreduce/allreduce_trainer.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/model_spec.h"
#include "common/status_macros.h"

namespace pstrain {

namespace {
double UnixSeconds() { return absl::ToUnixNanos(absl::Now()) * 1e-9; }
}  // namespace

absl::StatusOr<std::unique_ptr<AllReduceTrainer>> AllReduceTrainer::Create(
    TrainerOptions options, AllReducer* reducer, Model* model,
    DataSource* data) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                      Optimizer::Create(options.config.optimizer));
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

void AllReduceTrainer::StretchCompute(absl::Time start) const {
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

absl::StatusOr<double> AllReduceTrainer::ComputeGradient(int64_t step) {
  const JobConfig& c = options_.config;
  const uint64_t first = FirstExampleId(step, options_.rank, c.workers,
                                        c.local_batch * c.grad_accum_steps);
  double loss_sum = 0;
  for (int64_t a = 0; a < c.grad_accum_steps; ++a) {
    PS_ASSIGN_OR_RETURN(
        Batch batch,
        data_->TrainBatch(first + a * c.local_batch, c.local_batch));
    PS_ASSIGN_OR_RETURN(double loss,
                        model_->LossAndGradient(params_, batch, &micro_));
    loss_sum += loss * batch.n;
    if (a == 0) {
      grads_ = micro_;
    } else {
      for (size_t i = 0; i < grads_.size(); ++i) {
        for (size_t j = 0; j < grads_[i].size(); ++j)
          grads_[i][j] += micro_[i][j];
      }
    }
  }
  if (c.grad_accum_steps > 1) {  // as Trainer: the mean over micro-batches
    const float inv = 1.0f / static_cast<float>(c.grad_accum_steps);
    for (auto& g : grads_) {
      for (float& v : g) v *= inv;
    }
  }
  return loss_sum;
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

absl::Status AllReduceTrainer::Evaluate(pstrain::v1::StepMetrics* m) {
  PS_ASSIGN_OR_RETURN(Batch test,
                      data_->TestSlice(options_.rank, options_.config.workers));
  if (test.n == 0) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(EvalResult r, model_->Evaluate(params_, test));
  m->set_eval_correct(r.correct);
  m->set_eval_total(r.total);
  m->set_eval_loss_sum(r.loss_sum);
  return absl::OkStatus();
}

absl::Status AllReduceTrainer::Run(const StepCallback& on_step,
                                   const std::function<bool()>& should_stop) {
  const JobConfig& c = options_.config;
  const int64_t slice = c.local_batch * c.grad_accum_steps;
  for (int64_t step = 0; step < c.steps; ++step) {
    if (should_stop && should_stop()) {
      return absl::CancelledError(absl::StrCat("stopped before step ", step));
    }
    pstrain::v1::StepMetrics m;
    m.set_worker(options_.rank);
    m.set_step(step);
    if (c.eval_every > 0 && step > 0 && step % c.eval_every == 0) {
      PS_RETURN_IF_ERROR(Evaluate(&m));
    }

    absl::Time t0 = absl::Now();
    PS_ASSIGN_OR_RETURN(double loss_sum, ComputeGradient(step));
    StretchCompute(t0);
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
  m.set_step(c.steps);
  PS_RETURN_IF_ERROR(Evaluate(&m));
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
