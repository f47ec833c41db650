#include "worker/ps/trainer.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <iterator>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/model_spec.h"
#include "common/status_macros.h"

namespace pstrain {

double UnixSeconds() { return absl::ToUnixNanos(absl::Now()) * 1e-9; }

namespace {

// The first error of two operations that were both waited for.
absl::Status FirstError(absl::Status a, absl::Status b) {
  return a.ok() ? b : a;
}

}  // namespace

Trainer::Trainer(TrainerOptions options, PsClient* client, Model* model,
                 DataSource* data)
    : options_(std::move(options)),
      client_(client),
      model_(model),
      data_(data) {
  for (size_t t = 0; t < model_->params().size(); ++t) {
    if (model_->params()[t].row_sparse()) sparse_.push_back(t);
  }
}

absl::StatusOr<std::vector<RowSet>> Trainer::RowRequests(LocalStep* local,
                                                         int64_t step,
                                                         bool train,
                                                         bool test) const {
  std::vector<RowSet> requests(sparse_.size());
  for (size_t k = 0; k < sparse_.size(); ++k) {
    requests[k].tensor = model_->params()[sparse_[k]].name();
    std::vector<int64_t>& ids = requests[k].ids;
    if (train) {
      PS_ASSIGN_OR_RETURN(ids, local->StepRowIds(step, sparse_[k]));
    }
    if (test) {
      PS_ASSIGN_OR_RETURN(std::vector<int64_t> more,
                          local->TestRowIds(sparse_[k]));
      std::vector<int64_t> both;
      both.reserve(ids.size() + more.size());
      std::set_union(ids.begin(), ids.end(), more.begin(), more.end(),
                     std::back_inserter(both));
      ids = std::move(both);
    }
  }
  return requests;
}

absl::Status Trainer::SetPulledRows(std::vector<RowSet>* pulled) {
  if (pulled->size() != sparse_.size()) {
    return absl::InternalError(absl::StrCat("row pull returned ",
                                            pulled->size(), " tensors, want ",
                                            sparse_.size()));
  }
  for (size_t k = 0; k < sparse_.size(); ++k) {
    // Requested sorted and unique, so they come back in that order.
    SparseRows rows;
    rows.ids = std::move((*pulled)[k].ids);
    rows.values = std::move((*pulled)[k].values);
    PS_RETURN_IF_ERROR(model_->SetRows(sparse_[k], std::move(rows)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RowSet>> Trainer::TakeRowGradients() {
  std::vector<RowSet> grads(sparse_.size());
  for (size_t k = 0; k < sparse_.size(); ++k) {
    grads[k].tensor = model_->params()[sparse_[k]].name();
    SparseRows* g = model_->row_gradient(sparse_[k]);
    if (g == nullptr) {
      return absl::InternalError(absl::StrCat(
          "no row gradient for '", grads[k].tensor, "' after the step"));
    }
    grads[k].ids = std::move(g->ids);
    grads[k].values = std::move(g->values);
  }
  return grads;
}

absl::StatusOr<Trainer::StepBuffers> Trainer::AllocateStepBuffers() const {
  // The pull decodes the weights straight into `pulled` and the push encodes
  // its chunks straight from `pushed`, which the gradient is downloaded
  // into: both pinned on CUDA, so each crossing is one DMA, no staging copy.
  ComputeBackend* backend = model_->backend();
  const int64_t total = model_->num_dense_params();
  StepBuffers b;
  PS_ASSIGN_OR_RETURN(b.pulled, backend->AllocateHost(total));
  PS_ASSIGN_OR_RETURN(b.pushed, backend->AllocateHost(total));
  int64_t offset = 0;
  for (const pstrain::v1::TensorSpec& spec : model_->params()) {
    // Row-sparse tensors are not in these buffers (their views are empty).
    const int64_t n = spec.row_sparse() ? 0 : NumElements(spec);
    b.pull_into.emplace_back(b.pulled.data() + offset, n);
    b.weights.emplace_back(b.pulled.data() + offset, n);
    b.grads.emplace_back(b.pushed.data() + offset, n);
    offset += n;
  }
  return b;
}

absl::StatusOr<TensorViews> Trainer::GradientToPush(const TensorViews& grads,
                                                    float* pushed,
                                                    bool in_place) const {
  ComputeBackend* backend = model_->backend();
  const int64_t total = model_->num_dense_params();
  const DeviceBuffer* gradient = model_->gradient();
  if (gradient == nullptr || gradient->size() < total) {
    return absl::InternalError(absl::StrCat(
        "the model holds ", gradient == nullptr ? 0 : gradient->size(),
        " gradient floats after the step's compute, needs ", total));
  }
  if (!in_place || !backend->host_memory()) {
    PS_RETURN_IF_ERROR(backend->CopyToHost(*gradient, total, pushed));
    return grads;
  }
  // The same layout as `grads`: the dense tensors back to back.
  TensorViews views;
  const float* at = gradient->data();
  for (absl::Span<const float> g : grads) {
    views.emplace_back(at, g.size());
    at += g.size();
  }
  return views;
}

absl::Status Trainer::Run(const StepCallback& on_step,
                          const std::function<bool()>& should_stop) {
  const JobConfig& c = options_.config;
  if (c.training().mode() == pstrain::v1::MODE_ASYNC &&
      c.training().clock() == pstrain::v1::TrainingConfig::CLOCK_MODEL) {
    return RunModelClock(on_step, should_stop);
  }
  const uint32_t rank = options_.rank;
  LocalStep local(c, rank, model_, data_);
  PS_ASSIGN_OR_RETURN(StepBuffers buffers, AllocateStepBuffers());
  // Before `buffers` go: the model may compute on them (ShareParams).
  absl::Cleanup release = [this] { model_->ReleaseSharedParams(); };
  HostBuffer& pushed = buffers.pushed;
  const MutableTensorViews& pull_into = buffers.pull_into;
  const TensorViews& weights = buffers.weights;
  const TensorViews& grads = buffers.grads;
  // Where the backend's memory is the host's, the model computes on the
  // pulled weights where the pull wrote them (Model::ShareParams) and the
  // push encodes from the model's own gradient (GradientToPush): nothing
  // writes either before the next step's pull and compute. Not with
  // stand-ins: AwaitPull computes a stand-in's gradient on the weights of
  // the step before while the next pull writes that buffer, and stand-ins
  // push from `pushed`.
  const bool in_place = !options_.adopt;
  // Overlap needs emulated compute to spread over the layers (the backend
  // computes the whole gradient in one call).
  const bool overlap = c.worker().overlap() && sparse_.empty() &&
                       c.worker().compute_ms() > 0 && !options_.adopt;
  // Stand-ins (elastic sync): the step whose weights the model holds.
  int64_t held = -1;
  std::vector<ShardRead> held_reads;
  for (int64_t step = options_.start_step; step <= c.training().steps();
       ++step) {
    if (should_stop && should_stop()) {
      return absl::CancelledError(absl::StrCat("stopped before step ", step));
    }
    pstrain::v1::StepMetrics m;
    m.set_worker(rank);
    m.set_step(step);

    if (overlap && step < c.training().steps()) {
      PS_RETURN_IF_ERROR(OverlappedStep(step, &local, pull_into, weights, grads,
                                        pushed.data(), &m));
      m.set_end_unix_s(UnixSeconds());
      if (on_step) PS_RETURN_IF_ERROR(on_step(m));
      continue;
    }
    const bool final_step = step == c.training().steps();
    const bool evaluate =
        final_step || (c.evaluation().every_steps() > 0 && step > 0 &&
                       step % c.evaluation().every_steps() == 0);
    absl::Time t0 = absl::Now();
    // Row-sparse tensors: the rows this step reads, pulled at the same
    // clock as the dense weights and in parallel with them.
    std::vector<RowSet> row_requests, rows;
    if (!sparse_.empty()) {
      PS_ASSIGN_OR_RETURN(row_requests,
                          RowRequests(&local, step, !final_step, evaluate));
    }
    std::unique_ptr<PsOp> pull = client_->StartPull(rank, step, pull_into);
    std::unique_ptr<PsOp> pull_rows;
    if (!sparse_.empty()) {
      pull_rows = client_->StartPullRows(rank, step, row_requests, &rows);
    }
    PS_RETURN_IF_ERROR(AwaitPull(pull.get(), pull_rows.get(), held, held_reads,
                                 grads, pushed.data()));
    // The pulled weights cross to the backend once, for the evaluation and
    // every micro-batch of the step (on the CPU backend, not at all).
    PS_RETURN_IF_ERROR(in_place ? model_->ShareParams(weights)
                                : model_->SetParams(weights));
    if (!sparse_.empty()) PS_RETURN_IF_ERROR(SetPulledRows(&rows));
    m.set_pull_s(absl::ToDoubleSeconds(absl::Now() - t0));
    if (step == c.training().steps()) {  // final weights: evaluate and finish
      params_.clear();
      for (absl::Span<const float> w : weights) {
        params_.emplace_back(w.begin(), w.end());
      }
      PS_RETURN_IF_ERROR(local.Evaluate(&m));
      m.set_end_unix_s(UnixSeconds());
      if (on_step) PS_RETURN_IF_ERROR(on_step(m));
      for (const StandIn& s : stand_ins_) {
        PS_RETURN_IF_ERROR(
            StandInStep(s, step, pull->reads(), grads, pushed.data()));
      }
      return absl::OkStatus();
    }
    if (c.evaluation().every_steps() > 0 && step > 0 &&
        step % c.evaluation().every_steps() == 0) {
      PS_RETURN_IF_ERROR(local.Evaluate(&m));
    }

    t0 = absl::Now();
    PS_ASSIGN_OR_RETURN(double loss_sum, local.Gradient(step));
    PS_ASSIGN_OR_RETURN(const TensorViews to_push,
                        GradientToPush(grads, pushed.data(), in_place));
    m.set_compute_s(absl::ToDoubleSeconds(absl::Now() - t0));
    m.set_loss(loss_sum / local.slice());
    m.set_samples(local.slice());

    std::vector<RowSet> row_grads;
    if (!sparse_.empty()) {
      PS_ASSIGN_OR_RETURN(row_grads, TakeRowGradients());
    }

    t0 = absl::Now();
    std::unique_ptr<PsOp> push =
        client_->StartPush(rank, step, local.slice(), to_push, pull->reads());
    std::unique_ptr<PsOp> push_rows;
    if (!sparse_.empty()) {
      push_rows = client_->StartPushRows(rank, step, local.slice(), row_grads,
                                         pull_rows->reads());
    }
    absl::Status done = push->Wait();
    if (push_rows) done = FirstError(done, push_rows->Wait());
    PS_RETURN_IF_ERROR(done);
    m.set_push_s(absl::ToDoubleSeconds(absl::Now() - t0));
    m.set_end_unix_s(UnixSeconds());
    if (on_step) PS_RETURN_IF_ERROR(on_step(m));
    for (const StandIn& s : stand_ins_) {
      if (s.first_step > step) continue;
      PS_RETURN_IF_ERROR(
          StandInStep(s, step, pull->reads(), grads, pushed.data()));
    }
    held = step;
    held_reads = pull->reads();
  }
  return absl::OkStatus();
}

absl::Status Trainer::RunModelClock(const StepCallback& on_step,
                                    const std::function<bool()>& should_stop) {
  const JobConfig& c = options_.config;
  const uint32_t rank = options_.rank;
  if (!sparse_.empty() || options_.adopt || c.worker().overlap() ||
      options_.start_step != 0) {
    return absl::FailedPreconditionError(
        "training.clock model runs without row-sparse tensors, stand-ins, "
        "worker.overlap or a resumed start step");
  }
  LocalStep local(c, rank, model_, data_);
  PS_ASSIGN_OR_RETURN(StepBuffers buffers, AllocateStepBuffers());
  absl::Cleanup release = [this] { model_->ReleaseSharedParams(); };
  HostBuffer& pushed = buffers.pushed;
  const MutableTensorViews& pull_into = buffers.pull_into;
  const TensorViews& weights = buffers.weights;
  const TensorViews& grads = buffers.grads;
  const uint64_t workers = c.job().workers();
  const uint64_t steps = static_cast<uint64_t>(c.training().steps());
  const uint64_t done_at = workers * steps;  // pushes the model takes
  const uint64_t every =
      c.evaluation().every_steps() > 0
          ? static_cast<uint64_t>(c.evaluation().every_steps())
          : 0;
  uint64_t evaluated = 0;  // the last multiple of `every` evaluated
  for (int64_t step = 0;; ++step) {
    if (should_stop && should_stop()) {
      return absl::CancelledError(absl::StrCat("stopped before step ", step));
    }
    pstrain::v1::StepMetrics m;
    m.set_worker(rank);
    m.set_step(step);
    absl::Time t0 = absl::Now();
    std::unique_ptr<PsOp> pull = client_->StartPull(rank, step, pull_into);
    PS_RETURN_IF_ERROR(pull->Wait());
    PS_RETURN_IF_ERROR(model_->ShareParams(weights));  // no stand-ins here
    m.set_pull_s(absl::ToDoubleSeconds(absl::Now() - t0));
    // Every push reaches every shard, so the smallest version is the number
    // of pushes the whole model has taken.
    uint64_t version = UINT64_MAX;
    for (const ShardRead& r : pull->reads()) {
      version = std::min(version, r.version);
    }
    if (version >= done_at) {  // the model is done: evaluate it and finish
      params_.clear();
      for (absl::Span<const float> w : weights) {
        params_.emplace_back(w.begin(), w.end());
      }
      PS_RETURN_IF_ERROR(local.Evaluate(&m, /*whole=*/true));
      m.set_model_step(steps);
      m.set_finished(true);
      m.set_end_unix_s(UnixSeconds());
      PS_LOG_INFO(
          "model clock: %d steps of this worker's own; the model took "
          "%d pushes (of %d)",
          step, version, done_at);
      return on_step ? on_step(m) : absl::OkStatus();
    }
    const uint64_t model_step = version / workers;
    if (every > 0 && model_step / every > evaluated) {
      evaluated = model_step / every;
      PS_RETURN_IF_ERROR(local.Evaluate(&m, /*whole=*/true));
    }
    t0 = absl::Now();
    PS_ASSIGN_OR_RETURN(double loss_sum, local.Gradient(step));
    PS_ASSIGN_OR_RETURN(const TensorViews to_push,
                        GradientToPush(grads, pushed.data(), true));
    m.set_compute_s(absl::ToDoubleSeconds(absl::Now() - t0));
    m.set_loss(loss_sum / local.slice());
    m.set_samples(local.slice());
    t0 = absl::Now();
    std::unique_ptr<PsOp> push =
        client_->StartPush(rank, step, local.slice(), to_push, pull->reads());
    PS_RETURN_IF_ERROR(push->Wait());
    m.set_push_s(absl::ToDoubleSeconds(absl::Now() - t0));
    // The first shard's answer orders every push: version v is the v-th.
    const uint64_t pushed_as = push->reads().front().version;
    if (pushed_as == 0) {
      return absl::InternalError(
          "shard 0 answered a push with version 0 (it counts pushes from 1)");
    }
    m.set_model_step((pushed_as - 1) / workers);
    m.set_end_unix_s(UnixSeconds());
    if (on_step) PS_RETURN_IF_ERROR(on_step(m));
  }
}

absl::Status Trainer::AwaitPull(PsOp* pull, PsOp* pull_rows, int64_t held,
                                const std::vector<ShardRead>& reads,
                                const TensorViews& grads, float* pushed) {
  auto wait_both = [pull, pull_rows] {
    absl::Status st = pull->Wait();
    return pull_rows != nullptr ? FirstError(st, pull_rows->Wait()) : st;
  };
  if (!options_.adopt) return wait_both();
  // The pulls may wait on a barrier that only a stand-in's push of step
  // `held` completes (the dead process may have pushed its dense gradient
  // of `held` everywhere but not its rows), so they run on their own thread
  // while this one polls.
  std::future<absl::Status> waited = std::async(std::launch::async, wait_both);
  for (;;) {
    const bool done = waited.wait_for(std::chrono::milliseconds(50)) ==
                      std::future_status::ready;
    if (held >= 0) {
      absl::StatusOr<std::vector<StandIn>> fresh = options_.adopt(held);
      if (!fresh.ok()) {
        waited.wait();  // the pull is bounded by the barrier timeout
        return fresh.status();
      }
      for (StandIn& s : *fresh) {
        if (s.first_step <= held) {
          const absl::Status st = StandInStep(s, held, reads, grads, pushed);
          if (!st.ok()) {
            waited.wait();
            return st;
          }
        }
        stand_ins_.push_back(std::move(s));
      }
      // Handover (elastic.h): every push for step `held` is done here.
      for (auto it = stand_ins_.begin(); it != stand_ins_.end();) {
        absl::StatusOr<bool> released =
            it->release ? it->release(std::max(held + 1, it->first_step))
                        : false;
        if (!released.ok()) {
          waited.wait();
          return released.status();
        }
        it = *released ? stand_ins_.erase(it) : it + 1;
      }
    }
    if (done) return waited.get();
  }
}

absl::Status Trainer::StandInStep(const StandIn& s, int64_t step,
                                  const std::vector<ShardRead>& reads,
                                  const TensorViews& grads, float* pushed) {
  const JobConfig& c = options_.config;
  LocalStep local(c, s.rank, model_, data_);
  pstrain::v1::StepMetrics m;
  m.set_worker(s.rank);
  m.set_step(step);
  const bool final_step = step == c.training().steps();
  const bool evaluate =
      final_step || (c.evaluation().every_steps() > 0 && step > 0 &&
                     step % c.evaluation().every_steps() == 0);
  auto named = [&s](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat("standing in for rank ", s.rank,
                                                ": ", st.message()));
  };
  // Row-sparse tensors: the rows the rank's slice reads, pulled through the
  // rank's session at the step's clock. In sync every shard serves them as
  // of version `step` even where the dead process's push of `step` already
  // committed (server/sparse_shard.h), so the gradient is the one the rank
  // would have pushed. The model's dense weights are those of `step`.
  std::unique_ptr<PsOp> pull_rows;
  if (!sparse_.empty()) {
    absl::Time t0 = absl::Now();
    PS_ASSIGN_OR_RETURN(std::vector<RowSet> requests,
                        RowRequests(&local, step, !final_step, evaluate));
    std::vector<RowSet> rows;
    pull_rows = s.client->StartPullRows(s.rank, step, requests, &rows);
    if (absl::Status st = pull_rows->Wait(); !st.ok()) return named(st);
    PS_RETURN_IF_ERROR(SetPulledRows(&rows));
    m.set_pull_s(absl::ToDoubleSeconds(absl::Now() - t0));
  }
  if (final_step) {
    PS_RETURN_IF_ERROR(local.Evaluate(&m));
    m.set_end_unix_s(UnixSeconds());
    return s.on_step(m);
  }
  if (evaluate) PS_RETURN_IF_ERROR(local.Evaluate(&m));
  absl::Time t0 = absl::Now();
  PS_ASSIGN_OR_RETURN(double loss_sum, local.Gradient(step));
  PS_RETURN_IF_ERROR(model_->backend()->CopyToHost(
      *model_->gradient(), model_->num_dense_params(), pushed));
  m.set_compute_s(absl::ToDoubleSeconds(absl::Now() - t0));
  std::vector<RowSet> row_grads;
  if (!sparse_.empty()) {
    PS_ASSIGN_OR_RETURN(row_grads, TakeRowGradients());
  }
  t0 = absl::Now();
  std::unique_ptr<PsOp> push =
      s.client->StartPush(s.rank, step, local.slice(), grads, reads);
  std::unique_ptr<PsOp> push_rows;
  if (!sparse_.empty()) {
    push_rows = s.client->StartPushRows(s.rank, step, local.slice(), row_grads,
                                        pull_rows->reads());
  }
  absl::Status st = push->Wait();
  if (push_rows) st = FirstError(st, push_rows->Wait());
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("standing in for rank ", s.rank,
                                                ": ", st.message()));
  }
  m.set_push_s(absl::ToDoubleSeconds(absl::Now() - t0));
  m.set_loss(loss_sum / local.slice());
  m.set_samples(local.slice());
  m.set_end_unix_s(UnixSeconds());
  return s.on_step(m);
}

absl::Status Trainer::OverlappedStep(int64_t step, LocalStep* local,
                                     const MutableTensorViews& pull_into,
                                     const TensorViews& weights,
                                     const TensorViews& grads, float* pushed,
                                     pstrain::v1::StepMetrics* m) {
  const JobConfig& c = options_.config;
  const uint32_t rank = options_.rank;
  const int n = static_cast<int>(weights.size());
  const int64_t total = model_->num_dense_params();
  const int units = client_->shard_map().chunks_size();
  if (arrived_ == nullptr) {
    arrived_ = std::make_unique<TensorGate>(units);
    ready_ = std::make_unique<TensorGate>(units);
  }
  // Each chunk's share of the emulated time: its share of the parameters (a
  // layer's products scale with its weights, and a chunk of a layer's rows
  // is that share of them). A third of it is forward, two thirds backward,
  // as for the FLOPs of a dense layer.
  const absl::Duration target = local->EmulatedCompute(step);
  auto share = [&](int chunk, absl::Duration part) {
    return part *
           (static_cast<double>(client_->shard_map().chunks(chunk).length()) /
            total);
  };
  const absl::Time wait_deadline = absl::Now() + client_->BarrierTimeout();
  // The emulated device computes at its own pace: each chunk's share ends at
  // `clock` + share, `clock` being where the previous chunk's ended, or now
  // if this one had to wait for its weights. (Sleeping each share from now
  // would add every oversleep of the host's timer to the step.)
  absl::Time clock = absl::Now();
  absl::Duration compute = absl::ZeroDuration();
  auto run_share = [&](absl::Duration d) {
    clock += d;
    absl::SleepFor(clock - absl::Now());
    compute += d;
  };

  // Pull, and forward on each chunk as soon as its weights are in.
  const absl::Time t0 = absl::Now();
  arrived_->Reset();
  std::unique_ptr<PsOp> pull =
      client_->StartPull(rank, step, pull_into, arrived_.get());
  bool arriving = true;  // false: the pull failed (its Wait() says why)
  for (int i = 0; arriving && i < n; ++i) {
    for (int chunk : client_->tensor_chunks(i)) {
      if (!arrived_->IsOpen(chunk)) {
        arriving = arrived_->Wait(chunk, wait_deadline).ok();
        if (!arriving) break;
        clock = std::max(clock, absl::Now());
      }
      run_share(share(chunk, target / 3));
    }
  }
  PS_RETURN_IF_ERROR(pull->Wait());
  const absl::Time all_in = arrived_->last_open();
  m->set_pull_s(absl::ToDoubleSeconds(std::max(all_in, t0) - t0));
  PS_RETURN_IF_ERROR(model_->ShareParams(weights));  // overlap: no stand-ins
  if (c.evaluation().every_steps() > 0 && step > 0 &&
      step % c.evaluation().every_steps() == 0) {
    PS_RETURN_IF_ERROR(local->Evaluate(m));
  }

  // The math (the whole gradient, in one backend call), then backward's
  // emulated time, last layer first, each chunk's gradient pushed as soon
  // as its share is over. The values pushed are the same as without
  // overlap: only when each goes out changes.
  const absl::Time math_start = absl::Now();
  PS_ASSIGN_OR_RETURN(double loss_sum, local->Gradient(step, false));
  PS_ASSIGN_OR_RETURN(const TensorViews to_push,
                      GradientToPush(grads, pushed, true));
  const absl::Duration math = absl::Now() - math_start;
  compute += math;
  const absl::Duration backward =
      std::max(absl::ZeroDuration(), target * 2 / 3 - math);
  ready_->Reset();
  const absl::Time push_start = absl::Now();
  std::unique_ptr<PsOp> push = client_->StartPush(
      rank, step, local->slice(), to_push, pull->reads(), ready_.get());
  clock = std::max(clock, absl::Now());
  for (int i = n - 1; i >= 0; --i) {
    for (int chunk : client_->tensor_chunks(i)) {
      run_share(share(chunk, backward));
      ready_->Open(chunk);
    }
  }
  PS_RETURN_IF_ERROR(push->Wait());
  m->set_push_s(absl::ToDoubleSeconds(absl::Now() - push_start));
  m->set_compute_s(absl::ToDoubleSeconds(compute));
  m->set_loss(loss_sum / local->slice());
  m->set_samples(local->slice());
  return absl::OkStatus();
}

}  // namespace pstrain
