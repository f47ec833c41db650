#include "coordinator/coordinator_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "coordinator/job_spec.h"

namespace pstrain {

using grpc::ServerContext;

absl::StatusOr<std::unique_ptr<CoordinatorService>> CoordinatorService::Create(
    CoordinatorOptions options) {
  PS_ASSIGN_OR_RETURN(pstrain::v1::JobSpec job, MakeJobSpec(options.config));
  job.set_checkpoint_dir(options.checkpoint_dir);
  job.set_resume_from(options.resume_from);
  job.set_start_step(options.start_step);
  std::unique_ptr<MetricsCsvWriter> csv;
  if (!options.metrics_csv.empty()) {
    PS_ASSIGN_OR_RETURN(csv, MetricsCsvWriter::Create(options.metrics_csv));
  }
  std::unique_ptr<CoordinatorService> svc(
      new CoordinatorService(std::move(options), std::move(job)));
  absl::MutexLock lock(&svc->write_mu_);
  svc->csv_ = std::move(csv);
  return svc;
}

namespace {

StepLogOptions MakeStepLogOptions(const CoordinatorOptions& o) {
  StepLogOptions s;
  s.num_workers = o.config.job().workers();
  s.steps = o.config.training().steps();
  s.first_step = static_cast<int64_t>(o.start_step);
  s.classifier = IsClassifier(o.config.model());
  s.max_pending_steps = o.max_pending_steps;
  return s;
}

}  // namespace

CoordinatorService::CoordinatorService(CoordinatorOptions options,
                                       pstrain::v1::JobSpec job)
    : options_(std::move(options)),
      job_(std::move(job)),
      members_(job_.num_servers(), options_.config.job().workers(),
               job_.config().training().mode() == pstrain::v1::MODE_ALLREDUCE),
      leases_(job_.num_servers(), options_.config.job().workers(),
              absl::Seconds(options_.config.network().lease_s())),
      step_log_(MakeStepLogOptions(options_)) {
  bytes_pushed_.assign(options_.config.job().workers(), 0);
  bytes_pulled_.assign(options_.config.job().workers(), 0);
  if (MetricsRegistry* r = options_.metrics) {
    metrics_ = std::make_unique<Metrics>(Metrics{
        r->AddGauge("pstrain_coordinator_steps",
                    "Training steps completed by every worker."),
        r->AddGauge("pstrain_coordinator_loss",
                    "Training loss of the last complete step."),
        r->AddGauge("pstrain_coordinator_samples_per_second",
                    "Training throughput since the start."),
        r->AddGauge("pstrain_coordinator_eval_accuracy",
                    "Last evaluation accuracy (summed counts / total)."),
        r->AddGauge("pstrain_coordinator_live_workers",
                    "Workers registered and not yet finished."),
        r->AddGauge("pstrain_coordinator_registered_servers",
                    "Server shards registered."),
        r->AddCounter("pstrain_coordinator_samples_total",
                      "Training examples processed by all workers."),
    });
  }
}

CoordinatorService::~CoordinatorService() = default;

absl::Status CoordinatorService::EndedError() const {
  return absl::FailedPreconditionError(absl::StrCat(
      "job '", options_.config.job().name(), "' has already finished"));
}

bool CoordinatorService::AllServersRegisteredLocked() const {
  return members_.AllServersRegistered();
}

bool CoordinatorService::AllServersReadyLocked() const {
  return members_.AllServersReady();
}

grpc::Status CoordinatorService::RegisterServer(
    ServerContext* context, const pstrain::v1::RegisterServerRequest* request,
    pstrain::v1::RegisterServerResponse* response) {
  absl::MutexLock lock(&mu_);
  return ToGrpcStatus(RegisterServerLocked(*request, response));
}

absl::Status CoordinatorService::RegisterServerLocked(
    const pstrain::v1::RegisterServerRequest& request,
    pstrain::v1::RegisterServerResponse* response) {
  if (ended_) return EndedError();
  const int before = members_.registered_servers();
  PS_ASSIGN_OR_RETURN(
      int shard,
      members_.RegisterServer(request.address(), request.requested_shard()));
  response->set_shard(shard);
  response->set_session_id(members_.server_session(shard));
  if (members_.registered_servers() == before) return absl::OkStatus();
  if (metrics_ != nullptr) {
    metrics_->registered_servers->Set(members_.registered_servers());
  }
  job_.mutable_shard_map()->clear_server_addresses();
  for (const auto& a : members_.server_addresses())
    job_.mutable_shard_map()->add_server_addresses(a);
  PS_LOG_INFO("server shard %d registered at %s", shard, request.address());
  return absl::OkStatus();
}

grpc::Status CoordinatorService::GetJob(
    ServerContext* context, const pstrain::v1::GetJobRequest* request,
    pstrain::v1::JobSpec* response) {
  absl::MutexLock lock(&mu_);
  if (request->wait_for_servers() &&
      !mu_.AwaitWithDeadline(
          absl::Condition(this,
                          &CoordinatorService::AllServersRegisteredLocked),
          ServerDeadline(*context, options_.wait_cap))) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        "not every server shard has registered yet");
  }
  *response = job_;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ServerReady(
    ServerContext* context, const pstrain::v1::ServerReadyRequest* request,
    pstrain::v1::ServerReadyResponse* response) {
  absl::MutexLock lock(&mu_);
  absl::Status st = members_.CheckServerSession(
      request->shard(), request->session_id(), "ServerReady");
  if (st.ok()) st = members_.MarkServerReady(request->shard());
  if (st.ok() && !ended_) {
    const std::vector<std::string> addresses = members_.server_addresses();
    leases_.Hold(LeaseHolder::kServer, static_cast<int>(request->shard()),
                 absl::Now(), addresses[request->shard()]);
  }
  if (st.ok() && members_.AllServersReady())
    PS_LOG_INFO("all %d server shards ready", members_.num_servers());
  return ToGrpcStatus(st);
}

grpc::Status CoordinatorService::RegisterWorker(
    ServerContext* context, const pstrain::v1::RegisterWorkerRequest* request,
    pstrain::v1::RegisterWorkerResponse* response) {
  absl::MutexLock lock(&mu_);
  return ToGrpcStatus(RegisterWorkerLocked(*context, *request, response));
}

absl::Status CoordinatorService::RegisterWorkerLocked(
    const ServerContext& context,
    const pstrain::v1::RegisterWorkerRequest& request,
    pstrain::v1::RegisterWorkerResponse* response) {
  if (!mu_.AwaitWithDeadline(
          absl::Condition(this, &CoordinatorService::AllServersReadyLocked),
          ServerDeadline(context, options_.wait_cap))) {
    return absl::DeadlineExceededError("server shards are not ready yet");
  }
  if (ended_) return EndedError();
  const bool was_complete = members_.AllWorkersRegistered();
  PS_ASSIGN_OR_RETURN(int rank,
                      members_.RegisterWorker(request.requested_rank(),
                                              request.peer_address()));
  if (job_.config().training().mode() == pstrain::v1::MODE_ALLREDUCE) {
    PS_LOG_INFO("worker %d's ring peer at %s", rank, request.peer_address());
  }
  if (metrics_ != nullptr) metrics_->live_workers->Set(members_.live_workers());
  if (!was_complete && members_.AllWorkersRegistered()) {
    train_start_ = absl::Now();
    PS_LOG_INFO("all %d workers registered; training starts",
                members_.num_workers());
  }
  leases_.Hold(LeaseHolder::kWorker, rank, absl::Now(), context.peer());
  response->set_rank(rank);
  response->set_session_id(members_.worker_session(rank));
  *response->mutable_job() = job_;
  return absl::OkStatus();
}

grpc::Status CoordinatorService::Report(
    ServerContext* context, const pstrain::v1::ReportRequest* request,
    pstrain::v1::ReportResponse* response) {
  absl::Status st;
  {
    absl::MutexLock lock(&mu_);
    st = ReportLocked(*request, response);
  }
  FlushRows();
  return ToGrpcStatus(st);
}

absl::Status CoordinatorService::ReportLocked(
    const pstrain::v1::ReportRequest& request,
    pstrain::v1::ReportResponse* response) {
  const uint32_t worker = request.worker();
  PS_RETURN_IF_ERROR(
      members_.CheckWorkerSession(worker, request.session_id(), "Report"));
  PS_RETURN_IF_ERROR(step_log_.Add(worker, request.steps()));
  std::optional<uint64_t> last_step;
  for (const auto& m : request.steps()) {
    if (m.samples() > 0) last_step = std::max(last_step.value_or(0), m.step());
  }
  leases_.Renew(LeaseHolder::kWorker, static_cast<int>(worker), absl::Now(),
                last_step);
  if (request.steps_size() > 0) {
    bytes_pushed_[worker] = request.bytes_pushed();
    bytes_pulled_[worker] = request.bytes_pulled();
  }
  std::vector<MetricsRow> rows = step_log_.TakeCompleteRows(train_start_);
  UpdateGaugesLocked(rows);
  {
    absl::MutexLock q(&queue_mu_);
    queue_.insert(queue_.end(), rows.begin(), rows.end());
  }
  if (step_log_.divergence() && !outcome_.diverged) {
    const Divergence& d = *step_log_.divergence();
    outcome_.diverged = true;
    const std::string what =
        absl::StrCat("training diverged: ", d.eval ? "evaluation loss" : "loss",
                     " is ", d.value, " at step ", d.step);
    if (options_.config.training().fail_on_divergence()) {
      FailLocked({"worker", static_cast<int64_t>(d.worker), -1,
                  absl::StrCat(what, " (training.fail_on_divergence)")});
    } else {
      PS_LOG_WARN(
          "worker %d: %s; continuing (training.fail_on_divergence "
          "is false)",
          d.worker, what);
    }
  }
  if (!request.error().empty()) {
    // Workers prefix their errors with "worker R: "; the cause names it.
    absl::string_view message = request.error();
    absl::ConsumePrefix(&message, absl::StrCat("worker ", worker, ": "));
    FailLocked(
        {"worker", static_cast<int64_t>(worker), -1, std::string(message)});
  }
  // A final report may carry no step records (they went out in the batch
  // before), so the sender is named by `worker`, not by its records.
  if (request.done()) {
    members_.MarkWorkerDone(worker);
    leases_.Release(LeaseHolder::kWorker, static_cast<int>(worker));
    if (metrics_ != nullptr)
      metrics_->live_workers->Set(members_.live_workers());
    if (members_.AllWorkersDone() && !ended_) {
      ended_ = true;
      leases_.ReleaseAll();
      PS_LOG_INFO("all %d workers finished", members_.num_workers());
    }
  }
  response->set_stop(ended_);
  return absl::OkStatus();
}

void CoordinatorService::UpdateGaugesLocked(
    const std::vector<MetricsRow>& rows) {
  if (metrics_ == nullptr || rows.empty()) return;
  const StepTotals& t = step_log_.totals();
  uint64_t new_samples = 0;
  for (const MetricsRow& r : rows) {
    if (r.loss) new_samples += r.samples;
    if (r.eval_accuracy) metrics_->eval_accuracy->Set(*r.eval_accuracy);
  }
  metrics_->steps->Set(static_cast<double>(t.steps));
  metrics_->loss->Set(t.final_loss);
  metrics_->samples->Inc(static_cast<double>(new_samples));
  metrics_->samples_per_second->Set(t.wall_s > 0 ? t.samples / t.wall_s : 0);
}

void CoordinatorService::FlushRows() {
  absl::MutexLock write(&write_mu_);
  std::vector<MetricsRow> rows;
  {
    absl::MutexLock q(&queue_mu_);
    rows.assign(queue_.begin(), queue_.end());
    queue_.clear();
  }
  if (rows.empty()) return;
  if (csv_ != nullptr) {
    absl::Status st = csv_->Append(rows);
    if (!st.ok()) {
      PS_LOG_ERROR("%s; no more rows are written", st.message());
      csv_.reset();
    }
  }
  if (!options_.progress) return;
  const int64_t total = options_.config.training().steps();
  for (const MetricsRow& r : rows) {
    if (!r.loss) continue;  // the final evaluation row
    const absl::Time now = absl::Now();
    if (now - last_progress_ > absl::Seconds(1) || r.step + 1 == total) {
      last_progress_ = now;
      PS_LOG_INFO("step %d/%d  loss %.5f  %.0f samples/s  %.1fs%s", r.step + 1,
                  total, *r.loss, r.samples_per_s, r.wall_s,
                  r.eval_accuracy
                      ? absl::StrFormat("  eval acc %.6f", *r.eval_accuracy)
                      : "");
    }
  }
}

bool CoordinatorService::PeersKnownLocked() const {
  if (ended_) return true;
  if (!members_.AllPeersKnown()) return false;
  return options_.config.allreduce().backend() != AllReduceConfig::NCCL ||
         !nccl_unique_id_.empty();
}

grpc::Status CoordinatorService::GetPeers(
    ServerContext* context, const pstrain::v1::GetPeersRequest* request,
    pstrain::v1::GetPeersResponse* response) {
  absl::MutexLock lock(&mu_);
  return ToGrpcStatus(GetPeersLocked(*context, *request, response));
}

absl::Status CoordinatorService::GetPeersLocked(
    const ServerContext& context, const pstrain::v1::GetPeersRequest& request,
    pstrain::v1::GetPeersResponse* response) {
  if (job_.config().training().mode() != pstrain::v1::MODE_ALLREDUCE) {
    return absl::FailedPreconditionError(
        "GetPeers: the job is not in mode allreduce");
  }
  if (!members_.CheckWorker(request.rank()).ok()) {
    return absl::NotFoundError(absl::StrCat(
        "GetPeers: worker rank ", request.rank(), " has not registered"));
  }
  PS_RETURN_IF_ERROR(members_.CheckWorkerSession(
      request.rank(), request.session_id(), "GetPeers"));
  if (request.rank() == 0 && !request.nccl_unique_id().empty()) {
    nccl_unique_id_ = request.nccl_unique_id();
  }
  if (!mu_.AwaitWithDeadline(
          absl::Condition(this, &CoordinatorService::PeersKnownLocked),
          ServerDeadline(context, options_.wait_cap))) {
    const std::vector<int> missing = members_.missing_peers();
    return absl::DeadlineExceededError(
        missing.empty()
            ? "rank 0 has not published its NCCL unique id yet"
            : absl::StrCat("worker ranks ", absl::StrJoin(missing, ", "),
                           " have not registered yet"));
  }
  if (ended_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", options_.config.job().name(), "' has already ended"));
  }
  for (const auto& a : members_.peer_addresses())
    response->add_peer_addresses(a);
  response->set_nccl_unique_id(nccl_unique_id_);
  const int n = members_.num_workers();
  response->set_left_session_id(
      members_.worker_session((static_cast<int>(request.rank()) + n - 1) % n));
  return absl::OkStatus();
}

grpc::Status CoordinatorService::GetWorkerSessions(
    ServerContext* context,
    const pstrain::v1::GetWorkerSessionsRequest* request,
    pstrain::v1::GetWorkerSessionsResponse* response) {
  absl::MutexLock lock(&mu_);
  absl::Status st = members_.CheckServerSession(
      request->shard(), request->session_id(), "GetWorkerSessions");
  if (!st.ok()) return ToGrpcStatus(st);
  for (uint64_t id : members_.worker_sessions()) response->add_session_ids(id);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::JobStatus(
    ServerContext* context, const pstrain::v1::JobStatusRequest* request,
    pstrain::v1::JobStatusResponse* response) {
  absl::MutexLock lock(&mu_);
  if (request->process() == "server" || request->process() == "worker") {
    const bool server = request->process() == "server";
    const LeaseHolder holder =
        server ? LeaseHolder::kServer : LeaseHolder::kWorker;
    // A heartbeat from a process this coordinator never admitted (it was
    // restarted, or the process belongs to another run): NOT_FOUND, so the
    // process leaves instead of serving a job nobody runs.
    if (!ended_ && !leases_.Held(holder, request->id())) {
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          absl::StrCat("job '", options_.config.job().name(), "': ",
                       server ? "server shard " : "worker ", request->id(),
                       " holds no lease here (was the coordinator "
                       "restarted?)"));
    }
    std::optional<uint64_t> step;
    if (!server) step = request->step();
    leases_.Renew(holder, request->id(), absl::Now(), step);
  }
  response->set_finished(ended_);
  response->set_failed(outcome_.failed);
  response->set_message(outcome_.message);
  return grpc::Status::OK;
}

bool CoordinatorService::WaitForEnd(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(&ended_), deadline);
}

void CoordinatorService::Fail(const RunFailure& failure) {
  absl::MutexLock lock(&mu_);
  FailLocked(failure);
}

void CoordinatorService::FailLocked(const RunFailure& failure) {
  if (!outcome_.failed) {
    outcome_.failed = true;
    outcome_.failure = failure;
    outcome_.message = DescribeFailure(failure);
    PS_LOG_ERROR("job failed: %s", outcome_.message);
  }
  ended_ = true;
  leases_.ReleaseAll();
}

bool CoordinatorService::CheckLeases(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (ended_) return false;
  const std::optional<ExpiredLease> dead = leases_.Expired(now);
  if (!dead.has_value()) return false;
  const std::string what = dead->Describe(leases_.lease());
  PS_LOG_ERROR("%s", what);
  // training.on_failure: fail (the only policy so far) ends the job now.
  const bool server = dead->holder == LeaseHolder::kServer;
  FailLocked({server ? "server" : "worker", server ? -1 : dead->id,
              server ? dead->id : -1,
              absl::StrCat(dead->Cause(leases_.lease()),
                           " (training.on_failure: fail)")});
  return true;
}

bool CoordinatorService::TrainingStarted() const {
  absl::MutexLock lock(&mu_);
  return train_start_ != absl::InfinitePast();
}

bool CoordinatorService::StartedOrEndedLocked() const {
  return ended_ || train_start_ != absl::InfinitePast();
}

bool CoordinatorService::WaitForTrainingStart(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(
      absl::Condition(this, &CoordinatorService::StartedOrEndedLocked),
      deadline);
  return train_start_ != absl::InfinitePast();
}

JobOutcome CoordinatorService::Outcome() const {
  absl::MutexLock lock(&mu_);
  JobOutcome o = outcome_;
  const StepTotals& t = step_log_.totals();
  o.steps = t.steps;
  o.samples = t.samples;
  o.wall_s = t.wall_s;
  o.final_loss = t.final_loss;
  o.has_accuracy = t.has_accuracy;
  o.final_accuracy = t.final_accuracy;
  o.final_eval_loss = t.final_eval_loss;
  for (uint64_t b : bytes_pushed_) o.bytes_pushed += b;
  for (uint64_t b : bytes_pulled_) o.bytes_pulled += b;
  return o;
}

std::vector<std::string> CoordinatorService::ServerAddresses() const {
  absl::MutexLock lock(&mu_);
  return members_.server_addresses();
}

}  // namespace pstrain
