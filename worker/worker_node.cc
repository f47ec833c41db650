#include "worker/worker_node.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/coordinator_lease.h"
#include "common/grpc_util.h"
#include "common/host_name.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "coordinator/failure_policy.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/allreduce/allreduce_trainer.h"
#include "worker/allreduce/grpc_transport.h"
#include "worker/allreduce/heap_reuse.h"
#include "worker/allreduce/nccl_allreducer.h"
#include "worker/allreduce/ring_allreduce.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/worker_device.h"
#include "worker/data/data.h"
#include "worker/data/data_check.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"
#include "worker/ps/trainer.h"

namespace pstrain {
namespace {

// How long a worker stopped by SIGTERM waits for its last report.
constexpr absl::Duration kStoppedReportTimeout = absl::Milliseconds(500);

// A client of the job's shards: one channel per shard, and with
// network.push_streams > 1 (PushStreams) one more connection per extra part
// of a push.
absl::StatusOr<std::unique_ptr<PsClient>> ConnectShards(
    const pstrain::v1::JobSpec& job, const JobConfig& config,
    const std::shared_ptr<grpc::ChannelCredentials>& creds,
    PsClientOptions options) {
  options.push_streams = PushStreams(config);
  return PsClient::Connect(
      job.shard_map(),
      [&creds](const std::string& address, int connection) {
        return MakeChannel(address, creds, connection);
      },
      options);
}

// Sends step records to the coordinator in batches.
class Reporter {
 public:
  Reporter(pstrain::v1::Coordinator::Stub* stub, absl::Duration timeout,
           absl::Duration interval)
      : stub_(stub), timeout_(timeout), interval_(interval) {}

  // The rank and the session id its registration got (every report
  // carries both).
  void set_worker(uint32_t rank, uint64_t session_id) {
    worker_ = rank;
    session_id_ = session_id;
  }
  // training.on_failure: restart: reports carry the generation; a rollback
  // drops the records of the old one (the steps are redone).
  void set_generation(uint64_t generation) {
    if (generation != generation_) pending_.clear_steps();
    generation_ = generation;
  }
  // A report in flight is cancelled once `cancel()` turns true (a hung
  // coordinator must not hold the worker for rpc_timeout_s); null: never.
  void set_cancel(std::function<bool()> cancel) { cancel_ = std::move(cancel); }

  // Byte counters come from `client` (PS modes) or `reducer` (mode
  // allreduce: sent, received) once it exists (may stay null).
  // A new client or reducer (after a rollback) continues the old one's
  // counts.
  void set_client(const PsClient* client) {
    if (client_ != nullptr) {
      base_pushed_ += client_->bytes_pushed();
      base_pulled_ += client_->bytes_pulled();
    }
    client_ = client;
  }
  void set_reducer(const AllReducer* reducer) {
    if (reducer_ != nullptr) {
      base_pushed_ += reducer_->bytes_sent();
      base_pulled_ += reducer_->bytes_received();
    }
    reducer_ = reducer;
  }

  absl::Status Add(const pstrain::v1::StepMetrics& m) {
    *pending_.add_steps() = m;
    if (absl::Now() - last_ < interval_) return absl::OkStatus();
    return Flush(false, "");
  }

  // Sends what is pending, waiting at most `timeout` (and rpc_timeout_s)
  // for the coordinator.
  absl::Status Flush(bool done, const std::string& error,
                     absl::Duration timeout = absl::InfiniteDuration()) {
    pending_.set_worker(worker_);
    pending_.set_session_id(session_id_);
    pending_.set_generation(generation_);
    pending_.set_done(done);
    pending_.set_error(error);
    pending_.set_bytes_pushed(base_pushed_ + (client_ ? client_->bytes_pushed()
                                              : reducer_
                                                  ? reducer_->bytes_sent()
                                                  : 0));
    pending_.set_bytes_pulled(base_pulled_ + (client_ ? client_->bytes_pulled()
                                              : reducer_
                                                  ? reducer_->bytes_received()
                                                  : 0));
    grpc::ClientContext ctx;
    SetTimeout(&ctx, std::min(timeout_, timeout));
    CancelOnStop cancel(&ctx, cancel_);
    pstrain::v1::ReportResponse resp;
    PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->Report(&ctx, pending_, &resp)));
    pending_.Clear();
    last_ = absl::Now();
    stop_ = stop_ || resp.stop();
    return absl::OkStatus();
  }

  // The last report of a worker that stops on a signal (ReportRequest.stopped).
  absl::Status FlushStopped(const std::string& error, absl::Duration timeout) {
    pending_.set_stopped(true);
    return Flush(true, error, timeout);
  }

  bool stop() const { return stop_; }

 private:
  pstrain::v1::Coordinator::Stub* const stub_;
  const absl::Duration timeout_, interval_;
  const PsClient* client_ = nullptr;
  const AllReducer* reducer_ = nullptr;
  pstrain::v1::ReportRequest pending_;
  std::function<bool()> cancel_;
  uint32_t worker_ = 0;
  uint64_t session_id_ = 0;
  uint64_t generation_ = 0;
  uint64_t base_pushed_ = 0, base_pulled_ = 0;  // earlier clients' bytes
  absl::Time last_ = absl::Now();
  bool stop_ = false;
};

// The worker's heartbeat and its watch on stopping: a thread that renews the
// worker's lease (JobStatus naming its rank and step) about every
// min(1 s, lease / 4), and polls `stop` every 50 ms. When `stop` turns true,
// the coordinator stays silent for the lease, or it says the job is over,
// every parameter-server call in flight is cancelled, so that no wait (a
// pull blocked on a barrier) outlasts it by more than ~50 ms.
class Liveness {
 public:
  // `session_id`: the rank's session (RegisterWorkerResponse), which every
  // heartbeat carries from the first: the coordinator renews no lease
  // without it.
  Liveness(pstrain::v1::Coordinator::Stub* coord, uint32_t rank,
           uint64_t session_id, absl::Duration lease,
           absl::Duration rpc_timeout, std::function<bool()> stop)
      : coord_(coord),
        rank_(rank),
        lease_(lease),
        rpc_timeout_(rpc_timeout),
        stop_(std::move(stop)),
        session_id_(session_id),
        thread_([this] { Loop(); }) {}
  ~Liveness() {
    done_.Notify();
    thread_.join();
  }

  void set_step(uint64_t step) { step_.store(step); }
  // A new session id for the heartbeats to carry. With it the coordinator
  // refuses a replaced process (PERMISSION_DENIED: this process stops) and
  // names the ranks to take over (elastic sync, TakeAdoptions).
  void set_session(uint64_t session_id) { session_id_.store(session_id); }
  // training.on_failure: elastic, mode sync: the dead ranks the
  // coordinator asked this worker to take over, each returned once.
  std::vector<uint32_t> TakeAdoptions() {
    absl::MutexLock lock(&mu_);
    std::vector<uint32_t> out;
    out.swap(adopt_);
    return out;
  }
  // Elastic sync, a stand-in's heartbeat for the rank it stands in for:
  // whether the last answer asked to release the rank to a new worker.
  bool release_requested() const { return release_.load(); }
  // Elastic sync: rank `d` was handed back; it may be offered again.
  void Forget(uint32_t d) {
    absl::MutexLock lock(&mu_);
    adopt_seen_.erase(d);
  }
  // The client to cancel when stopping (null: none); must outlive this.
  void set_client(PsClient* client) {
    absl::MutexLock lock(&mu_);
    client_ = client;
    if (client_ != nullptr && (ended_ || seen_ > generation_)) {
      client_->Cancel();
    }
  }
  // training.on_failure: restart. The generation this worker trains in;
  // a heartbeat that reports a newer one cancels the client's calls, and
  // rollback_pending() turns true until set_generation catches up.
  void set_generation(uint64_t generation) {
    absl::MutexLock lock(&mu_);
    generation_ = generation;
  }
  bool rollback_pending() const {
    absl::MutexLock lock(&mu_);
    return seen_ > generation_;
  }
  // True once training must end: stopped, coordinator gone or job over.
  bool ended() const {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  // Why (empty while !ended()); lost_coordinator() when it was silent.
  std::string reason() const {
    absl::MutexLock lock(&mu_);
    return reason_;
  }
  bool lost_coordinator() const {
    absl::MutexLock lock(&mu_);
    return lost_;
  }

 private:
  void End(const std::string& reason, bool lost) {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    lost_ = lost;
    reason_ = reason;
    if (client_ != nullptr) client_->Cancel();
  }

  void SeeGeneration(uint64_t generation) {
    absl::MutexLock lock(&mu_);
    if (generation <= seen_) return;
    seen_ = generation;
    if (seen_ > generation_) {
      PS_LOG_WARN(
          "the job starts generation %d (a process failed): stopping this "
          "generation's work for the rollback",
          seen_);
      if (client_ != nullptr) client_->Cancel();
    }
  }

  void SeeAdoptions(const pstrain::v1::JobStatusResponse& status) {
    absl::MutexLock lock(&mu_);
    for (uint32_t d : status.adopt_ranks()) {
      if (adopt_seen_.insert(d).second) adopt_.push_back(d);
    }
  }

  void Loop() {
    LeaseOptions options;
    options.process = "worker";
    options.id = static_cast<int32_t>(rank_);
    options.coordinator = "";
    options.lease = lease_;
    options.rpc_timeout = rpc_timeout_;
    const LeaseOutcome ended = RunCoordinatorLease(
        coord_, options, &done_, stop_,
        [this](pstrain::v1::JobStatusRequest* req) {
          req->set_step(step_.load());
          req->set_session_id(session_id_.load());
        },
        [this](const pstrain::v1::JobStatusResponse& status) {
          if (status.failed()) {
            End(absl::StrCat("the job failed: ", status.message()), false);
            return false;
          }
          SeeGeneration(status.generation());
          SeeAdoptions(status);
          release_.store(status.release_rank());
          return true;
        });
    switch (ended.end) {
      case LeaseEnd::kStopped:
        End("stopped on request", false);
        break;
      case LeaseEnd::kRefused:
      case LeaseEnd::kSilent:
        PS_LOG_ERROR("%s", ended.why);
        End(ended.why, true);
        break;
      case LeaseEnd::kDone:
        break;
    }
  }

  pstrain::v1::Coordinator::Stub* const coord_;
  const uint32_t rank_;
  const absl::Duration lease_, rpc_timeout_;
  const std::function<bool()> stop_;
  std::atomic<uint64_t> step_{0};
  std::atomic<uint64_t> session_id_{0};
  std::atomic<bool> release_{false};
  mutable absl::Mutex mu_;
  std::vector<uint32_t> adopt_ ABSL_GUARDED_BY(mu_);  // not taken yet
  std::set<uint32_t> adopt_seen_ ABSL_GUARDED_BY(mu_);
  PsClient* client_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool lost_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t seen_ ABSL_GUARDED_BY(mu_) = 0;  // newest from a heartbeat
  absl::Notification done_;
  std::thread thread_;  // last: starts once everything above exists
};

// training.on_failure: restart: the job spec of generation `generation` (or
// a newer one) once its rollback is done, from GetJob, which waits for it.
// Bounded by training.restart_timeout_s + network.rpc_timeout_s; CANCELLED
// on `stop`; FAILED_PRECONDITION when the job ended meanwhile.
absl::StatusOr<pstrain::v1::JobSpec> AwaitRollback(
    pstrain::v1::Coordinator::Stub* coord, uint64_t generation,
    const JobConfig& config, const std::function<bool()>& stop) {
  const absl::Duration rpc = absl::Seconds(config.network().rpc_timeout_s());
  const absl::Time deadline =
      absl::Now() + absl::Seconds(config.training().restart_timeout_s()) + rpc;
  pstrain::v1::JobSpec job;
  PS_RETURN_IF_ERROR(CallUntil(
      deadline, absl::StrCat("the rollback of generation ", generation), rpc,
      stop, [&](grpc::ClientContext* ctx) {
        pstrain::v1::GetJobRequest req;
        req.set_wait_for_generation(generation);
        return coord->GetJob(ctx, req, &job);
      }));
  return job;
}

// After a failed step under training.on_failure: restart: waits up to
// 2 x network.lease_s + 1 s for the coordinator to start a generation after
// `current` (a peer died: its lease runs out), then for its rollback.
// FAILED_PRECONDITION when none starts (the failure was this worker's own),
// the job ended, or `stop`.
absl::StatusOr<pstrain::v1::JobSpec> AwaitNewGeneration(
    pstrain::v1::Coordinator::Stub* coord, const Liveness& liveness,
    uint64_t current, const JobConfig& config,
    const std::function<bool()>& stop) {
  const absl::Time until =
      absl::Now() + absl::Seconds(2 * config.network().lease_s() + 1);
  while (!liveness.rollback_pending()) {
    if (stop() || liveness.ended() || absl::Now() > until) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the job stayed in generation ", current,
          liveness.ended() ? absl::StrCat(": ", liveness.reason()) : ""));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return AwaitRollback(coord, current + 1, config, stop);
}

// training.on_failure: elastic, mode sync (docs/failures-and-recovery.md): the
// dead ranks this worker stands in for. Take() registers each rank the
// coordinator named in a heartbeat (RegisterWorkerRequest.adopt, a new
// session id) and gives the trainer what it needs to compute the rank's
// steps beside its own: a client with the rank's session, and a reporter
// and heartbeat of the rank's own, so the coordinator counts the rank's
// records and keeps its lease. Used by the training thread only.
class StandInRanks {
 public:
  StandInRanks(pstrain::v1::Coordinator::Stub* coord,
               std::shared_ptr<grpc::ChannelCredentials> creds,
               const pstrain::v1::JobSpec& job, absl::Duration report_interval,
               Liveness* own, std::function<bool()> stop)
      : coord_(coord),
        creds_(std::move(creds)),
        job_(job),
        config_(job.config()),
        rpc_timeout_(absl::Seconds(config_.network().rpc_timeout_s())),
        report_interval_(report_interval),
        own_(own),
        stop_(std::move(stop)) {}

  // The ranks to stand in for from the weights of step `held` on (see
  // AdoptFn in worker/ps/trainer.h). A rank someone else got meanwhile is
  // skipped with a log line.
  absl::StatusOr<std::vector<StandIn>> Take(int64_t held) {
    std::vector<StandIn> out;
    for (uint32_t d : own_->TakeAdoptions()) {
      PS_ASSIGN_OR_RETURN(std::optional<StandIn> s, Register(d, held));
      if (s.has_value()) out.push_back(*std::move(s));
    }
    return out;
  }

  // Handover (coordinator/elastic.h): when the coordinator asked for rank
  // `d` back, reports its records, tells the coordinator (ReleaseRank) that
  // every step before `next_step` was pushed, and stops standing in for it:
  // true. False to go on (not asked, or the coordinator refused: logged).
  // Called by the trainer between two steps.
  absl::StatusOr<bool> MaybeRelease(uint32_t d, int64_t next_step) {
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
    const absl::Status st =
        FromGrpcStatus(coord_->ReleaseRank(&ctx, req, &resp));
    if (!st.ok()) {
      PS_LOG_WARN("still standing in for worker rank %d: release refused: %s",
                  d, st.ToString());
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

  // After training: the ranks' last records and done reports.
  absl::Status Finish() {
    for (const std::unique_ptr<Rank>& r : ranks_) {
      PS_RETURN_IF_ERROR(r->reporter->Flush(true, ""));
    }
    return absl::OkStatus();
  }

 private:
  struct Rank {
    uint32_t rank = 0;
    uint64_t session_id = 0;
    std::unique_ptr<PsClient> client;
    std::unique_ptr<Reporter> reporter;
    std::unique_ptr<Liveness> liveness;  // last: stops before the client
  };

  absl::StatusOr<std::optional<StandIn>> Register(uint32_t d, int64_t held) {
    pstrain::v1::RegisterWorkerResponse reg;
    {
      grpc::ClientContext ctx;
      SetTimeout(&ctx, rpc_timeout_);
      CancelOnStop cancel(&ctx, stop_);
      pstrain::v1::RegisterWorkerRequest req;
      req.set_requested_rank(static_cast<int32_t>(d));
      req.set_adopt(true);
      req.set_adopt_from_step(static_cast<uint64_t>(held));
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

  // The rank's heartbeat (with its session): keeps its lease.
  std::unique_ptr<Liveness> MakeLiveness(const Rank& r, uint64_t step) {
    auto l = std::make_unique<Liveness>(
        coord_, r.rank, r.session_id,
        absl::Seconds(config_.network().lease_s()), rpc_timeout_, stop_);
    l->set_step(step);
    l->set_client(r.client.get());
    return l;
  }

  pstrain::v1::Coordinator::Stub* const coord_;
  const std::shared_ptr<grpc::ChannelCredentials> creds_;
  const pstrain::v1::JobSpec job_;
  const JobConfig config_;
  const absl::Duration rpc_timeout_, report_interval_;
  Liveness* const own_;
  const std::function<bool()> stop_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// The stand-in ranks of a worker of a job with training.on_failure: elastic
// in mode sync; null otherwise.
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

// training.on_failure: elastic, mode allreduce (docs/failures-and-recovery.md):
// the dead ranks this worker process hosts. A thread takes the ranks the
// coordinator names in this worker's heartbeat answers (it looks every
// 50 ms) and runs a WorkerNode for each, registered with `adopt`: a second
// ring member with a ring peer service on a port of its own, its own
// replica, data slice, heartbeat and reports, which waits for the rollback
// like a replacement. A member whose session ends (a new worker took its
// rank back) just stops, and the rank may be offered again later; any other
// error of a member is its own to report (it fails the job).
// Members end with the job, as any worker does (its end, its failure, the
// coordinator's silence, `stop`): nothing else stops them, so the host's
// own error report, which may be what ends the job, goes out before it
// waits for them.
class HostedRanks {
 public:
  // `host` is the hosting node's options; `own` its heartbeat, which must
  // outlive the polling (StopTaking).
  HostedRanks(WorkerNodeOptions host, Liveness* own, std::function<bool()> stop)
      : host_(std::move(host)),
        own_(own),
        stop_(std::move(stop)),
        thread_([this] { Loop(); }) {}
  // Joins every member (each of their waits is bounded).
  ~HostedRanks() {
    StopTaking();
    for (const std::unique_ptr<Member>& m : members_) m->thread.join();
  }

  // Takes no more ranks; `own` is no longer used.
  void StopTaking() {
    if (!done_.HasBeenNotified()) done_.Notify();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Member {
    uint32_t rank = 0;
    std::unique_ptr<WorkerNode> node;
    std::atomic<bool> over{false};
    std::thread thread;
  };

  void Loop() {
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

  void Start(uint32_t d) {
    WorkerNodeOptions o = host_;
    o.requested_rank = static_cast<int>(d);
    o.adopt = true;
    o.peer_port = 0;
    o.metrics = nullptr;
    o.progress_line = false;
    o.set_log_role = false;
    absl::StatusOr<std::unique_ptr<WorkerNode>> node =
        WorkerNode::Create(std::move(o));
    if (!node.ok()) {
      PS_LOG_ERROR("cannot host worker rank %d: %s", d,
                   node.status().ToString());
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

  const WorkerNodeOptions host_;
  Liveness* const own_;
  const std::function<bool()> stop_;
  // Touched by the polling thread, then (once it is joined) by the
  // destructor.
  std::vector<std::unique_ptr<Member>> members_;
  absl::Notification done_;
  std::thread thread_;  // last: starts once everything above exists
};

// The hosted ranks of a worker of a job with training.on_failure: elastic
// in mode allreduce; null otherwise, and for a hosted member itself.
std::unique_ptr<HostedRanks> MaybeHostedRanks(
    const pstrain::v1::JobSpec& job, const WorkerNodeOptions& options,
    Liveness* own, const std::function<bool()>& stop) {
  if (options.adopt ||
      !FailurePolicy::ForJob(job.config().training())->HostsRanks()) {
    return nullptr;
  }
  return std::make_unique<HostedRanks>(options, own, stop);
}

// pstrain_worker_* metrics, updated from the trainer's per-step records.
class WorkerMetrics {
 public:
  explicit WorkerMetrics(MetricsRegistry* r)
      : pull_(r->AddHistogram("pstrain_worker_pull_seconds",
                              "Pull of all shards, including barrier waits.",
                              ExponentialBuckets(1e-4, 2, 18))),
        push_(r->AddHistogram("pstrain_worker_push_seconds",
                              "Push to all shards.",
                              ExponentialBuckets(1e-4, 2, 18))),
        compute_(r->AddHistogram("pstrain_worker_compute_seconds",
                                 "Gradient computation of one step.",
                                 ExponentialBuckets(1e-4, 2, 18))),
        steps_(r->AddCounter("pstrain_worker_steps_total", "Steps completed.")),
        samples_(r->AddCounter("pstrain_worker_samples_total",
                               "Training examples processed.")),
        loss_(r->AddGauge("pstrain_worker_loss", "Loss of the last step.")),
        rate_(r->AddGauge("pstrain_worker_samples_per_second",
                          "Examples per second since the first step.")) {
    r->AddCallback("pstrain_worker_pushed_bytes_total",
                   "Bytes of push messages sent (allreduce: ring bytes sent).",
                   true, [this] {
                     const PsClient* c = client_.load();
                     const AllReducer* r = reducer_.load();
                     return c   ? static_cast<double>(c->bytes_pushed())
                            : r ? static_cast<double>(r->bytes_sent())
                                : 0.0;
                   });
    r->AddCallback("pstrain_worker_pulled_bytes_total",
                   "Bytes of pull messages received (allreduce: ring bytes "
                   "received).",
                   true, [this] {
                     const PsClient* c = client_.load();
                     const AllReducer* r = reducer_.load();
                     return c   ? static_cast<double>(c->bytes_pulled())
                            : r ? static_cast<double>(r->bytes_received())
                                : 0.0;
                   });
  }

  void set_client(const PsClient* client) { client_.store(client); }
  void set_reducer(const AllReducer* reducer) { reducer_.store(reducer); }

  void Record(const pstrain::v1::StepMetrics& m) {
    pull_->Observe(m.pull_s());
    if (m.samples() == 0) return;  // the final evaluation record
    push_->Observe(m.push_s());
    compute_->Observe(m.compute_s());
    steps_->Inc();
    samples_->Inc(static_cast<double>(m.samples()));
    loss_->Set(m.loss());
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
    if (elapsed > 0) rate_->Set(samples_->value() / elapsed);
  }

 private:
  Histogram* const pull_;
  Histogram* const push_;
  Histogram* const compute_;
  Counter* const steps_;
  Counter* const samples_;
  Gauge* const loss_;
  Gauge* const rate_;
  std::atomic<const PsClient*> client_{nullptr};
  std::atomic<const AllReducer*> reducer_{nullptr};
  const absl::Time start_ = absl::Now();
};

// Mode allreduce: this worker's RingPeer service, which its left neighbour
// streams segments to. Stops before the service goes: it gives the
// neighbour's streams up to 2 s to end by themselves (its last segments),
// polled every 50 ms, then 100 ms to gRPC's Shutdown. The wait ends as soon
// as `stopped` says so, also when SIGTERM comes during it, so that SIGTERM
// ends the worker within a second even while a stopped or hung neighbour
// holds its stream open.
struct PeerServer {
  std::unique_ptr<RingPeerService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;            // advertised host:port
  std::function<bool()> stopped;  // may be empty
  ~PeerServer() {
    if (!server) return;
    const absl::Time grace_end = absl::Now() + absl::Seconds(2);
    while (service->open_streams() > 0 && !(stopped && stopped()) &&
           absl::Now() < grace_end) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    ShutdownGrpcServer(server.get(), absl::Milliseconds(100));
  }
};

absl::Status StartPeerServer(const WorkerNodeOptions& options,
                             PeerServer* peer) {
  const TlsFiles& tls = options.node.tls;
  if (!tls.ca.empty() && tls.cert.empty()) {
    return absl::InvalidArgumentError(
        "mode allreduce with TLS: workers serve their ring neighbours and "
        "need a certificate and key (--tls_cert, --tls_key)");
  }
  PS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds,
                      MakeServerCredentials(tls));
  peer->service = std::make_unique<RingPeerService>();
  PS_ASSIGN_OR_RETURN(StartedServer started,
                      StartGrpcServer(options.peer_bind, options.peer_port,
                                      creds, {peer->service.get()},
                                      RingLinkArgs()));  // ring's window
  peer->server = std::move(started.server);
  const int port = started.port;
  peer->address = absl::StrCat(options.advertise_host, ":", port);
  PS_LOG_INFO("ring peer service at %s (listening on %s:%d)", peer->address,
              options.peer_bind, port);
  return absl::OkStatus();
}

// Mode allreduce: the collective this worker trains with; outlives the
// training (the final report reads its byte counters).
struct AllReduceLink {
  std::unique_ptr<Transport> transport;  // backend grpc
  std::unique_ptr<AllReducer> reducer;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerNode>> WorkerNode::Create(
    WorkerNodeOptions options) {
  if (options.node.coordinator.empty()) {
    return absl::InvalidArgumentError("coordinator address required");
  }
  const std::string& device = options.device;
  PS_RETURN_IF_ERROR(
      ValidateHostName("--advertise_host", options.advertise_host));
  if (options.cuda_device < -1 || options.local_rank < -1) {
    return absl::InvalidArgumentError(
        "cuda_device and local_rank must be >= 0, or -1");
  }
  if (!device.empty() && device != "auto" && device != "cpu" &&
      device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("device must be auto, cpu or cuda, got '", device, "'"));
  }
  if (!options.cuda_library.empty()) {
    struct stat st;
    if (stat(options.cuda_library.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cuda_library ", options.cuda_library,
          ": no such file (libpstrain_cuda.so, the CUDA backend)"));
    }
  }
  std::unique_ptr<WorkerNode> node(new WorkerNode());
  PS_ASSIGN_OR_RETURN(node->creds_, MakeChannelCredentials(options.node.tls));
  if (options.metrics == nullptr) {
    node->own_metrics_ = std::make_unique<MetricsRegistry>();
    options.metrics = node->own_metrics_.get();
  }
  node->options_ = std::move(options);
  return node;
}

absl::Status WorkerNode::Run(const std::function<bool()>& stop) {
  WorkerMetrics metrics(options_.metrics);
  const NodeOptions& node = options_.node;
  const std::string& coordinator = node.coordinator;
  const absl::Duration rpc_timeout = node.rpc_timeout;
  auto coord =
      pstrain::v1::Coordinator::NewStub(MakeChannel(coordinator, creds_));

  const absl::Time startup_deadline = absl::Now() + node.startup_timeout;

  // The mode first: in mode allreduce the worker serves its ring peer before
  // it registers, so that it can register the address.
  pstrain::v1::JobSpec job;
  absl::Status st = CallUntil(
      startup_deadline, "coordinator at " + coordinator, rpc_timeout, stop,
      [&](grpc::ClientContext* ctx) { return coord->GetJob(ctx, {}, &job); });
  if (stop()) {
    PS_LOG_INFO("stopped while waiting for the coordinator");
    return absl::OkStatus();
  }
  if (!st.ok()) {
    return absl::Status(
        st.code(),
        absl::StrCat("cannot reach the coordinator: ", st.message()));
  }
  const bool allreduce =
      job.config().training().mode() == pstrain::v1::MODE_ALLREDUCE;
  PeerServer peer;
  peer.stopped = stop;
  if (allreduce) {
    PS_RETURN_IF_ERROR(StartPeerServer(options_, &peer));
  }

  pstrain::v1::RegisterWorkerResponse reg;
  st = CallUntil(startup_deadline,
                 allreduce ? "coordinator at " + coordinator
                           : "coordinator and servers at " + coordinator,
                 rpc_timeout, stop, [&](grpc::ClientContext* ctx) {
                   pstrain::v1::RegisterWorkerRequest req;
                   req.set_requested_rank(options_.requested_rank);
                   req.set_peer_address(peer.address);
                   req.set_adopt(options_.adopt);
                   return coord->RegisterWorker(ctx, req, &reg);
                 });
  if (stop()) {
    PS_LOG_INFO("stopped while registering");
    return absl::OkStatus();
  }
  if (st.code() == absl::StatusCode::kFailedPrecondition) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, rpc_timeout);
    pstrain::v1::JobStatusResponse status;
    if (coord->JobStatus(&ctx, {}, &status).ok() && status.finished()) {
      // A distinct exit code: an orchestrator must not count a worker that
      // started after its job ended as a success.
      return JobOverError(absl::StrCat("registration refused: ", st.message(),
                                       status.failed() ? " (it failed)" : ""));
    }
  }
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("registration failed: ", st.message()));
  }
  const uint32_t rank = reg.rank();
  rank_ = static_cast<int>(rank);
  if (options_.set_log_role) SetLogRole(absl::StrCat("worker/", rank));
  const bool tty = options_.progress_line;

  // Mode allreduce: the ring from the coordinator, then the collective,
  // in job generation `generation` (training.on_failure: restart re-forms
  // it after each rollback); `cancelled` ends the ring's waits (RingOptions).
  auto join_ring = [&](const JobConfig& config,
                       const std::shared_ptr<ComputeBackend>& backend,
                       AllReduceLink* link, uint64_t generation,
                       std::function<bool()> cancelled) -> absl::Status {
    const bool nccl = config.allreduce().backend() == AllReduceConfig::NCCL;
    std::string nccl_id;
    if (nccl) {
      PS_RETURN_IF_ERROR(NcclUsable(*backend));
      if (rank == 0) {
        PS_ASSIGN_OR_RETURN(nccl_id, NewNcclUniqueId());
      }
    }
    pstrain::v1::GetPeersResponse peers;
    PS_RETURN_IF_ERROR(CallUntil(
        absl::Now() + absl::Seconds(config.network().startup_timeout_s()),
        "the other workers", rpc_timeout, stop, [&](grpc::ClientContext* ctx) {
          pstrain::v1::GetPeersRequest req;
          req.set_rank(rank);
          req.set_session_id(reg.session_id());
          req.set_nccl_unique_id(nccl_id);
          return coord->GetPeers(ctx, req, &peers);
        }));
    const int n = peers.peer_addresses_size();
    const absl::Duration timeout =
        absl::Seconds(config.allreduce().timeout_s());
    if (nccl) {
      PS_ASSIGN_OR_RETURN(
          link->reducer, CreateNcclAllReducer(backend, rank, n,
                                              peers.nccl_unique_id(), timeout));
    } else {
      const std::string& right = peers.peer_addresses((rank + 1) % n);
      PS_ASSIGN_OR_RETURN(
          link->transport,
          GrpcTransport::Create(rank, n, MakeRingChannel(right, creds_),
                                peer.service.get(), reg.session_id(),
                                peers.left_session_id(), generation));
      // The ring's segment buffers: reuse freed heap (heap_reuse.h).
      if (absl::Status st = KeepFreedHeapForReuse(); !st.ok()) {
        PS_LOG_WARN("ring: %s (freed buffers go back to the kernel)",
                    st.ToString());
      }
      RingOptions ring;
      ring.segment_elems = config.allreduce().segment_bytes() / sizeof(float);
      ring.timeout = timeout;
      ring.cancelled = std::move(cancelled);
      if (config.network().wire_dtype() == pstrain::v1::DTYPE_BF16) {
        ring.wire_dtype = pstrain::v1::DTYPE_BF16;  // a bf16 ring
      }
      link->reducer =
          std::make_unique<RingAllReducer>(link->transport.get(), ring);
      PS_LOG_INFO("ring of %d: right neighbour rank %d at %s", n,
                  (rank + 1) % n, right);
    }
    PS_LOG_INFO("all-reduce: %s", link->reducer->name());
    return absl::OkStatus();
  };

  auto run = [&](Reporter* reporter, std::unique_ptr<PsClient>* client,
                 AllReduceLink* link, Liveness* liveness) -> absl::Status {
    const JobConfig config = reg.job().config();
    if (absl::Status valid = ValidateJobConfig(config); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: ", valid.message()));
    }
    // The flag wins over the job's worker.device. The backend outlives the
    // model, which computes through it, and is shared with a NCCL reducer,
    // which lives on in `link` after this scope.
    WorkerDeviceOptions device_options;
    device_options.device = options_.device.empty()
                                ? ConfigName(config.worker().device())
                                : options_.device;
    device_options.cuda_device = options_.cuda_device;
    device_options.local_rank = options_.local_rank;
    device_options.cuda_visible_devices = options_.cuda_visible_devices;
    device_options.cuda_library = options_.cuda_library;
    PS_ASSIGN_OR_RETURN(WorkerBackend chosen,
                        CreateWorkerBackend(device_options, rank));
    const std::shared_ptr<ComputeBackend> backend = chosen.backend;
    PS_LOG_INFO("compute backend: %s", chosen.description);
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        Model::Create(config.model(), backend.get()));
    // The parameter-server trainer moves a row-sparse table by row
    // (docs/sparse.md); the ring all-reduce moves whole dense tensors and
    // would need the table whole on every worker, so say so rather than
    // allocate it.
    for (const pstrain::v1::TensorSpec& spec : model->params()) {
      if (allreduce && spec.row_sparse()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "model.type ", ConfigName(config.model().type()), ": parameter '",
            spec.name(),
            "' is row-sparse, and mode allreduce moves dense tensors only "
            "(use training.mode sync or async)"));
      }
    }
    PS_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data, LoadJobData(config));
    PS_LOG_INFO("data: %s", data->Describe());
    absl::Time last_line = absl::InfinitePast();
    auto on_step = [&](const pstrain::v1::StepMetrics& m) {
      metrics.Record(m);
      if (tty && absl::Now() - last_line > absl::Milliseconds(250)) {
        last_line = absl::Now();
        std::fprintf(stderr, "\r  worker/%u step %llu/%lld  loss %.4f ", rank,
                     static_cast<unsigned long long>(m.step() + 1),
                     static_cast<long long>(config.training().steps()),
                     m.loss());
      }
      liveness->set_step(m.step() + 1);
      return reporter->Add(m);
    };
    auto should_stop = [&] {
      return stop() || reporter->stop() || liveness->ended() ||
             liveness->rollback_pending();
    };
    TrainerOptions options;
    options.rank = rank;
    options.config = config;
    // The rank's own start: the job's start step, or for a rank joined again
    // after its worker was declared dead (elastic) where it picks up.
    options.start_step = static_cast<int64_t>(reg.start_step());
    if (reg.rejoined()) {
      PS_LOG_INFO(
          "joined rank %d again from step %d (training.on_failure: "
          "elastic)",
          rank, reg.start_step());
    }
    // training.on_failure: restart, and elastic all-reduce, whose lost rank
    // a live worker hosts (coordinator/failure_policy.h): each generation
    // starts from the rollback's checkpoint; a replacement first waits for
    // the rollback.
    const bool rolls_back =
        FailurePolicy::ForJob(config.training())->RollsBack();
    if (allreduce) {
      pstrain::v1::JobSpec ring_job = reg.job();
      if (rolls_back && ring_job.generation() > 0) {
        PS_ASSIGN_OR_RETURN(
            ring_job,
            AwaitRollback(coord.get(), ring_job.generation(), config, stop));
        options.start_step = static_cast<int64_t>(ring_job.start_step());
      }
      for (;;) {
        liveness->set_generation(ring_job.generation());
        reporter->set_generation(ring_job.generation());
        reporter->set_reducer(nullptr);
        metrics.set_reducer(nullptr);
        link->reducer.reset();  // borrows the transport
        link->transport.reset();
        PS_RETURN_IF_ERROR(join_ring(config, backend, link,
                                     ring_job.generation(), should_stop));
        reporter->set_reducer(link->reducer.get());
        metrics.set_reducer(link->reducer.get());
        PS_LOG_INFO(
            "rank %d of %d (allreduce): %s model, %d steps from step %d, "
            "local batch %d x %d accumulation",
            rank, config.job().workers(), ConfigName(config.model().type()),
            config.training().steps(), options.start_step,
            config.training().local_batch(),
            config.training().grad_accum_steps());
        // Checkpoints and --resume (worker/allreduce/checkpointing.h).
        PS_ASSIGN_OR_RETURN(
            std::unique_ptr<AllReduceTrainer> trainer,
            AllReduceTrainer::Create(
                options, link->reducer.get(), model.get(), data.get(),
                AllReduceCheckpointOptionsFromJob(ring_job, rank)));
        const absl::Status trained = trainer->Run(on_step, should_stop);
        if (trained.ok()) {
          final_params_ = trainer->params();
          PS_LOG_INFO(
              "final weights fingerprint %016x (FNV-1a; equal on every rank)",
              ParamsFingerprint(trainer->params()));
          return absl::OkStatus();
        }
        if (!rolls_back || stop() || reporter->stop() || liveness->ended()) {
          return trained;
        }
        // A ring error may be a dead neighbour: wait (bounded) for the
        // coordinator's verdict, then roll back with everyone.
        absl::StatusOr<pstrain::v1::JobSpec> next = AwaitNewGeneration(
            coord.get(), *liveness, ring_job.generation(), config, stop);
        if (!next.ok()) {
          return absl::Status(trained.code(),
                              absl::StrCat(trained.message(), "; no rollback: ",
                                           next.status().message()));
        }
        ring_job = *std::move(next);
        options.start_step = static_cast<int64_t>(ring_job.start_step());
        PS_LOG_WARN(
            "re-forming the ring: resuming at step %d in generation %d from "
            "%s (was: %s)",
            ring_job.start_step(), ring_job.generation(),
            ring_job.resume_from().empty() ? "the initial state"
                                           : ring_job.resume_from(),
            trained.message());
      }
    }
    pstrain::v1::JobSpec job = reg.job();
    if (rolls_back && job.generation() > 0) {
      // A replacement (training.on_failure: restart): it starts where the
      // rollback puts every worker.
      PS_ASSIGN_OR_RETURN(
          job, AwaitRollback(coord.get(), job.generation(), config, stop));
      options.start_step = static_cast<int64_t>(job.start_step());
    }
    PS_LOG_INFO(
        "rank %d of %d: %s model, %d steps, local batch %d x %d "
        "accumulation",
        rank, config.job().workers(), ConfigName(config.model().type()),
        config.training().steps(), config.training().local_batch(),
        config.training().grad_accum_steps());
    // Elastic sync: dead ranks this worker may be asked to stand in for.
    std::unique_ptr<StandInRanks> stand_ins = MaybeStandIns(
        coord.get(), creds_, job, options_.report_interval, liveness, stop);
    if (stand_ins != nullptr) {
      options.adopt = [s = stand_ins.get()](int64_t held) {
        return s->Take(held);
      };
    }
    for (;;) {
      PsClientOptions client_options;
      client_options.rpc_timeout =
          absl::Seconds(config.network().rpc_timeout_s());
      // The coordinator's value (JobSpec.config) is the one every server
      // applies.
      client_options.barrier_timeout =
          absl::Seconds(config.network().barrier_timeout_s());
      client_options.startup_timeout =
          absl::Seconds(config.network().startup_timeout_s());
      client_options.session_id = reg.session_id();
      client_options.wire_dtype = config.network().wire_dtype();
      client_options.generation = job.generation();
      liveness->set_client(nullptr);
      reporter->set_client(nullptr);
      metrics.set_client(nullptr);
      PS_ASSIGN_OR_RETURN(*client,
                          ConnectShards(job, config, creds_, client_options));
      liveness->set_generation(job.generation());
      reporter->set_generation(job.generation());
      liveness->set_client(client->get());
      reporter->set_client(client->get());
      metrics.set_client(client->get());
      Trainer trainer(options, client->get(), model.get(), data.get());
      const absl::Status trained = trainer.Run(on_step, should_stop);
      if (trained.ok()) {
        final_params_ = trainer.final_params();
        return stand_ins != nullptr ? stand_ins->Finish() : absl::OkStatus();
      }
      if (!rolls_back || stop() || reporter->stop() || liveness->ended()) {
        return trained;
      }
      // training.on_failure: restart: a failed call may be a sign of a
      // dead peer: wait (bounded) for the coordinator's verdict.
      absl::StatusOr<pstrain::v1::JobSpec> next = AwaitNewGeneration(
          coord.get(), *liveness, job.generation(), config, stop);
      if (!next.ok()) {
        return absl::Status(trained.code(),
                            absl::StrCat(trained.message(), "; no rollback: ",
                                         next.status().message()));
      }
      job = *std::move(next);
      options.start_step = static_cast<int64_t>(job.start_step());
      PS_LOG_WARN("resuming at step %d in generation %d (was: %s)",
                  job.start_step(), job.generation(), trained.message());
    }
  };
  Reporter reporter(coord.get(), rpc_timeout, options_.report_interval);
  reporter.set_worker(rank, reg.session_id());
  std::unique_ptr<PsClient> client;
  AllReduceLink link;
  // Elastic ring: ranks this process hosts. Joined last, after this
  // worker's own final report (see HostedRanks).
  std::unique_ptr<HostedRanks> hosted;
  {
    // Destroyed (joined) before the client it may cancel.
    const absl::Duration lease =
        absl::Seconds(reg.job().config().network().lease_s() > 0
                          ? reg.job().config().network().lease_s()
                          : 5.0);
    Liveness liveness(coord.get(), rank, reg.session_id(), lease, rpc_timeout,
                      stop);
    reporter.set_cancel([&liveness] { return liveness.lost_coordinator(); });
    hosted = MaybeHostedRanks(reg.job(), options_, &liveness, stop);
    st = run(&reporter, &client, &link, &liveness);
    if (hosted != nullptr) hosted->StopTaking();  // before `liveness` goes
    reporter.set_cancel(nullptr);
    if (liveness.lost_coordinator()) {
      if (tty) std::fprintf(stderr, "\n");
      // Nobody to report to: exit.
      return absl::UnavailableError(liveness.reason());
    }
    if (stop() && !st.ok()) {
      PS_LOG_INFO("stopped on request (%s)", st.message());
      // SIGTERM ends a worker within a second, even with the coordinator
      // hung: its last word gets half of that.
      reporter
          .FlushStopped(absl::StrCat("worker ", rank, ": stopped by signal"),
                        kStoppedReportTimeout)
          .IgnoreError();
      return absl::OkStatus();
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  if (!st.ok()) {
    reporter.Flush(true, absl::StrCat("worker ", rank, ": ", st.ToString()))
        .IgnoreError();
    return absl::Status(st.code(),
                        absl::StrCat("training failed: ", st.message()));
  }
  st = reporter.Flush(true, "");
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("final report failed: ", st.message()));
  }
  PS_LOG_INFO("done");
  return absl::OkStatus();
}

}  // namespace pstrain
