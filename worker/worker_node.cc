#include "worker/worker_node.h"

#include <sys/stat.h>

#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/host_name.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "coordinator/failure_policy.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/allreduce/allreduce_trainer.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/worker_device.h"
#include "worker/data/data.h"
#include "worker/data/data_check.h"
#include "worker/generation_loop.h"
#include "worker/liveness.h"
#include "worker/model/model.h"
#include "worker/peer_server.h"
#include "worker/ps/ps_client.h"
#include "worker/ps_trainer_factory.h"
#include "worker/reporter.h"
#include "worker/ring_trainer_factory.h"
#include "worker/stand_ins.h"
#include "worker/trainer_context.h"
#include "worker/worker_metrics.h"

namespace pstrain {
namespace {

// How long a worker stopped by SIGTERM waits for its last report.
constexpr absl::Duration kStoppedReportTimeout = absl::Milliseconds(500);

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
                   if (options_.adopter >= 0) req.set_adopter(options_.adopter);
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
    TrainerContext context;
    context.options.rank = rank;
    context.options.config = config;
    context.session_id = reg.session_id();
    context.coord = coord.get();
    context.creds = creds_;
    context.rpc_timeout = rpc_timeout;
    context.liveness = liveness;
    context.reporter = reporter;
    context.metrics = &metrics;
    context.model = model.get();
    context.data = data.get();
    context.stop = stop;
    // Mode-specific: the shards (and elastic sync's stand-ins) or the ring.
    std::unique_ptr<TrainerFactory> factory =
        allreduce ? NewRingTrainerFactory(std::move(context), backend,
                                          peer.service.get(), link, should_stop)
                  : NewPsTrainerFactory(std::move(context),
                                        options_.report_interval, client);
    // The rank's own start: the job's start step, or for a rank joined again
    // after its worker was declared dead (elastic) where it picks up.
    const int64_t start_step = static_cast<int64_t>(reg.start_step());
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
    GenerationLoopOptions loop;
    loop.rolls_back = FailurePolicy::ForJob(config.training())->RollsBack();
    loop.await_rollback = [&](uint64_t generation) {
      return AwaitRollback(coord.get(), generation, config, stop);
    };
    loop.await_next = [&](uint64_t current) {
      return AwaitNewGeneration(coord.get(), *liveness, current, config, stop);
    };
    loop.ended = [&] {
      return stop() || reporter->stop() || liveness->ended();
    };
    // The first report of the new generation says so (the coordinator
    // notes "resumed worker R in generation G at step S").
    loop.on_resume = [reporter](const pstrain::v1::JobSpec& next) {
      reporter->set_resumed_at_step(next.start_step());
    };
    return RunGenerations(reg.job(), start_step, factory.get(), loop, on_step,
                          should_stop, &final_params_);
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
  // Mode allreduce: the final report carries the replica's fingerprint,
  // which the coordinator notes ("done worker R weights FP").
  if (allreduce) {
    reporter.set_weights_fingerprint(ParamsFingerprint(final_params_));
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
