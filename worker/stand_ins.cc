#include "worker/stand_ins.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "coordinator/failure_policy.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<PsClient>> ConnectShards(
    const pstrain::v1::JobSpec& job, const JobConfig& config,
    const std::shared_ptr<grpc::ChannelCredentials>& creds,
    PsClientOptions options) {
  options.push_streams = PushStreams(config);
  options.pull_streams = PullStreams(config);
  return PsClient::Connect(
      job.shard_map(),
      [&creds](const std::string& address, int connection) {
        return MakeChannel(address, creds, connection);
      },
      options);
}

absl::StatusOr<std::vector<StandIn>> StandInRanks::Take(int64_t held) {
  std::vector<StandIn> out;
  for (uint32_t d : own_->TakeAdoptions()) {
    PS_ASSIGN_OR_RETURN(std::optional<StandIn> s, Register(d, held));
    if (s.has_value()) out.push_back(*std::move(s));
  }
  return out;
}

absl::StatusOr<bool> StandInRanks::MaybeRelease(uint32_t d, int64_t next_step) {
  auto it = std::find_if(
      ranks_.begin(), ranks_.end(),
      [d](const std::unique_ptr<Rank>& r) { return r->rank == d; });
  if (it == ranks_.end() || !(*it)->liveness->release_requested()) {
    return false;
  }
  Rank& r = **it;
  PS_RETURN_IF_ERROR(r.reporter->Flush(false, ""));
  // Its heartbeats stop first: the session ends with the release.
  r.liveness.reset();
  grpc::ClientContext ctx;
  SetTimeout(&ctx, rpc_timeout_);
  CancelOnStop cancel(&ctx, stop_);
  pstrain::v1::ReleaseRankRequest req;
  req.set_rank(d);
  req.set_session_id(r.session_id);
  req.set_next_step(static_cast<uint64_t>(next_step));
  pstrain::v1::ReleaseRankResponse resp;
  const absl::Status st = FromGrpcStatus(coord_->ReleaseRank(&ctx, req, &resp));
  if (!st.ok()) {
    PS_LOG_WARN("still standing in for worker rank %d: release refused: %s", d,
                st.ToString());
    r.liveness = MakeLiveness(r, static_cast<uint64_t>(next_step));
    return false;
  }
  PS_LOG_WARN(
      "released worker rank %d to a new worker from step %d (handover; "
      "training.on_failure: elastic)",
      d, next_step);
  ranks_.erase(it);
  own_->Forget(d);
  return true;
}

absl::Status StandInRanks::Finish() {
  for (const std::unique_ptr<Rank>& r : ranks_) {
    PS_RETURN_IF_ERROR(r->reporter->Flush(true, ""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StandIn>> StandInRanks::Register(uint32_t d,
                                                              int64_t held) {
  pstrain::v1::RegisterWorkerResponse reg;
  {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, rpc_timeout_);
    CancelOnStop cancel(&ctx, stop_);
    pstrain::v1::RegisterWorkerRequest req;
    req.set_requested_rank(static_cast<int32_t>(d));
    req.set_adopt(true);
    req.set_adopt_from_step(static_cast<uint64_t>(held));
    req.set_adopter(own_->rank());
    const absl::Status st =
        FromGrpcStatus(coord_->RegisterWorker(&ctx, req, &reg));
    if (st.code() == absl::StatusCode::kAlreadyExists ||
        st.code() == absl::StatusCode::kFailedPrecondition) {
      PS_LOG_WARN("not standing in for rank %d: %s", d, st.message());
      return std::optional<StandIn>();
    }
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("standing in for rank ", d,
                                                  ": ", st.message()));
    }
  }
  auto r = std::make_unique<Rank>();
  r->rank = d;
  PsClientOptions client_options;
  client_options.rpc_timeout = rpc_timeout_;
  client_options.barrier_timeout =
      absl::Seconds(config_.network().barrier_timeout_s());
  client_options.startup_timeout =
      absl::Seconds(config_.network().startup_timeout_s());
  client_options.session_id = reg.session_id();
  client_options.wire_dtype = config_.network().wire_dtype();
  client_options.generation = job_.generation();
  PS_ASSIGN_OR_RETURN(r->client,
                      ConnectShards(job_, config_, creds_, client_options));
  r->reporter =
      std::make_unique<Reporter>(coord_, rpc_timeout_, report_interval_);
  r->reporter->set_worker(d, reg.session_id());
  r->reporter->set_client(r->client.get());
  r->session_id = reg.session_id();
  r->liveness = MakeLiveness(*r, reg.start_step());
  // Shards learn a session id from a pull (pushes only consult their
  // table). Not a pull of weights: while the dead process's push of step
  // `held` is half applied on a shard, a pull of the rank waits for the
  // commit, which only this stand-in's push brings.
  if (absl::Status st = r->client->AnnounceSession(d); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("standing in for rank ", d,
                                                ": ", st.message()));
  }
  PS_LOG_WARN(
      "standing in for worker rank %d from step %d (training.on_failure: "
      "elastic, mode sync: this worker computes and pushes the rank's "
      "micro-batches too, so the global batch is kept)",
      d, reg.start_step());
  Rank* raw = r.get();
  StandIn s;
  s.rank = d;
  s.first_step = static_cast<int64_t>(reg.start_step());
  s.client = raw->client.get();
  s.on_step = [raw](const pstrain::v1::StepMetrics& m) {
    if (raw->liveness != nullptr) raw->liveness->set_step(m.step() + 1);
    return raw->reporter->Add(m);
  };
  s.release = [this, d](int64_t next_step) {
    return MaybeRelease(d, next_step);
  };
  ranks_.push_back(std::move(r));
  return std::optional<StandIn>(std::move(s));
}

std::unique_ptr<Liveness> StandInRanks::MakeLiveness(const Rank& r,
                                                     uint64_t step) {
  auto l = std::make_unique<Liveness>(
      coord_, r.rank, r.session_id, absl::Seconds(config_.network().lease_s()),
      rpc_timeout_, stop_);
  l->set_step(step);
  l->set_client(r.client.get());
  return l;
}

std::unique_ptr<StandInRanks> MaybeStandIns(
    pstrain::v1::Coordinator::Stub* coord,
    const std::shared_ptr<grpc::ChannelCredentials>& creds,
    const pstrain::v1::JobSpec& job, absl::Duration report_interval,
    Liveness* own, const std::function<bool()>& stop) {
  if (!FailurePolicy::ForJob(job.config().training())->StandsIn()) {
    return nullptr;
  }
  return std::make_unique<StandInRanks>(coord, creds, job, report_interval, own,
                                        stop);
}

void HostedRanks::StopTaking() {
  if (!done_.HasBeenNotified()) done_.Notify();
  if (thread_.joinable()) thread_.join();
}

void HostedRanks::Loop() {
  while (!done_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
    if (stop_()) return;
    // Members that ended: the rank may be offered again.
    for (auto it = members_.begin(); it != members_.end();) {
      if (!(*it)->over.load()) {
        ++it;
        continue;
      }
      (*it)->thread.join();
      own_->Forget((*it)->rank);
      it = members_.erase(it);
    }
    for (uint32_t d : own_->TakeAdoptions()) Start(d);
  }
}

void HostedRanks::Start(uint32_t d) {
  WorkerNodeOptions o = host_;
  o.requested_rank = static_cast<int>(d);
  o.adopt = true;
  o.adopter = static_cast<int>(own_->rank());
  o.peer_port = 0;
  o.metrics = nullptr;
  o.progress_line = false;
  o.set_log_role = false;
  absl::StatusOr<std::unique_ptr<WorkerNode>> node =
      WorkerNode::Create(std::move(o));
  if (!node.ok()) {
    PS_LOG_ERROR("cannot host worker rank %d: %s", d, node.status().ToString());
    return;
  }
  PS_LOG_WARN(
      "hosting worker rank %d as a second ring member (training.on_failure: "
      "elastic, mode allreduce: this process computes the rank's "
      "micro-batches too, so the global batch and the ring's sum order are "
      "kept)",
      d);
  auto m = std::make_unique<Member>();
  m->rank = d;
  m->node = *std::move(node);
  Member* raw = m.get();
  m->thread = std::thread([this, raw] {
    const absl::Status st = raw->node->Run(stop_);
    if (st.ok()) {
      PS_LOG_INFO("hosted worker rank %d: done", raw->rank);
    } else {
      PS_LOG_WARN("hosted worker rank %d stopped: %s", raw->rank,
                  st.ToString());
    }
    raw->over.store(true);
  });
  members_.push_back(std::move(m));
}

std::unique_ptr<HostedRanks> MaybeHostedRanks(
    const pstrain::v1::JobSpec& job, const WorkerNodeOptions& options,
    Liveness* own, const std::function<bool()>& stop) {
  if (options.adopt ||
      !FailurePolicy::ForJob(job.config().training())->HostsRanks()) {
    return nullptr;
  }
  return std::make_unique<HostedRanks>(options, own, stop);
}

}  // namespace pstrain
