// ps_worker: registers with the coordinator, gets its rank and the job, then
// trains: pull, compute, push, report. Exit 0 when its share of the job is
// done, 1 on failure (after telling the coordinator why).
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
#include "common/job_config.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/retry.h"
#include "common/signals.h"
#include "common/status_macros.h"
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

namespace pstrain {
namespace {

// Sends step records to the coordinator in batches.
class Reporter {
 public:
  Reporter(pstrain::v1::Coordinator::Stub* stub, absl::Duration timeout,
           absl::Duration interval)
      : stub_(stub), timeout_(timeout), interval_(interval) {}

  // Byte counters come from `client` once it exists (may stay null).
  void set_client(const PsClient* client) { client_ = client; }

  absl::Status Add(const pstrain::v1::StepMetrics& m) {
    *pending_.add_steps() = m;
    if (absl::Now() - last_ < interval_) return absl::OkStatus();
    return Flush(false, "");
  }

  absl::Status Flush(bool done, const std::string& error) {
    pending_.set_done(done);
    pending_.set_error(error);
    pending_.set_bytes_pushed(client_ ? client_->bytes_pushed() : 0);
    pending_.set_bytes_pulled(client_ ? client_->bytes_pulled() : 0);
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
  pstrain::v1::ReportRequest pending_;
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
                   "Bytes of push messages sent.", true, [this] {
                     const PsClient* c = client_.load();
                     return c ? static_cast<double>(c->bytes_pushed()) : 0.0;
                   });
    r->AddCallback("pstrain_worker_pulled_bytes_total",
                   "Bytes of pull messages received.", true, [this] {
                     const PsClient* c = client_.load();
                     return c ? static_cast<double>(c->bytes_pulled()) : 0.0;
                   });
  }

  void set_client(const PsClient* client) { client_.store(client); }

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
  const absl::Time start_ = absl::Now();
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
  auto creds = MakeChannelCredentials(
      ResolveTls(*file_config, absl::GetFlag(FLAGS_tls_cert),
                 absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_ca)));
  if (!creds.ok()) return Fail(std::string(creds.status().message()));

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

  pstrain::v1::RegisterWorkerResponse reg;
  absl::Status st = RetryUntil(
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s)),
      "coordinator and servers at " + coordinator, [&] {
        grpc::ClientContext ctx;
        SetTimeout(&ctx, rpc_timeout);
        pstrain::v1::RegisterWorkerRequest req;
        req.set_requested_rank(requested_rank);
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

  auto run = [&](Reporter* reporter,
                 std::unique_ptr<PsClient>* client) -> absl::Status {
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
    TrainerOptions options;
    options.rank = rank;
    options.config = config;
    Trainer trainer(options, client->get(), model.get(), data.get());
    absl::Time last_line = absl::InfinitePast();
    return trainer.Run(
        [&](const pstrain::v1::StepMetrics& m) {
          metrics.Record(m);
          if (tty && absl::Now() - last_line > absl::Milliseconds(250)) {
            last_line = absl::Now();
            std::fprintf(stderr, "\r  worker/%u step %llu/%lld  loss %.4f ",
                         rank, static_cast<unsigned long long>(m.step() + 1),
                         static_cast<long long>(config.steps), m.loss());
          }
          return reporter->Add(m);
        },
        [&] { return StopRequested() || reporter->stop(); });
  };
  Reporter reporter(coord.get(), rpc_timeout,
                    absl::Seconds(absl::GetFlag(FLAGS_report_interval_s)));
  std::unique_ptr<PsClient> client;
  st = run(&reporter, &client);
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
      "servers.\nUsage: ps_worker --coordinator HOST:PORT [--config job.yaml] "
      "[--rank R | --rank_from_env VAR] [--device auto|cpu|cuda] "
      "[--metrics_port P] [--tls_ca F [--tls_cert F --tls_key F]]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
