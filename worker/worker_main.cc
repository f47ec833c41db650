// ps_worker: registers with the coordinator, gets its rank and the job, then
// trains: pull, compute, push, report (or, in mode allreduce: serve its ring
// peer, get the ring from the coordinator, compute, all-reduce, apply the
// optimizer locally, report). Exit 0 when its share of the job is done, 1 on
// failure (after telling the coordinator why).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/host_name.h"
#include "common/job_config.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/retry.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "worker/allreduce/allreduce_trainer.h"
#include "worker/allreduce/grpc_transport.h"
#include "worker/allreduce/nccl_allreducer.h"
#include "worker/allreduce/ring_allreduce.h"
#include "worker/compute_backend.h"
#include "worker/data.h"
#include "worker/model.h"
#include "worker/ps_client.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, config, "",
          "job YAML file; its network section gives TLS files (optional: the "
          "job itself comes from the coordinator)");
ABSL_FLAG(std::string, coordinator, "",
          "coordinator address, host:port or DNS-name:port (required)");
ABSL_FLAG(int, rank, -1, "rank to claim; -1 lets the coordinator assign one");
ABSL_FLAG(std::string, rank_from_env, "",
          "take the rank from this environment variable (Kubernetes Indexed "
          "Job: JOB_COMPLETION_INDEX)");
ABSL_FLAG(std::string, device, "",
          "compute backend: auto (CUDA when a GPU is visible, else CPU), cpu "
          "or cuda; empty uses the job's worker.device");
ABSL_FLAG(int, metrics_port, -1,
          "serve Prometheus metrics at http://BIND:PORT/metrics; 0 picks a "
          "free port, -1 disables");
ABSL_FLAG(std::string, metrics_bind, "127.0.0.1",
          "address the metrics endpoint listens on (0.0.0.0 in a pod)");
ABSL_FLAG(std::string, token_file, "",
          "job token file: every call carries it and every service requires "
          "it (overrides network.token_file)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate (overrides network.tls_cert)");
ABSL_FLAG(std::string, tls_key, "",
          "PEM private key (overrides network.tls_key)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA verifying the coordinator and servers (overrides "
          "network.tls_ca)");
ABSL_FLAG(double, rpc_timeout_s, 30, "deadline of each unary call and push");
ABSL_FLAG(double, startup_timeout_s, 120,
          "how long to wait for the coordinator and the servers");
ABSL_FLAG(double, report_interval_s, 0.5, "seconds between metric reports");
ABSL_FLAG(std::string, peer_bind, "127.0.0.1",
          "mode allreduce: address the ring peer service listens on (0.0.0.0 "
          "in a pod)");
ABSL_FLAG(int, peer_port, 0,
          "mode allreduce: port of the ring peer service; 0 picks a free one");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "mode allreduce: host name the left neighbour dials to reach this "
          "worker's ring peer service (e.g. the pod's DNS name)");

namespace pstrain {
namespace {

// Sends step records to the coordinator in batches.
class Reporter {
 public:
  Reporter(pstrain::v1::Coordinator::Stub* stub, absl::Duration timeout,
           absl::Duration interval)
      : stub_(stub), timeout_(timeout), interval_(interval) {}

  void set_worker(uint32_t rank) { worker_ = rank; }

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
  uint32_t worker_ = 0;
  absl::Time last_ = absl::Now();
  bool stop_ = false;
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

absl::Status StartPeerServer(const TlsFiles& tls, PeerServer* peer) {
  if (!tls.ca.empty() && tls.cert.empty()) {
    return absl::InvalidArgumentError(
        "mode allreduce with TLS: workers serve their ring neighbours and "
        "need a certificate and key (--tls_cert, --tls_key)");
  }
  PS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds,
                      MakeServerCredentials(tls));
  peer->service = std::make_unique<RingPeerService>();
  PS_ASSIGN_OR_RETURN(StartedServer started,
                      StartGrpcServer(absl::GetFlag(FLAGS_peer_bind),
                                      absl::GetFlag(FLAGS_peer_port), creds,
                                      {peer->service.get()}));
  peer->server = std::move(started.server);
  const int port = started.port;
  peer->address = absl::StrCat(absl::GetFlag(FLAGS_advertise_host), ":", port);
  PS_LOG_INFO("ring peer service at %s (listening on %s:%d)", peer->address,
              absl::GetFlag(FLAGS_peer_bind), port);
  return absl::OkStatus();
}

// Mode allreduce: the collective this worker trains with; outlives the
// training (the final report reads its byte counters).
struct AllReduceLink {
  std::unique_ptr<Transport> transport;  // backend grpc
  std::unique_ptr<AllReducer> reducer;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "ps_worker: %s\n", message.c_str());
  return 2;
}

int Main() {
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) return Fail("--coordinator is required (host:port)");
  const std::string device_flag = absl::GetFlag(FLAGS_device);
  if (!device_flag.empty() && device_flag != "auto" && device_flag != "cpu" &&
      device_flag != "cuda") {
    return Fail("--device must be auto, cpu or cuda");
  }
  if (absl::GetFlag(FLAGS_rpc_timeout_s) <= 0 ||
      absl::GetFlag(FLAGS_startup_timeout_s) <= 0) {
    return Fail("--rpc_timeout_s and --startup_timeout_s must be > 0");
  }
  int requested_rank = absl::GetFlag(FLAGS_rank);
  if (const std::string env = absl::GetFlag(FLAGS_rank_from_env);
      !env.empty()) {
    absl::StatusOr<int> index = IndexFromEnv(env, std::getenv(env.c_str()));
    if (!index.ok()) {
      return Fail(absl::StrCat("--rank_from_env: ", index.status().message()));
    }
    requested_rank = *index;
  }
  absl::StatusOr<JobConfig> file_config =
      LoadConfigFlag(absl::GetFlag(FLAGS_config));
  if (!file_config.ok())
    return Fail(std::string(file_config.status().message()));
  const TlsFiles tls = ResolveTls(
      *file_config, absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
      absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_token_file));
  auto creds = MakeChannelCredentials(tls);
  if (!creds.ok()) return Fail(std::string(creds.status().message()));
  absl::Status host =
      ValidateHostName("--advertise_host", absl::GetFlag(FLAGS_advertise_host));
  if (!host.ok()) return Fail(std::string(host.message()));

  SetLogRole("worker");
  InstallStopSignalHandlers();
  MetricsRegistry registry;
  WorkerMetrics metrics(&registry);
  auto metrics_server =
      MaybeServeMetrics(&registry, absl::GetFlag(FLAGS_metrics_bind),
                        absl::GetFlag(FLAGS_metrics_port));
  if (!metrics_server.ok()) {
    PS_LOG_ERROR("%s", metrics_server.status().message());
    return 1;
  }
  const absl::Duration rpc_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  auto coord =
      pstrain::v1::Coordinator::NewStub(MakeChannel(coordinator, *creds));

  const absl::Time startup_deadline =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));

  // The mode first: in mode allreduce the worker serves its ring peer before
  // it registers, so that it can register the address.
  pstrain::v1::JobSpec job;
  absl::Status st =
      RetryUntil(startup_deadline, "coordinator at " + coordinator, [&] {
        grpc::ClientContext ctx;
        SetTimeout(&ctx, rpc_timeout);
        return FromGrpcStatus(coord->GetJob(&ctx, {}, &job));
      });
  if (!st.ok()) {
    PS_LOG_ERROR("cannot reach the coordinator: %s", st.message());
    return 1;
  }
  const bool allreduce = job.mode() == pstrain::v1::MODE_ALLREDUCE;
  PeerServer peer;
  if (allreduce) {
    st = StartPeerServer(tls, &peer);
    if (!st.ok()) {
      PS_LOG_ERROR("%s", st.message());
      return 2;
    }
  }

  pstrain::v1::RegisterWorkerResponse reg;
  st = RetryUntil(
      startup_deadline,
      allreduce ? "coordinator at " + coordinator
                : "coordinator and servers at " + coordinator,
      [&] {
        grpc::ClientContext ctx;
        SetTimeout(&ctx, rpc_timeout);
        pstrain::v1::RegisterWorkerRequest req;
        req.set_requested_rank(requested_rank);
        req.set_peer_address(peer.address);
        return FromGrpcStatus(coord->RegisterWorker(&ctx, req, &reg));
      });
  if (st.code() == absl::StatusCode::kFailedPrecondition) {
    PS_LOG_INFO("%s; nothing to do", st.message());
    return 0;
  }
  if (!st.ok()) {
    PS_LOG_ERROR("registration failed: %s", st.message());
    return 1;
  }
  const uint32_t rank = reg.rank();
  SetLogRole(absl::StrCat("worker/", rank));
  const bool tty = isatty(STDERR_FILENO);

  // Mode allreduce: the ring from the coordinator, then the collective.
  auto join_ring = [&](const JobConfig& config, ComputeBackend* backend,
                       AllReduceLink* link) -> absl::Status {
    const bool nccl = config.allreduce.backend == "nccl";
    std::string nccl_id;
    if (nccl) {
      PS_RETURN_IF_ERROR(NcclUsable(*backend));
      if (rank == 0) {
        PS_ASSIGN_OR_RETURN(nccl_id, NewNcclUniqueId());
      }
    }
    pstrain::v1::GetPeersResponse peers;
    PS_RETURN_IF_ERROR(
        RetryUntil(absl::Now() + absl::Seconds(config.startup_timeout_s),
                   "the other workers", [&] {
                     grpc::ClientContext ctx;
                     SetTimeout(&ctx, rpc_timeout);
                     pstrain::v1::GetPeersRequest req;
                     req.set_rank(rank);
                     req.set_nccl_unique_id(nccl_id);
                     return FromGrpcStatus(coord->GetPeers(&ctx, req, &peers));
                   }));
    const int n = peers.peer_addresses_size();
    const absl::Duration timeout = absl::Seconds(config.allreduce.timeout_s);
    if (nccl) {
      PS_ASSIGN_OR_RETURN(
          link->reducer, CreateNcclAllReducer(backend, rank, n,
                                              peers.nccl_unique_id(), timeout));
    } else {
      const std::string& right = peers.peer_addresses((rank + 1) % n);
      PS_ASSIGN_OR_RETURN(
          link->transport,
          GrpcTransport::Create(rank, n, MakeChannel(right, *creds),
                                peer.service.get()));
      RingOptions ring;
      ring.segment_elems = config.allreduce.segment_bytes / sizeof(float);
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
                 AllReduceLink* link) -> absl::Status {
    PS_ASSIGN_OR_RETURN(JobConfig config,
                        ParseJobConfig(reg.job().worker_config(), "job spec"));
    // The flag wins over the job's worker.device. The backend outlives the
    // model, which computes through it.
    PS_ASSIGN_OR_RETURN(
        std::unique_ptr<ComputeBackend> backend,
        CreateComputeBackend(device_flag.empty() ? config.worker.device
                                                 : device_flag));
    PS_LOG_INFO("compute backend: %s", backend->name());
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        Model::Create(config.model, backend.get()));
    PS_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                        DataSource::Create(config.data));
    PS_LOG_INFO("data: %s", data->Describe());
    if (config.model.type != "scalar" &&
        (data->num_features() != config.model.input_dim ||
         data->num_classes() != config.model.num_classes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the data has ", data->num_features(), " features and ",
                       data->num_classes(), " classes but model.input_dim is ",
                       config.model.input_dim, " and model.num_classes is ",
                       config.model.num_classes));
    }
    absl::Time last_line = absl::InfinitePast();
    auto on_step = [&](const pstrain::v1::StepMetrics& m) {
      metrics.Record(m);
      if (tty && absl::Now() - last_line > absl::Milliseconds(250)) {
        last_line = absl::Now();
        std::fprintf(stderr, "\r  worker/%u step %llu/%lld  loss %.4f ", rank,
                     static_cast<unsigned long long>(m.step() + 1),
                     static_cast<long long>(config.steps), m.loss());
      }
      return reporter->Add(m);
    };
    auto should_stop = [&] { return StopRequested() || reporter->stop(); };
    TrainerOptions options;
    options.rank = rank;
    options.config = config;
    if (allreduce) {
      PS_RETURN_IF_ERROR(join_ring(config, backend.get(), link));
      reporter->set_reducer(link->reducer.get());
      metrics.set_reducer(link->reducer.get());
      PS_LOG_INFO(
          "rank %d of %d (allreduce): %s model, %d steps, local batch %d x %d "
          "accumulation",
          rank, config.workers, config.model.type, config.steps,
          config.local_batch, config.grad_accum_steps);
      PS_ASSIGN_OR_RETURN(std::unique_ptr<AllReduceTrainer> trainer,
                          AllReduceTrainer::Create(options, link->reducer.get(),
                                                   model.get(), data.get()));
      PS_RETURN_IF_ERROR(trainer->Run(on_step, should_stop));
      PS_LOG_INFO(
          "final weights fingerprint %016x (FNV-1a; equal on every rank)",
          ParamsFingerprint(trainer->params()));
      return absl::OkStatus();
    }
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (const std::string& a : reg.job().shard_map().server_addresses()) {
      channels.push_back(MakeChannel(a, *creds));
    }
    PsClientOptions client_options;
    client_options.rpc_timeout = absl::Seconds(config.rpc_timeout_s);
    client_options.barrier_timeout = absl::Seconds(config.barrier_timeout_s);
    PS_ASSIGN_OR_RETURN(
        *client, PsClient::Create(reg.job().shard_map(), std::move(channels),
                                  client_options));
    reporter->set_client(client->get());
    metrics.set_client(client->get());
    PS_LOG_INFO(
        "rank %d of %d: %s model, %d steps, local batch %d x %d "
        "accumulation",
        rank, config.workers, config.model.type, config.steps,
        config.local_batch, config.grad_accum_steps);
    Trainer trainer(options, client->get(), model.get(), data.get());
    return trainer.Run(on_step, should_stop);
  };
  Reporter reporter(coord.get(), rpc_timeout,
                    absl::Seconds(absl::GetFlag(FLAGS_report_interval_s)));
  reporter.set_worker(rank);
  std::unique_ptr<PsClient> client;
  AllReduceLink link;
  st = run(&reporter, &client, &link);
  if (tty) std::fprintf(stderr, "\n");
  if (!st.ok()) {
    PS_LOG_ERROR("training failed: %s", st.ToString());
    reporter.Flush(true, absl::StrCat("worker ", rank, ": ", st.ToString()))
        .IgnoreError();
    return 1;
  }
  st = reporter.Flush(true, "");
  if (!st.ok()) {
    PS_LOG_ERROR("final report failed: %s", st.message());
    return 1;
  }
  PS_LOG_INFO("done");
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pstrain worker: trains its share of the job against the parameter "
      "servers (or, in mode allreduce, with its ring neighbours).\nUsage: "
      "ps_worker --coordinator HOST:PORT [--config job.yaml] "
      "[--rank R | --rank_from_env VAR] [--device auto|cpu|cuda] "
      "[--metrics_port P] [--tls_ca F [--tls_cert F --tls_key F]] "
      "[--peer_bind ADDR] [--peer_port P] [--advertise_host HOST]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
