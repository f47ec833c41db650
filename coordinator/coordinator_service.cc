#include "coordinator/coordinator_service.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/client_text.h"
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
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<RowWriter> rows,
      RowWriter::Create({options.metrics_csv, options.progress,
                         options.config.training().steps(), options.metrics}));
  return std::unique_ptr<CoordinatorService>(new CoordinatorService(
      std::move(options), std::move(job), std::move(rows)));
}

namespace {

StepLogOptions MakeStepLogOptions(const CoordinatorOptions& o) {
  StepLogOptions s;
  s.num_workers = o.config.job().workers();
  s.steps = o.config.training().steps();
  s.first_step = static_cast<int64_t>(o.start_step);
  s.classifier = IsClassifier(o.config.model());
  s.max_pending_steps = o.max_pending_steps;
  // Sync with backup workers: a step is the model's once N - b pushed it.
  const auto& t = o.config.training();
  if (t.mode() == pstrain::v1::MODE_SYNC && t.backup_workers() > 0) {
    s.records_per_row = s.num_workers - t.backup_workers();
  }
  // Async on the model clock: rows are model steps (N pushes each).
  s.model_clock = t.mode() == pstrain::v1::MODE_ASYNC &&
                  t.clock() == pstrain::v1::TrainingConfig::CLOCK_MODEL;
  return s;
}

// RegisterWorkerRequest.adopter: only with `adopt`, a rank of the job
// other than the one adopted.
absl::Status CheckAdopter(const pstrain::v1::RegisterWorkerRequest& request,
                          int num_workers) {
  if (!request.has_adopter()) return absl::OkStatus();
  if (!request.adopt()) {
    return absl::InvalidArgumentError(
        "RegisterWorker: adopter is only for a registration with adopt");
  }
  if (request.adopter() >= static_cast<uint32_t>(num_workers) ||
      static_cast<int64_t>(request.adopter()) == request.requested_rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RegisterWorker: adopter must be a rank in [0, ",
                     num_workers, ") other than requested_rank ",
                     request.requested_rank(), "; got ", request.adopter()));
  }
  return absl::OkStatus();
}

}  // namespace

CoordinatorService::CoordinatorService(CoordinatorOptions options,
                                       pstrain::v1::JobSpec job,
                                       std::unique_ptr<RowWriter> rows)
    : options_(std::move(options)),
      rows_(std::move(rows)),
      job_(std::move(job)),
      members_(job_.num_servers(), options_.config.job().workers(),
               job_.config().training().mode() == pstrain::v1::MODE_ALLREDUCE),
      leases_(job_.num_servers(), options_.config.job().workers(),
              absl::Seconds(options_.config.network().lease_s())),
      step_log_(MakeStepLogOptions(options_)),
      outcome_(options_.config.job().workers()),
      notes_(options_.supervision_file),
      policy_(FailurePolicy::ForJob(options_.config.training())),
      recovery_(policy_->max_rollbacks(),
                absl::Seconds(options_.config.training().restart_timeout_s())) {
  start_steps_.assign(options_.config.job().workers(), job_.start_step());
  if (!options_.resume_from.empty()) {
    notes_.Resumed(options_.start_step, options_.resume_from);
  }
  rollbacks_ = std::make_unique<Rollbacks>(
      policy_.get(), options_.config.training(), &recovery_, &members_,
      &leases_, &step_log_, &job_, &notes_, &events_);
  if (std::optional<ElasticOptions> e =
          policy_->Elastic(options_.config.job().workers())) {
    elastic_ = std::make_unique<ElasticRanks>(
        *e, policy_.get(), &members_, &leases_, &step_log_, &recovery_,
        &events_, &notes_, &mu_, options_.wait_cap);
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
  if (policy_->NewcomerReplacesHolder()) {
    // A replacement (restart): the shard it asks for, or the one its
    // address held, is freed first; a holder with a lease (ready) is lost.
    const int held = members_.ShardOf(request.address());
    const int shard = held >= 0 ? held : request.requested_shard();
    if (members_.ServerHeld(shard) &&
        recovery_.Covers(LeaseHolder::kServer, shard)) {
      recovery_.Refill(LeaseHolder::kServer, shard);
      members_.VacateServer(shard);
    } else if (members_.ServerHeld(shard) &&
               leases_.Held(LeaseHolder::kServer, shard)) {
      rollbacks_->Lose(
          LeaseHolder::kServer, shard,
          absl::StrCat("replaced: a new server registered for it from ",
                       request.address()));
      if (ended_) return EndedError();
    }
  }
  const int before = members_.registered_servers();
  PS_ASSIGN_OR_RETURN(
      int shard,
      members_.RegisterServer(request.address(), request.requested_shard()));
  response->set_shard(shard);
  response->set_session_id(members_.server_session(shard));
  response->set_coordinator_key(coordinator_key_);
  if (members_.registered_servers() == before) return absl::OkStatus();
  rows_->SetRegisteredServers(members_.registered_servers());
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
  if (request->wait_for_generation() > 0) {
    // A worker waiting for its rollback (training.on_failure: restart).
    const uint64_t g = request->wait_for_generation();
    GenerationWait wait{this, g};
    if (!mu_.AwaitWithDeadline(absl::Condition(&GenerationReady, &wait),
                               ServerDeadline(*context, options_.wait_cap))) {
      return grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat("generation ", g, " has not started yet (waiting for ",
                       recovery_.recovering() ? recovery_.Missing()
                                              : std::string("a failure"),
                       ")"));
    }
    if (ended_) return ToGrpcStatus(EndedError());
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
  if (st.ok() && recovery_.Covers(LeaseHolder::kServer,
                                  static_cast<int>(request->shard()))) {
    recovery_.Filled(LeaseHolder::kServer, static_cast<int>(request->shard()));
    PS_LOG_INFO("replacement of server shard %d is ready", request->shard());
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
  PS_RETURN_IF_ERROR(CheckAdopter(request, members_.num_workers()));
  int asked = request.requested_rank();
  if (policy_->RingMembers()) {
    PS_RETURN_IF_ERROR(elastic_->CheckRingMember(request, &asked));
  }
  if (policy_->NewcomerReplacesHolder() && members_.WorkerHeld(asked)) {
    // A replacement (restart): the rank's holder, if it holds a lease, is
    // lost; if it is part of the recovery under way, this is its
    // replacement registering again.
    if (recovery_.Covers(LeaseHolder::kWorker, asked)) {
      members_.VacateWorker(asked);
    } else if (leases_.Held(LeaseHolder::kWorker, asked)) {
      rollbacks_->Lose(LeaseHolder::kWorker, asked,
                       "replaced: a new worker registered for its rank");
      if (ended_) return EndedError();
    }
  }
  if (policy_->Rejoins() && elastic_->Handles(request.requested_rank())) {
    return RejoinLocked(context, request, response);
  }
  if (request.adopt() && !policy_->RingMembers()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RegisterWorker: adopt is only for a rank whose worker was declared "
        "dead (training.on_failure: elastic); rank ",
        request.requested_rank(), " is not one"));
  }
  const bool was_complete = members_.AllWorkersRegistered();
  PS_ASSIGN_OR_RETURN(int rank,
                      members_.RegisterWorker(asked, request.peer_address()));
  if (job_.config().training().mode() == pstrain::v1::MODE_ALLREDUCE) {
    PS_LOG_INFO("worker %d's ring peer at %s", rank, request.peer_address());
  }
  rows_->SetLiveWorkers(members_.live_workers());
  if (!was_complete && members_.AllWorkersRegistered() &&
      train_start_ == absl::InfinitePast()) {  // not a replacement
    train_start_ = absl::Now();
    PS_LOG_INFO("all %d workers registered; training starts",
                members_.num_workers());
  }
  leases_.Hold(LeaseHolder::kWorker, rank, absl::Now(), context.peer());
  if (recovery_.Covers(LeaseHolder::kWorker, rank)) {
    recovery_.Filled(LeaseHolder::kWorker, rank);
    PS_LOG_INFO("replacement of worker %d registered (generation %d)", rank,
                recovery_.generation());
  }
  if (!request.adopt()) notes_.Registered(rank);
  if (policy_->RingMembers()) {
    elastic_->RingMemberRegistered(rank, request);
  }
  response->set_rank(rank);
  response->set_session_id(members_.worker_session(rank));
  *response->mutable_job() = job_;
  response->set_start_step(job_.start_step());
  return absl::OkStatus();
}

absl::Status CoordinatorService::RejoinLocked(
    const ServerContext& context,
    const pstrain::v1::RegisterWorkerRequest& request,
    pstrain::v1::RegisterWorkerResponse* response) {
  PS_ASSIGN_OR_RETURN(const ElasticRanks::Rejoined r,
                      elastic_->Rejoin(context, request, job_.start_step()));
  start_steps_[r.rank] = r.start_step;
  rows_->SetLiveWorkers(members_.live_workers());
  if (!request.adopt()) notes_.Registered(r.rank);
  response->set_rank(r.rank);
  response->set_session_id(r.session);
  *response->mutable_job() = job_;
  response->set_start_step(r.start_step);
  response->set_rejoined(true);
  return absl::OkStatus();
}

grpc::Status CoordinatorService::ReleaseRank(
    ServerContext* context, const pstrain::v1::ReleaseRankRequest* request,
    pstrain::v1::ReleaseRankResponse* response) {
  absl::MutexLock lock(&mu_);
  return ToGrpcStatus(ReleaseRankLocked(*request));
}

absl::Status CoordinatorService::ReleaseRankLocked(
    const pstrain::v1::ReleaseRankRequest& request) {
  if (!policy_->HandsOver()) {
    return absl::FailedPreconditionError(
        "ReleaseRank: only for training.on_failure: elastic in mode sync");
  }
  if (ended_) return EndedError();
  return elastic_->Release(request);
}

bool CoordinatorService::DepartLocked(const ExpiredLease& dead) {
  const ElasticRanks::Departure departure = elastic_->Depart(dead);
  rows_->SetLiveWorkers(members_.live_workers());
  switch (departure) {
    case ElasticRanks::Departure::kJobFailed:
      return false;
    case ElasticRanks::Departure::kRolledBack:
      return !ended_;
    case ElasticRanks::Departure::kGoesOn:
      break;
  }
  AbandonLocked();
  return true;
}

void CoordinatorService::AbandonLocked() {
  elastic_->AbandonStranded();
  QueueRowsLocked();
  if (!ended_ && AllWorkersDoneLocked()) {
    ended_ = true;
    leases_.ReleaseAll();
    PS_LOG_INFO("every worker finished (%d live)",
                elastic_->workers().live_workers());
  }
}

bool CoordinatorService::AllWorkersDoneLocked() const {
  const std::vector<bool> done = members_.done_workers();
  for (int r = 0; r < static_cast<int>(done.size()); ++r) {
    if (done[r]) continue;
    if (elastic_ != nullptr &&
        elastic_->workers().state(r) == ElasticWorkers::State::kAbandoned) {
      continue;
    }
    return false;
  }
  return true;
}

void CoordinatorService::QueueRowsLocked() {
  rows_->Queue(step_log_.TakeCompleteRows(train_start_), step_log_.totals());
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
  for (const auto& m : request.steps()) {
    PS_RETURN_IF_ERROR(CheckClientString("StepMetrics.checkpoint",
                                         m.checkpoint(), kMaxPathBytes));
  }
  if (request.generation() != recovery_.generation()) {
    return absl::AbortedError(
        absl::StrCat("report of generation ", request.generation(),
                     " refused: the job is in generation ",
                     recovery_.generation(), " (rolled back to step ",
                     recovery_.generation_step(), "); nothing changed"));
  }
  if (request.has_resumed_at_step() &&
      (request.generation() == 0 ||
       request.resumed_at_step() != recovery_.generation_step())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Report: resumed_at_step ", request.resumed_at_step(),
        " is not the start step of generation ", request.generation(),
        request.generation() == 0
            ? " (generation 0 has no rollback)"
            : absl::StrCat(" (", recovery_.generation_step(), ")"),
        "; nothing changed"));
  }
  PS_RETURN_IF_ERROR(step_log_.Add(worker, request.steps()));
  if (request.has_resumed_at_step()) {
    notes_.WorkerResumed(static_cast<int>(worker), request.generation(),
                         request.resumed_at_step());
  }
  std::optional<uint64_t> last_step;
  for (const auto& m : request.steps()) {
    if (m.samples() > 0) last_step = std::max(last_step.value_or(0), m.step());
    // Mode allreduce: rank 0 wrote this checkpoint after the step.
    if (!m.checkpoint().empty()) {
      PS_LOG_INFO("checkpoint of step %d saved: %s (by worker %d)",
                  m.step() + 1, m.checkpoint(), worker);
      notes_.CheckpointSaved(m.step() + 1, m.checkpoint());
    }
  }
  leases_.Renew(LeaseHolder::kWorker, static_cast<int>(worker), absl::Now(),
                last_step);
  if (request.steps_size() > 0) {
    outcome_.SetBytes(worker, request.bytes_pushed(), request.bytes_pulled());
  }
  QueueRowsLocked();
  if (step_log_.divergence() && outcome_.Diverged()) {
    const Divergence& d = *step_log_.divergence();
    const std::string what = DivergenceText(d);
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
    RunFailure failure = WorkerErrorFailure(worker, request.error());
    if (request.stopped()) {
      FailOnStopLocked(std::move(failure));
    } else {
      FailLocked(failure);
    }
  }
  // A final report may carry no step records (they went out in the batch
  // before), so the sender is named by `worker`, not by its records.
  if (request.done()) {
    // Once per rank (a resent final report is no second end).
    if (request.error().empty() && !members_.done_workers()[worker]) {
      notes_.Done(static_cast<int>(worker),
                  request.has_weights_fingerprint()
                      ? std::optional<uint64_t>(request.weights_fingerprint())
                      : std::nullopt);
    }
    members_.MarkWorkerDone(worker);
    leases_.Release(LeaseHolder::kWorker, static_cast<int>(worker));
    rows_->SetLiveWorkers(members_.live_workers());
    // Elastic: a finished worker may leave a dead rank without anybody to
    // take it over.
    if (elastic_ != nullptr) AbandonLocked();
    if (AllWorkersDoneLocked() && !ended_) {
      ended_ = true;
      leases_.ReleaseAll();
      PS_LOG_INFO("all %d workers finished", members_.num_workers());
    }
  }
  response->set_stop(ended_);
  return absl::OkStatus();
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
  for (int r = 0; r < members_.num_workers(); ++r) {
    response->add_departed(elastic_ != nullptr &&
                           elastic_->workers().vacant(r));
    response->add_start_steps(start_steps_[r]);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::JobStatus(
    ServerContext* context, const pstrain::v1::JobStatusRequest* request,
    pstrain::v1::JobStatusResponse* response) {
  if (absl::Status st = CheckClientString("JobStatusRequest.process",
                                          request->process(), kMaxNameBytes);
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  absl::MutexLock lock(&mu_);
  if (request->process() == "server" || request->process() == "worker") {
    const bool server = request->process() == "server";
    const LeaseHolder holder =
        server ? LeaseHolder::kServer : LeaseHolder::kWorker;
    // A worker whose rank was declared dead (elastic) or given to another
    // process: PERMISSION_DENIED, so it stops. Heartbeats renew leases, so
    // every one must carry the holder's session (0 or a made-up id is
    // refused): nobody else can keep a silent process "alive".
    if (!server && !ended_ && members_.CheckWorker(request->id()).ok()) {
      const absl::Status st = members_.CheckWorkerSession(
          request->id(), request->session_id(), "JobStatus");
      if (!st.ok()) return ToGrpcStatus(st);
      if (elastic_ != nullptr) {
        for (uint32_t d : elastic_->workers().AdoptionsFor(
                 request->id(), members_.done_workers())) {
          response->add_adopt_ranks(d);
        }
        response->set_release_rank(
            elastic_->workers().ReleaseRequested(request->id()));
      }
    }
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
    if (server && !ended_) {
      const absl::Status st = members_.CheckServerSession(
          request->id(), request->session_id(), "JobStatus");
      if (!st.ok()) return ToGrpcStatus(st);
    }
    if (server && !ended_ && !request->stopping().empty()) {
      // The server's last word: it stops on its own (a signal) before the
      // job ends. Recorded now, not a lease later.
      std::string why(request->stopping().substr(0, kMaxMessageBytes));
      PS_LOG_ERROR("server shard %d is stopping: %s", request->id(), why);
      const bool rolls_back =
          policy_->OnLost(LeaseHolder::kServer) == LossResponse::kRollBack;
      RunFailure own{
          "server", -1, request->id(),
          absl::StrCat(
              "stopped: ", why,
              rolls_back ? "" : policy_->FailureNote(LeaseHolder::kServer))};
      if (rolls_back && SignalStopCauseLocked(own).process == "server") {
        rollbacks_->Lose(LeaseHolder::kServer, request->id(), own.message);
      } else {
        FailOnStopLocked(std::move(own));
      }
      response->set_finished(ended_);
      response->set_failed(outcome_.failed());
      response->set_message(outcome_.message());
      return grpc::Status::OK;
    }
    std::optional<uint64_t> step;
    if (!server) step = request->step();
    leases_.Renew(holder, request->id(), absl::Now(), step);
  }
  if (ended_ && request->process() == "worker" && request->id() >= 0 &&
      request->id() < static_cast<int>(end_unseen_.size())) {
    end_unseen_[request->id()] = false;
  }
  response->set_finished(ended_);
  response->set_failed(outcome_.failed());
  response->set_message(outcome_.message());
  response->set_generation(recovery_.generation());
  response->set_recovering(recovery_.recovering());
  response->set_generation_step(recovery_.generation_step());
  if (elastic_ != nullptr)
    response->set_membership_epoch(elastic_->workers().epoch());
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

bool CoordinatorService::AwaitWorkersSawEnd(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto all_saw = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::none_of(end_unseen_.begin(), end_unseen_.end(),
                        [](bool unseen) { return unseen; });
  };
  return mu_.AwaitWithDeadline(absl::Condition(&all_saw), deadline);
}

void CoordinatorService::SetStopRequested(
    std::function<bool()> stop_requested) {
  absl::MutexLock lock(&mu_);
  stop_requested_ = std::move(stop_requested);
}

void CoordinatorService::FailOnStopLocked(RunFailure own) {
  const RunFailure cause = SignalStopCauseLocked(std::move(own));
  const bool first = !outcome_.failed();
  FailLocked(cause);
  if (first && cause.process != "coordinator") failed_on_stop_report_ = true;
}

bool CoordinatorService::FailedOnAStopReport() const {
  absl::MutexLock lock(&mu_);
  return failed_on_stop_report_;
}

void CoordinatorService::CoordinatorStoppedToo() {
  absl::MutexLock lock(&mu_);
  if (!failed_on_stop_report_) return;
  PS_LOG_ERROR("%s too: the job's cause is the coordinator's stop",
               kCoordinatorStopped);
  outcome_.Reattribute(
      {"coordinator", -1, -1, std::string(kCoordinatorStopped)});
  failed_on_stop_report_ = false;
}

RunFailure CoordinatorService::SignalStopCauseLocked(RunFailure own) const {
  if (stop_requested_ && stop_requested_()) {
    return {"coordinator", -1, -1, std::string(kCoordinatorStopped)};
  }
  return own;
}

void CoordinatorService::FailLocked(const RunFailure& failure) {
  if (outcome_.Fail(failure, absl::Now())) {
    end_unseen_.assign(members_.num_workers(), false);
    for (int r = 0; r < members_.num_workers(); ++r) {
      end_unseen_[r] = leases_.Held(LeaseHolder::kWorker, r) &&
                       !(failure.process == "worker" && failure.rank == r);
    }
    PS_LOG_ERROR("job failed: %s", outcome_.message());
    // Before any process can learn it (JobStatus takes mu_): a supervisor
    // seeing a process exit then knows the job failed first.
    notes_.Failed();
  }
  ended_ = true;
  leases_.ReleaseAll();
}

bool CoordinatorService::CheckLeases(absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return false;
    if (std::optional<RunFailure> overdue = rollbacks_->Overdue(now)) {
      FailLocked(*overdue);
      return true;
    }
    const std::optional<ExpiredLease> dead = leases_.Expired(now);
    if (!dead.has_value()) return false;
    notes_.Dead(dead->holder == LeaseHolder::kServer, dead->id);
    switch (policy_->OnLost(dead->holder)) {
      case LossResponse::kFailJob:
        return FailOnLeaseLocked(*dead);
      case LossResponse::kRollBack:
        PS_LOG_ERROR("%s", dead->Describe(leases_.lease()));
        rollbacks_->Lose(dead->holder, dead->id, dead->Cause(leases_.lease()));
        return ended_;
      case LossResponse::kTakeOver:
      case LossResponse::kHostAndRollBack:
        PS_LOG_ERROR("%s", dead->Describe(leases_.lease()));
        if (!DepartLocked(*dead)) return true;
        break;
    }
  }
  FlushRows();  // rows that completed without the departed rank
  return false;
}

bool CoordinatorService::FailOnLeaseLocked(const ExpiredLease& dead) {
  PS_LOG_ERROR("%s", dead.Describe(leases_.lease()));
  const bool server = dead.holder == LeaseHolder::kServer;
  FailLocked({server ? "server" : "worker", server ? -1 : dead.id,
              server ? dead.id : -1,
              absl::StrCat(dead.Cause(leases_.lease()),
                           policy_->FailureNote(dead.holder))});
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
  return outcome_.Summary(step_log_.totals(), train_start_);
}

std::vector<std::string> CoordinatorService::ServerAddresses() const {
  absl::MutexLock lock(&mu_);
  return members_.server_addresses();
}

bool CoordinatorService::GenerationReady(GenerationWait* wait) {
  return wait->service->ended_ ||
         wait->service->rollbacks_->Recovered(wait->generation);
}

std::optional<CoordinatorService::RollbackOrder>
CoordinatorService::RollbackDue() const {
  absl::MutexLock lock(&mu_);
  if (ended_ || !rollbacks_->Due()) return std::nullopt;
  return RollbackOrder{recovery_.generation(), members_.server_addresses()};
}

bool CoordinatorService::FinishRollback(uint64_t generation,
                                        const std::string& checkpoint,
                                        uint64_t step) {
  absl::MutexLock lock(&mu_);
  return !ended_ && rollbacks_->Finish(generation, checkpoint, step);
}

}  // namespace pstrain
