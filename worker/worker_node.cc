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
#include "worker/liveness.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"
#include "worker/ps/trainer.h"
#include "worker/reporter.h"
#include "worker/stand_ins.h"
#include "worker/worker_metrics.h"

namespace pstrain {
namespace {

// How long a worker stopped by SIGTERM waits for its last report.
constexpr absl::Duration kStoppedReportTimeout = absl::Milliseconds(500);

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
    // A row-sparse table (docs/sparse.md) travels by row to the shards, or
    // in mode allreduce as allreduce.sparse says (row_replicas.h).
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
