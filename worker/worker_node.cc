#include "worker/worker_node.h"

#include <atomic>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/host_name.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/retry.h"
#include "common/status_macros.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/allreduce/allreduce_trainer.h"
#include "worker/allreduce/grpc_transport.h"
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
  // A report in flight is cancelled once `cancel()` turns true (a hung
  // coordinator must not hold the worker for rpc_timeout_s); null: never.
  void set_cancel(std::function<bool()> cancel) { cancel_ = std::move(cancel); }

  // Byte counters come from `client` (PS modes) or `reducer` (mode
  // allreduce: sent, received) once it exists (may stay null).
  void set_client(const PsClient* client) { client_ = client; }
  void set_reducer(const AllReducer* reducer) { reducer_ = reducer; }

  absl::Status Add(const pstrain::v1::StepMetrics& m) {
    *pending_.add_steps() = m;
    if (absl::Now() - last_ < interval_) return absl::OkStatus();
    return Flush(false, "");
  }

  absl::Status Flush(bool done, const std::string& error) {
    pending_.set_worker(worker_);
    pending_.set_session_id(session_id_);
    pending_.set_done(done);
    pending_.set_error(error);
    pending_.set_bytes_pushed(client_    ? client_->bytes_pushed()
                              : reducer_ ? reducer_->bytes_sent()
                                         : 0);
    pending_.set_bytes_pulled(client_    ? client_->bytes_pulled()
                              : reducer_ ? reducer_->bytes_received()
                                         : 0);
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout_);
    CancelOnStop cancel(&ctx, cancel_);
    pstrain::v1::ReportResponse resp;
    PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->Report(&ctx, pending_, &resp)));
    pending_.Clear();
    last_ = absl::Now();
    stop_ = stop_ || resp.stop();
    return absl::OkStatus();
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
  Liveness(pstrain::v1::Coordinator::Stub* coord, uint32_t rank,
           absl::Duration lease, absl::Duration rpc_timeout,
           std::function<bool()> stop)
      : coord_(coord),
        rank_(rank),
        lease_(lease),
        beat_(std::min(absl::Seconds(1), lease / 4)),
        rpc_timeout_(rpc_timeout),
        stop_(std::move(stop)),
        thread_([this] { Loop(); }) {}
  ~Liveness() {
    done_.Notify();
    thread_.join();
  }

  void set_step(uint64_t step) { step_.store(step); }
  // The client to cancel when stopping (null: none); must outlive this.
  void set_client(PsClient* client) {
    absl::MutexLock lock(&mu_);
    client_ = client;
    if (client_ != nullptr && ended_) client_->Cancel();
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

  void Loop() {
    absl::Time last_contact = absl::Now();
    absl::Time next_beat = absl::Now();
    while (!done_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
      if (stop_()) {
        End("stopped on request", false);
        return;
      }
      if (absl::Now() < next_beat) continue;
      next_beat = absl::Now() + beat_;
      grpc::ClientContext ctx;
      SetTimeout(&ctx, std::min(beat_, rpc_timeout_));
      pstrain::v1::JobStatusRequest req;
      req.set_process("worker");
      req.set_id(static_cast<int32_t>(rank_));
      req.set_step(step_.load());
      pstrain::v1::JobStatusResponse status;
      const grpc::Status st = coord_->JobStatus(&ctx, req, &status);
      if (st.ok()) {
        last_contact = absl::Now();
        if (status.failed()) {
          End(absl::StrCat("the job failed: ", status.message()), false);
          return;
        }
      } else if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
        const std::string why = absl::StrCat(
            "the coordinator does not know this worker: ", st.error_message());
        PS_LOG_ERROR("%s", why);
        End(why, true);
        return;
      } else if (absl::Now() - last_contact > lease_) {
        const std::string why = absl::StrFormat(
            "the coordinator has been silent for %.1f s (network.lease_s = "
            "%g): it is gone (%s)",
            absl::ToDoubleSeconds(absl::Now() - last_contact),
            absl::ToDoubleSeconds(lease_), st.error_message());
        PS_LOG_ERROR("%s", why);
        End(why, true);
        return;
      }
    }
  }

  pstrain::v1::Coordinator::Stub* const coord_;
  const uint32_t rank_;
  const absl::Duration lease_, beat_, rpc_timeout_;
  const std::function<bool()> stop_;
  std::atomic<uint64_t> step_{0};
  mutable absl::Mutex mu_;
  PsClient* client_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool lost_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
  std::thread thread_;  // last: starts once everything above exists
};

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
// streams segments to. Stops (with a grace period) before the service goes.
struct PeerServer {
  std::unique_ptr<RingPeerService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;  // advertised host:port
  ~PeerServer() {
    if (server)
      server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
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
                                      creds, {peer->service.get()}));
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
  absl::Status st = RetryUntil(
      startup_deadline, "coordinator at " + coordinator,
      [&] {
        grpc::ClientContext ctx;
        SetTimeout(&ctx, rpc_timeout);
        CancelOnStop cancel(&ctx, stop);
        return FromGrpcStatus(coord->GetJob(&ctx, {}, &job));
      },
      stop);
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
  if (allreduce) {
    PS_RETURN_IF_ERROR(StartPeerServer(options_, &peer));
  }

  pstrain::v1::RegisterWorkerResponse reg;
  st = RetryUntil(
      startup_deadline,
      allreduce ? "coordinator at " + coordinator
                : "coordinator and servers at " + coordinator,
      [&] {
        grpc::ClientContext ctx;
        SetTimeout(&ctx, rpc_timeout);
        CancelOnStop cancel(&ctx, stop);
        pstrain::v1::RegisterWorkerRequest req;
        req.set_requested_rank(options_.requested_rank);
        req.set_peer_address(peer.address);
        return FromGrpcStatus(coord->RegisterWorker(&ctx, req, &reg));
      },
      stop);
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

  // Mode allreduce: the ring from the coordinator, then the collective.
  auto join_ring = [&](const JobConfig& config,
                       const std::shared_ptr<ComputeBackend>& backend,
                       AllReduceLink* link) -> absl::Status {
    const bool nccl = config.allreduce().backend() == AllReduceConfig::NCCL;
    std::string nccl_id;
    if (nccl) {
      PS_RETURN_IF_ERROR(NcclUsable(*backend));
      if (rank == 0) {
        PS_ASSIGN_OR_RETURN(nccl_id, NewNcclUniqueId());
      }
    }
    pstrain::v1::GetPeersResponse peers;
    PS_RETURN_IF_ERROR(RetryUntil(
        absl::Now() + absl::Seconds(config.network().startup_timeout_s()),
        "the other workers",
        [&] {
          grpc::ClientContext ctx;
          SetTimeout(&ctx, rpc_timeout);
          CancelOnStop cancel(&ctx, stop);
          pstrain::v1::GetPeersRequest req;
          req.set_rank(rank);
          req.set_session_id(reg.session_id());
          req.set_nccl_unique_id(nccl_id);
          return FromGrpcStatus(coord->GetPeers(&ctx, req, &peers));
        },
        stop));
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
          GrpcTransport::Create(rank, n, MakeChannel(right, creds_),
                                peer.service.get(), reg.session_id(),
                                peers.left_session_id()));
      RingOptions ring;
      ring.segment_elems = config.allreduce().segment_bytes() / sizeof(float);
      ring.timeout = timeout;
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
    PS_ASSIGN_OR_RETURN(WorkerBackend chosen,
                        CreateWorkerBackend(device_options, rank));
    const std::shared_ptr<ComputeBackend> backend = chosen.backend;
    PS_LOG_INFO("compute backend: %s", chosen.description);
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        Model::Create(config.model(), backend.get()));
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
      return stop() || reporter->stop() || liveness->ended();
    };
    TrainerOptions options;
    options.rank = rank;
    options.config = config;
    options.start_step = static_cast<int64_t>(reg.job().start_step());
    if (allreduce) {
      PS_RETURN_IF_ERROR(join_ring(config, backend, link));
      reporter->set_reducer(link->reducer.get());
      metrics.set_reducer(link->reducer.get());
      PS_LOG_INFO(
          "rank %d of %d (allreduce): %s model, %d steps, local batch %d x %d "
          "accumulation",
          rank, config.job().workers(), ConfigName(config.model().type()),
          config.training().steps(), config.training().local_batch(),
          config.training().grad_accum_steps());
      PS_ASSIGN_OR_RETURN(std::unique_ptr<AllReduceTrainer> trainer,
                          AllReduceTrainer::Create(options, link->reducer.get(),
                                                   model.get(), data.get()));
      PS_RETURN_IF_ERROR(trainer->Run(on_step, should_stop));
      final_params_ = trainer->params();
      PS_LOG_INFO(
          "final weights fingerprint %016x (FNV-1a; equal on every rank)",
          ParamsFingerprint(trainer->params()));
      return absl::OkStatus();
    }
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (const std::string& a : reg.job().shard_map().server_addresses()) {
      channels.push_back(MakeChannel(a, creds_));
    }
    PsClientOptions client_options;
    client_options.rpc_timeout =
        absl::Seconds(config.network().rpc_timeout_s());
    // The coordinator's value (JobSpec.config) is the one every server
    // applies.
    client_options.barrier_timeout =
        absl::Seconds(config.network().barrier_timeout_s());
    client_options.session_id = reg.session_id();
    client_options.wire_dtype = config.network().wire_dtype();
    PS_ASSIGN_OR_RETURN(
        *client, PsClient::Create(reg.job().shard_map(), std::move(channels),
                                  client_options));
    liveness->set_client(client->get());
    reporter->set_client(client->get());
    metrics.set_client(client->get());
    PS_LOG_INFO(
        "rank %d of %d: %s model, %d steps, local batch %d x %d "
        "accumulation",
        rank, config.job().workers(), ConfigName(config.model().type()),
        config.training().steps(), config.training().local_batch(),
        config.training().grad_accum_steps());
    Trainer trainer(options, client->get(), model.get(), data.get());
    PS_RETURN_IF_ERROR(trainer.Run(on_step, should_stop));
    final_params_ = trainer.final_params();
    return absl::OkStatus();
  };
  Reporter reporter(coord.get(), rpc_timeout, options_.report_interval);
  reporter.set_worker(rank, reg.session_id());
  std::unique_ptr<PsClient> client;
  AllReduceLink link;
  {
    // Destroyed (joined) before the client it may cancel.
    const absl::Duration lease =
        absl::Seconds(reg.job().config().network().lease_s() > 0
                          ? reg.job().config().network().lease_s()
                          : 5.0);
    Liveness liveness(coord.get(), rank, lease, rpc_timeout, stop);
    reporter.set_cancel([&liveness] { return liveness.lost_coordinator(); });
    st = run(&reporter, &client, &link, &liveness);
    reporter.set_cancel(nullptr);
    if (liveness.lost_coordinator()) {
      if (tty) std::fprintf(stderr, "\n");
      // Nobody to report to: exit.
      return absl::UnavailableError(liveness.reason());
    }
    if (stop() && !st.ok()) {
      PS_LOG_INFO("stopped on request (%s)", st.message());
      reporter.Flush(true, absl::StrCat("worker ", rank, ": stopped by signal"))
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
