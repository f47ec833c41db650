#include "worker/allreduce/allreduce_trainer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/model_spec.h"
#include "common/status_macros.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<AllReduceTrainer>> AllReduceTrainer::Create(
    TrainerOptions options, AllReducer* reducer, Model* model, DataSource* data,
    AllReduceCheckpointOptions checkpoint) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                      Optimizer::Create(options.config.training().optimizer()));
  if (checkpoint.env == nullptr) checkpoint.env = CheckpointEnv::Default();
  const std::string resume = checkpoint.resume_from;
  const uint64_t start = static_cast<uint64_t>(options.start_step);
  const RowReplicas::Mode row_mode =
      options.config.allreduce().sparse() == AllReduceConfig::ALLGATHER
          ? RowReplicas::Mode::kAllGather
          : RowReplicas::Mode::kDense;
  const int ranks = options.config.job().workers();
  const int rank = static_cast<int>(options.rank);
  std::unique_ptr<AllReduceTrainer> trainer(
      new AllReduceTrainer(std::move(options), reducer, model, data,
                           std::move(optimizer), std::move(checkpoint)));
  PS_ASSIGN_OR_RETURN(trainer->rows_,
                      RowReplicas::Create(model, trainer->optimizer_.get(),
                                          row_mode, ranks, rank));
  if (!trainer->rows_->empty() && !resume.empty()) {
    return absl::FailedPreconditionError(
        "all-reduce training of a model with row-sparse tables cannot resume "
        "from a checkpoint (it writes none)");
  }
  if (resume.empty()) {
    if (start != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("all-reduce training cannot start at step ", start,
                       " without a checkpoint to resume from"));
    }
    return trainer;
  }
  // Every rank reads the checkpoint itself (checkpointing.h: no collective,
  // each verifies the checksums); the state replaces the initial one only
  // when all of it was read and fits.
  TensorList weights;
  std::vector<std::vector<float>> slots;
  PS_RETURN_IF_ERROR(LoadReplicaCheckpoint(trainer->checkpoint_.env, resume,
                                           trainer->checkpoint_.job, start,
                                           &weights, &slots));
  for (size_t t = 0; t < trainer->params_.size(); ++t) {
    if (weights.size() != trainer->params_.size() ||
        weights[t].size() != trainer->params_[t].size() ||
        slots[t].size() != trainer->slots_[t].size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", resume, ": tensor ", t,
          " does not match the model's (job spec and model disagree)"));
    }
  }
  trainer->params_ = std::move(weights);
  trainer->slots_ = std::move(slots);
  return trainer;
}

AllReduceTrainer::AllReduceTrainer(TrainerOptions options, AllReducer* reducer,
                                   Model* model, DataSource* data,
                                   std::unique_ptr<Optimizer> optimizer,
                                   AllReduceCheckpointOptions checkpoint)
    : options_(std::move(options)),
      reducer_(reducer),
      model_(model),
      data_(data),
      optimizer_(std::move(optimizer)),
      checkpoint_(std::move(checkpoint)) {
  for (const pstrain::v1::TensorSpec& spec : model_->params()) {
    // A row-sparse table lives in rows_ (its entry here stays empty).
    std::vector<float> w(spec.row_sparse() ? 0 : NumElements(spec));
    InitialValues(spec, 0, w.size(), w.data());
    slots_.push_back(optimizer_->InitSlots(w.size()));
    params_.push_back(std::move(w));
  }
}

void AllReduceTrainer::ApplyOptimizer(int64_t step, const float* mean) {
  // As a sync shard: the schedule step and the update count are both the
  // step (one update per step). The optimizer is chunking-independent, so
  // updating whole tensors equals the shards' per-chunk updates.
  const float* grad = mean;
  float* w = weights_.data();
  for (size_t t = 0; t < params_.size(); ++t) {
    if (params_[t].empty()) continue;  // a row-sparse table (rows_)
    optimizer_->Apply(step, step, w, grad,
                      slots_[t].empty() ? nullptr : slots_[t].data(),
                      params_[t].size());
    grad += params_[t].size();
    w += params_[t].size();
  }
}

absl::StatusOr<std::string> AllReduceTrainer::SaveCheckpoint(uint64_t cut) {
  ReplicaView view;
  view.weights = absl::MakeConstSpan(weights_.data(), model_->num_params());
  view.slots = &slots_;
  absl::StatusOr<std::string> dir =
      SaveReplicaCheckpoint(checkpoint_.env, checkpoint_.root, checkpoint_.job,
                            cut, view, checkpoint_.keep);
  if (dir.status().code() == absl::StatusCode::kAlreadyExists) {
    // A resumed job passing a cut the earlier run saved: the same state
    // (the job is deterministic), kept as it is.
    return std::string();
  }
  if (!dir.ok()) {
    return absl::Status(
        dir.status().code(),
        absl::StrCat("checkpoint of step ", cut, ": ", dir.status().message()));
  }
  return dir;
}

absl::Status AllReduceTrainer::Run(const StepCallback& on_step,
                                   const std::function<bool()>& should_stop) {
  const JobConfig& c = options_.config;
  LocalStep local(c, options_.rank, model_, data_);
  const int64_t slice = local.slice();
  // The replica's weights live in pinned host memory while training, so
  // that each step's upload is one DMA; params_ gets them back at the end.
  // Dense tensors only: a row-sparse table's rows are in rows_.
  const int64_t total = model_->num_dense_params();
  ComputeBackend* backend = model_->backend();
  // The model computes on weights_ where they are on the CPU backend
  // (Model::ShareParams): released before they are replaced or freed.
  model_->ReleaseSharedParams();
  absl::Cleanup release = [this] { model_->ReleaseSharedParams(); };
  PS_ASSIGN_OR_RETURN(weights_, backend->AllocateHost(total));
  PS_ASSIGN_OR_RETURN(reduced_, backend->AllocateHost(total + 1));
  TensorViews weights;
  float* w = weights_.data();
  for (const std::vector<float>& p : params_) {
    std::copy(p.begin(), p.end(), w);
    weights.emplace_back(w, p.size());
    w += p.size();
  }
  AllReduceCheckpointSchedule schedule(
      checkpoint_, static_cast<uint64_t>(c.training().steps()), absl::Now());
  for (int64_t step = options_.start_step; step < c.training().steps();
       ++step) {
    if (should_stop && should_stop()) {
      return absl::CancelledError(absl::StrCat("stopped before step ", step));
    }
    pstrain::v1::StepMetrics m;
    m.set_worker(options_.rank);
    m.set_step(step);
    // This step's weights cross once, for the evaluation and every
    // micro-batch (none cross on the CPU backend: nothing changes them
    // before ExchangeAndApply, after the step's compute).
    PS_RETURN_IF_ERROR(model_->ShareParams(weights));
    if (c.evaluation().every_steps() > 0 && step > 0 &&
        step % c.evaluation().every_steps() == 0) {
      if (!rows_->empty()) PS_RETURN_IF_ERROR(rows_->SetTestRows(&local));
      PS_RETURN_IF_ERROR(local.Evaluate(&m));
    }
    if (!rows_->empty()) PS_RETURN_IF_ERROR(rows_->SetStepRows(&local, step));

    absl::Time t0 = absl::Now();
    PS_ASSIGN_OR_RETURN(double loss_sum, local.Gradient(step));
    m.set_compute_s(absl::ToDoubleSeconds(absl::Now() - t0));
    m.set_loss(loss_sum / slice);
    m.set_samples(slice);

    t0 = absl::Now();
    PS_RETURN_IF_ERROR(ExchangeAndApply(step, slice));
    m.set_pull_s(absl::ToDoubleSeconds(absl::Now() - t0));
    // The state is now cut step + 1 on every rank; rank 0 saves it. The
    // others go on to the next all-reduce and wait there meanwhile.
    if (schedule.Due(step + 1, absl::Now())) {
      PS_ASSIGN_OR_RETURN(std::string dir, SaveCheckpoint(step + 1));
      schedule.Saved(absl::Now());
      m.set_checkpoint(dir);
    }
    m.set_end_unix_s(UnixSeconds());
    if (on_step) PS_RETURN_IF_ERROR(on_step(m));
  }
  // Every step is done and handed to on_step: wait for the right neighbour
  // to confirm the last segments (CANCELLED within a poll of a stop).
  PS_LOG_INFO("all-reduce steps done: closing the ring");
  PS_RETURN_IF_ERROR(reducer_->Close());

  pstrain::v1::StepMetrics m;  // the final evaluation
  m.set_worker(options_.rank);
  m.set_step(c.training().steps());
  for (size_t t = 0; t < params_.size(); ++t) {
    std::copy(weights[t].begin(), weights[t].end(), params_[t].begin());
  }
  PS_RETURN_IF_ERROR(model_->ShareParams(weights));
  if (!rows_->empty()) PS_RETURN_IF_ERROR(rows_->SetTestRows(&local));
  PS_RETURN_IF_ERROR(local.Evaluate(&m));
  m.set_end_unix_s(UnixSeconds());
  return on_step ? on_step(m) : absl::OkStatus();
}

absl::Status AllReduceTrainer::ExchangeAndApply(int64_t step, int64_t samples) {
  const float* mean = reduced_.data();
  if (rows_->empty()) {
    PS_ASSIGN_OR_RETURN(mean, AllReduceWeightedMeanOfModel(
                                  reducer_, step, samples, model_, &reduced_));
  } else {
    // The dense mean into reduced_ and the rows updated (row_replicas.h).
    PS_RETURN_IF_ERROR(rows_->Exchange(reducer_, step, samples, &reduced_));
  }
  ApplyOptimizer(step, mean);
  return absl::OkStatus();
}

absl::StatusOr<const float*> AllReduceWeightedMeanOfModel(AllReducer* reducer,
                                                          uint64_t step,
                                                          uint64_t samples,
                                                          Model* model,
                                                          HostBuffer* host) {
  ComputeBackend* backend = model->backend();
  DeviceBuffer* grad = model->gradient();
  const int64_t total = model->num_dense_params();
  if (grad == nullptr || grad->size() < total + 1 || host->size() < total + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "all-reduce of the model's gradient: it has ",
        grad == nullptr ? 0 : grad->size(), " floats on the backend and ",
        host->size(), " on the host, needs ", total + 1));
  }
  const float n = static_cast<float>(samples);
  PS_RETURN_IF_ERROR(backend->Scale(total, n, grad));
  float* out = host->data();
  if (reducer->sums_on_device()) {
    DeviceBuffer count = grad->View(total, 1);
    PS_RETURN_IF_ERROR(backend->CopyToDevice(&n, 1, &count));
    PS_RETURN_IF_ERROR(reducer->SumInPlaceOnDevice(step, grad, total + 1));
    PS_RETURN_IF_ERROR(backend->CopyToHost(*grad, total + 1, out));
  } else {
    // On the CPU backend the gradient is host memory: summed where it is.
    if (backend->host_memory()) {
      out = grad->data();
    } else {
      PS_RETURN_IF_ERROR(backend->CopyToHost(*grad, total, out));
    }
    out[total] = n;
    PS_RETURN_IF_ERROR(
        reducer->SumInPlace(step, absl::MakeSpan(out, total + 1)));
  }
  const float all = out[total];
  if (!(all > 0)) {
    return absl::InternalError(
        absl::StrCat("all-reduced sample count is ", all));
  }
  for (int64_t k = 0; k < total; ++k) out[k] /= all;
  return out;
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
