#include "server/server_node.h"

#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "checkpoint/checkpoint.h"
#include "common/coordinator_lease.h"
#include "common/grpc_util.h"
#include "common/host_name.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "common/tcp_congestion.h"
#include "coordinator/failure_policy.h"
#include "proto/pstrain.grpc.pb.h"
#include "server/ps_service.h"
#include "server/shard.h"
#include "server/shard_checkpoint.h"
#include "server/worker_sessions.h"

namespace pstrain {
namespace {

// Whether the coordinator says the job is over (finished or failed).
bool JobIsOver(pstrain::v1::Coordinator::Stub& coord, absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout);
  pstrain::v1::JobStatusResponse status;
  return coord.JobStatus(&ctx, {}, &status).ok() && status.finished();
}

// Shard `shard_id` of `job`: restored by range from `checkpoint` (a step
// directory, whatever shard layout wrote it) when not empty, else the
// initial state; standing cuts set when the job checkpoints. Used at start
// (JobSpec.resume_from) and by Rollback (training.on_failure: restart).
absl::StatusOr<std::shared_ptr<Shard>> BuildShard(
    const pstrain::v1::JobSpec& job, uint32_t shard_id,
    const std::string& checkpoint) {
  absl::StatusOr<std::unique_ptr<Shard>> shard =
      Shard::Create(ShardOptionsFromJob(job, shard_id));
  if (!shard.ok()) {
    return absl::Status(
        shard.status().code(),
        absl::StrCat("cannot build shard: ", shard.status().message()));
  }
  if (!checkpoint.empty()) {
    absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
        CheckpointReader::Open(CheckpointEnv::Default(), checkpoint);
    absl::Status restored =
        reader.ok() ? RestoreShard(**reader, ShardOptionsFromJob(job, shard_id),
                                   **shard)
                    : reader.status();
    if (!restored.ok()) {
      return absl::Status(restored.code(),
                          absl::StrCat("cannot restore from ", checkpoint, ": ",
                                       restored.message()));
    }
  }
  if (!job.checkpoint_dir().empty()) {
    (*shard)->SetStandingCuts(job.config().checkpoint().every_steps(),
                              job.config().training().steps());
  }
  return std::shared_ptr<Shard>(std::move(*shard));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerNode>> ServerNode::Create(
    ServerNodeOptions options) {
  if (options.node.coordinator.empty()) {
    return absl::InvalidArgumentError("coordinator address required");
  }
  std::unique_ptr<ServerNode> node(new ServerNode());
  PS_ASSIGN_OR_RETURN(node->server_credentials_,
                      MakeServerCredentials(options.node.tls));
  PS_ASSIGN_OR_RETURN(node->channel_credentials_,
                      MakeChannelCredentials(options.node.tls));
  if (options.metrics == nullptr) {
    node->own_metrics_ = std::make_unique<MetricsRegistry>();
    options.metrics = node->own_metrics_.get();
  }
  PS_RETURN_IF_ERROR(
      ValidateHostName("--advertise_host", options.advertise_host));
  PsServiceOptions service_options;
  service_options.metrics = options.metrics;
  node->service_ = std::make_unique<ParameterServerService>(service_options);
  node->service_->SetShutdownCallback(
      [n = node.get()](const pstrain::v1::ShutdownRequest& r) {
        PS_LOG_INFO("shutdown requested: %s", r.reason());
        n->shutdown_job_failed_ = r.job_failed();
        n->shutdown_reason_ = r.reason();
        n->shutdown_.Notify();
      });
  // Listening here, not in Run: a busy port is a start-up error (exit 2).
  PS_ASSIGN_OR_RETURN(
      StartedServer started,
      StartGrpcServer(options.bind, options.port, node->server_credentials_,
                      {node->service_.get()}, PsServerChannelArgs()));
  // network.tcp_congestion_control: every connection the listener accepts
  // from here on (workers dial after registration) takes it.
  if (const std::string& cc =
          options.node.file_config.network().tcp_congestion_control();
      !cc.empty()) {
    PS_RETURN_IF_ERROR(
        SetListenersCongestionControl(started.port, cc).status());
    PS_LOG_INFO(
        "TCP congestion control %s on the connections this server "
        "accepts (network.tcp_congestion_control)",
        cc);
  }
  node->server_ = std::move(started.server);
  node->port_ = started.port;
  // NOT_SERVING until the shard holds its weights.
  node->server_->GetHealthCheckService()->SetServingStatus(false);
  node->options_ = std::move(options);
  return node;
}

absl::Status ServerNode::Run(const std::function<bool()>& stop) {
  const NodeOptions& node = options_.node;
  const std::string& coordinator = node.coordinator;
  const absl::Duration rpc_timeout = node.rpc_timeout;
  const absl::Time startup_deadline = absl::Now() + node.startup_timeout;

  ParameterServerService& service = *service_;
  absl::Notification& shutdown = shutdown_;
  grpc::Server* server = server_.get();
  const std::string address = absl::StrCat(options_.advertise_host, ":", port_);
  // Stops serving on every way out: pulls blocked on a barrier are woken
  // first, so that Shutdown does not wait for their deadlines.
  struct Stopper {
    grpc::Server* server;
    ParameterServerService* service;
    ~Stopper() {
      server->GetHealthCheckService()->SetServingStatus(false);
      service->CloseShard();
      ShutdownGrpcServer(server, absl::Milliseconds(500));
    }
  } stopper{server, &service};

  // Shared with the session table's fetch, which pulls may still run while
  // the server shuts down.
  std::shared_ptr<pstrain::v1::Coordinator::Stub> coord =
      pstrain::v1::Coordinator::NewStub(
          MakeChannel(coordinator, channel_credentials_));
  pstrain::v1::RegisterServerResponse reg;
  absl::Status st =
      CallUntil(startup_deadline, "coordinator at " + coordinator, rpc_timeout,
                stop, [&](grpc::ClientContext* ctx) {
                  pstrain::v1::RegisterServerRequest req;
                  req.set_address(address);
                  req.set_requested_shard(options_.requested_shard);
                  return coord->RegisterServer(ctx, req, &reg);
                });
  if (stop()) {
    PS_LOG_INFO("stopped while registering");
    return absl::OkStatus();
  }
  if (st.code() == absl::StatusCode::kFailedPrecondition &&
      JobIsOver(*coord, rpc_timeout)) {
    // E.g. a StatefulSet restarted this pod after the end: a distinct exit
    // code, so that nobody counts it as a success.
    return JobOverError(absl::StrCat("registration refused: ", st.message()));
  }
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("registration failed: ", st.message()));
  }
  if (options_.set_log_role) SetLogRole(absl::StrCat("server/", reg.shard()));
  // From now on the coordinator may stop this shard (a job that ends before
  // the shard has its job); the rollback bounds follow with the job.
  service.SetCoordinator(reg.coordinator_key(), "", 0);
  pstrain::v1::JobSpec job;
  st = CallUntil(startup_deadline, "all server shards to register", rpc_timeout,
                 stop, [&](grpc::ClientContext* ctx) {
                   pstrain::v1::GetJobRequest req;
                   req.set_wait_for_servers(true);
                   return coord->GetJob(ctx, req, &job);
                 });
  if (stop()) {
    PS_LOG_INFO("stopped while waiting for the other shards");
    return absl::OkStatus();
  }
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("no job: ", st.message()));
  }
  absl::StatusOr<std::shared_ptr<Shard>> shard =
      BuildShard(job, reg.shard(), job.resume_from());
  if (!shard.ok()) return shard.status();
  if (!job.resume_from().empty()) {
    PS_LOG_INFO("restored from %s (step %d)", job.resume_from(),
                job.start_step());
  }
  if (!job.checkpoint_dir().empty()) {
    service.SetCheckpointRoot(job.checkpoint_dir(), job.num_servers());
  }
  // Only the coordinator may stop, checkpoint or roll back this shard.
  service.SetCoordinator(
      reg.coordinator_key(), job.resume_from(),
      FailurePolicy::ForJob(job.config().training())->max_shard_generation());
  // training.on_failure: restart: the coordinator may order a rollback.
  service.SetGeneration(job.generation());
  service.SetRollbackFactory(
      [job, shard_id = reg.shard()](
          const std::string& checkpoint,
          uint64_t step) -> absl::StatusOr<std::shared_ptr<Shard>> {
        PS_ASSIGN_OR_RETURN(std::shared_ptr<Shard> fresh,
                            BuildShard(job, shard_id, checkpoint));
        PS_LOG_INFO("rolled back to step %d (%s)", step,
                    checkpoint.empty() ? "the initial state" : checkpoint);
        return fresh;
      });
  PS_LOG_INFO("serving %d chunks (%d elements) at %s",
              (*shard)->chunks().size(), (*shard)->num_elements(), address);
  const uint32_t shard_id = reg.shard();
  const uint64_t session_id = reg.session_id();
  std::shared_ptr<Shard> serving(std::move(*shard));
  // The fetch also hands the shard the elastic membership (departed ranks,
  // start steps) before any pull is checked against the new table.
  auto sessions = std::make_shared<WorkerSessions>(
      job.config().job().workers(),
      [coord, shard_id, session_id, rpc_timeout,
       target = std::weak_ptr<Shard>(serving)](
          absl::Time deadline) -> absl::StatusOr<std::vector<uint64_t>> {
        grpc::ClientContext ctx;
        ctx.set_deadline(
            absl::ToChronoTime(std::min(deadline, absl::Now() + rpc_timeout)));
        pstrain::v1::GetWorkerSessionsRequest req;
        req.set_shard(shard_id);
        req.set_session_id(session_id);
        pstrain::v1::GetWorkerSessionsResponse resp;
        PS_RETURN_IF_ERROR(
            FromGrpcStatus(coord->GetWorkerSessions(&ctx, req, &resp)));
        // A rollback (on_failure: restart) replaces the shard; membership
        // changes only under elastic, which never rolls back.
        if (std::shared_ptr<Shard> t = target.lock()) {
          t->SetMembership(
              std::vector<bool>(resp.departed().begin(), resp.departed().end()),
              std::vector<uint64_t>(resp.start_steps().begin(),
                                    resp.start_steps().end()));
        }
        return std::vector<uint64_t>(resp.session_ids().begin(),
                                     resp.session_ids().end());
      });
  service.SetBarrierTimeout(
      absl::Seconds(job.config().network().barrier_timeout_s()),
      absl::Seconds(job.config().network().startup_timeout_s()));
  service.SetShard(std::move(serving), sessions);
  server->GetHealthCheckService()->SetServingStatus(true);
  st = CallUntil(startup_deadline, "coordinator", rpc_timeout, stop,
                 [&](grpc::ClientContext* ctx) {
                   pstrain::v1::ServerReadyRequest req;
                   req.set_shard(reg.shard());
                   req.set_session_id(reg.session_id());
                   pstrain::v1::ServerReadyResponse resp;
                   return coord->ServerReady(ctx, req, &resp);
                 });
  if (stop()) {
    PS_LOG_INFO("stopped while reporting ready");
    return absl::OkStatus();
  }
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("cannot report ready: ", st.message()));
  }

  // Serve until the coordinator says the job is over, heartbeating it. If
  // the coordinator stays silent for the lease, it is gone: exit.
  const absl::Duration lease =
      job.config().network().lease_s() > 0
          ? absl::Seconds(job.config().network().lease_s())
          : absl::Seconds(5);
  const absl::Duration beat = std::min(absl::Seconds(1), lease / 4);
  uint64_t membership_epoch = 0;
  // The coordinator said the job failed: this process exits 1 too (the
  // exit codes of docs/failures-and-recovery.md).
  bool job_failed = false;
  std::string why_failed;
  LeaseOptions lease_options;
  lease_options.process = "server";
  lease_options.id = static_cast<int32_t>(reg.shard());
  lease_options.coordinator = coordinator;
  lease_options.lease = lease;
  lease_options.rpc_timeout = rpc_timeout;
  // So that the coordinator records this stop as the cause now instead of
  // the lease running out later.
  lease_options.stopping_note = "stopped by a signal (SIGTERM or SIGINT)";
  const LeaseOutcome ended = RunCoordinatorLease(
      coord.get(), lease_options, &shutdown, stop,
      [&](pstrain::v1::JobStatusRequest* req) {
        req->set_session_id(reg.session_id());
      },
      [&](const pstrain::v1::JobStatusResponse& status) {
        if (status.membership_epoch() != membership_epoch) {
          // Elastic workers: a worker was declared dead or joined; the
          // shard's table follows (async pulls stop waiting for a dead
          // rank).
          membership_epoch = status.membership_epoch();
          absl::Status refreshed =
              sessions->Refresh(absl::Now() + std::min(beat, rpc_timeout));
          if (!refreshed.ok()) {
            PS_LOG_WARN("worker table refresh failed: %s",
                        refreshed.ToString());
            membership_epoch = 0;  // again at the next heartbeat
          }
        }
        if (!status.finished()) return true;
        if (status.failed()) {
          job_failed = true;
          why_failed = status.message();
        }
        // The coordinator collects every shard's statistics and then sends
        // Shutdown: wait for it (bounded), so the statistics are not lost
        // to a shard that left first.
        shutdown.WaitForNotificationWithTimeout(
            std::min(node.rpc_timeout, absl::Seconds(5)));
        return false;
      });
  switch (ended.end) {
    case LeaseEnd::kStopped:
      PS_LOG_INFO("stopping on request");
      if (!ended.why.empty()) PS_LOG_WARN("%s", ended.why);
      break;
    case LeaseEnd::kRefused:
      return absl::FailedPreconditionError(
          absl::StrCat(ended.why, "; exiting"));
    case LeaseEnd::kSilent:
      return absl::UnavailableError(absl::StrCat(ended.why, "; exiting"));
    case LeaseEnd::kDone:
      break;
  }
  if (!job_failed && shutdown.HasBeenNotified() && shutdown_job_failed_) {
    job_failed = true;
    why_failed = shutdown_reason_;
  }
  if (job_failed) {
    return absl::AbortedError(absl::StrCat("the job failed: ", why_failed));
  }
  PS_LOG_INFO("exiting");
  return absl::OkStatus();
}

}  // namespace pstrain
