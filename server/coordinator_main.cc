// ps_coordinator: registers servers and workers, publishes the shard map,
// aggregates metrics and ends the job. See README "Running as services".
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/job_config.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/signals.h"
#include "server/coordinator.h"

ABSL_FLAG(std::string, config, "", "job YAML file (defaults when empty)");
ABSL_FLAG(std::string, bind, "127.0.0.1", "address to listen on");
ABSL_FLAG(int, port, 0, "port to listen on; 0 picks a free one");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file");
ABSL_FLAG(std::string, out, "", "directory for metrics.csv and summary.json");
ABSL_FLAG(std::string, mode, "",
          "override training.mode: sync | async | allreduce (workers only, "
          "no servers)");
ABSL_FLAG(std::string, staleness, "", "override training.staleness: N | inf");
ABSL_FLAG(int, workers, 0, "override job.workers");
ABSL_FLAG(int, servers, 0, "override job.servers");
ABSL_FLAG(int64_t, steps, 0, "override training.steps");
ABSL_FLAG(bool, quiet, false, "no per-second progress lines");
ABSL_FLAG(int, metrics_port, -1,
          "serve Prometheus metrics at http://BIND:PORT/metrics; 0 picks a "
          "free port, -1 disables");
ABSL_FLAG(bool, keep_serving_after_job, false,
          "after the job, keep answering status and metrics until SIGTERM "
          "(for a Kubernetes Deployment, which would restart an exited pod)");
ABSL_FLAG(std::string, token_file, "",
          "job token file: every call carries it and every service requires "
          "it (overrides network.token_file)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (overrides network.tls_cert)");
ABSL_FLAG(std::string, tls_key, "",
          "PEM private key (overrides network.tls_key)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA: requires client certificates and verifies servers "
          "(overrides network.tls_ca)");
ABSL_FLAG(bool, dry_run, false,
          "validate the config, print the effective job (first line: "
          "'workers=N servers=K') and exit");

namespace pstrain {
namespace {

absl::StatusOr<JobConfig> ConfigFromFlags() {
  JobConfig config = DefaultJobConfig();
  if (!absl::GetFlag(FLAGS_config).empty()) {
    auto loaded = LoadJobConfig(absl::GetFlag(FLAGS_config));
    if (!loaded.ok()) {
      return absl::Status(
          loaded.status().code(),
          absl::StrCat("--config: ", loaded.status().message()));
    }
    config = *loaded;
  }
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "sync") {
    config.mode = pstrain::v1::MODE_SYNC;
  } else if (mode == "async") {
    config.mode = pstrain::v1::MODE_ASYNC;
  } else if (mode == "allreduce") {
    config.mode = pstrain::v1::MODE_ALLREDUCE;
  } else if (!mode.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode: expected sync, async or allreduce, got '", mode, "'"));
  }
  const std::string st = absl::GetFlag(FLAGS_staleness);
  if (st == "inf") {
    config.staleness = -1;
  } else if (!st.empty()) {
    int64_t s;
    if (!absl::SimpleAtoi(st, &s) || s < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--staleness: expected a non-negative integer or inf, got '", st,
          "'"));
    }
    config.staleness = s;
  }
  if (absl::GetFlag(FLAGS_workers) < 0 || absl::GetFlag(FLAGS_servers) < 0 ||
      absl::GetFlag(FLAGS_steps) < 0) {
    return absl::InvalidArgumentError(
        "--workers, --servers and --steps must be >= 1");
  }
  if (absl::GetFlag(FLAGS_workers) > 0)
    config.workers = absl::GetFlag(FLAGS_workers);
  if (absl::GetFlag(FLAGS_servers) > 0)
    config.servers = absl::GetFlag(FLAGS_servers);
  if (absl::GetFlag(FLAGS_steps) > 0) config.steps = absl::GetFlag(FLAGS_steps);
  FinalizeJobConfig(&config);
  absl::Status valid = ValidateJobConfig(config);
  if (!valid.ok()) return valid;
  return config;
}

std::vector<pstrain::v1::ShardStats> CollectStatsAndShutdown(
    const std::vector<std::string>& addresses,
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    absl::Duration timeout, const std::string& reason) {
  std::vector<pstrain::v1::ShardStats> stats;
  for (const std::string& address : addresses) {
    if (address.empty()) continue;
    auto stub = pstrain::v1::ParameterServer::NewStub(
        MakeChannel(address, credentials));
    {
      grpc::ClientContext ctx;
      SetTimeout(&ctx, timeout);
      pstrain::v1::ShardStats s;
      grpc::Status st = stub->GetStats(&ctx, {}, &s);
      if (st.ok()) {
        stats.push_back(s);
      } else {
        PS_LOG_WARN("no statistics from %s: %s", address, st.error_message());
      }
    }
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    pstrain::v1::ShutdownRequest req;
    req.set_reason(reason);
    pstrain::v1::ShutdownResponse resp;
    grpc::Status st = stub->Shutdown(&ctx, req, &resp);
    if (!st.ok())
      PS_LOG_WARN("shutdown of %s: %s", address, st.error_message());
  }
  return stats;
}

int Main() {
  SetLogRole("coordinator");
  absl::StatusOr<JobConfig> config = ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  // Servers the job needs: none in mode allreduce (job.servers ignored).
  const int servers =
      config->mode == pstrain::v1::MODE_ALLREDUCE ? 0 : config->servers;
  if (absl::GetFlag(FLAGS_dry_run)) {
    std::printf("workers=%d servers=%d\n%s", config->workers, servers,
                JobConfigToYaml(*config).c_str());
    return 0;
  }
  const TlsFiles tls = ResolveTls(
      *config, absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
      absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_token_file));
  auto server_creds = MakeServerCredentials(tls);
  auto client_creds = MakeChannelCredentials(tls, CallerRole::kCoordinator);
  if (!server_creds.ok() || !client_creds.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n",
                 std::string((server_creds.ok() ? client_creds.status()
                                                : server_creds.status())
                                 .message())
                     .c_str());
    return 2;
  }
  MetricsRegistry metrics;
  auto metrics_server = MaybeServeMetrics(&metrics, absl::GetFlag(FLAGS_bind),
                                          absl::GetFlag(FLAGS_metrics_port));
  if (!metrics_server.ok()) {
    PS_LOG_ERROR("%s", metrics_server.status().message());
    return 1;
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) {
    std::error_code error;
    std::filesystem::create_directories(out, error);
    if (error) {
      std::fprintf(stderr, "ps_coordinator: --out: cannot create '%s': %s\n",
                   out.c_str(), error.message().c_str());
      return 2;
    }
  }
  CoordinatorOptions options;
  options.config = *config;
  options.progress = !absl::GetFlag(FLAGS_quiet);
  options.metrics = &metrics;
  if (!out.empty()) options.metrics_csv = out + "/metrics.csv";
  auto service = CoordinatorService::Create(options);
  if (!service.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n",
                 std::string(service.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<StartedServer> started =
      StartGrpcServer(absl::GetFlag(FLAGS_bind), absl::GetFlag(FLAGS_port),
                      *server_creds, {service->get()});
  if (!started.ok()) {
    PS_LOG_ERROR("%s", started.status().message());
    return 2;
  }
  grpc::Server* server = started->server.get();
  const int port = started->port;
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    std::string tmp = absl::GetFlag(FLAGS_port_file) + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), absl::GetFlag(FLAGS_port_file).c_str());
  }
  PS_LOG_INFO(
      "job '%s': %s, %d workers, %d servers, %d steps; listening on %s:%d",
      config->name,
      config->mode == pstrain::v1::MODE_SYNC ? "sync"
      : config->mode == pstrain::v1::MODE_ALLREDUCE
          ? absl::StrCat("allreduce (", config->allreduce.backend, ")")
      : config->staleness < 0
          ? std::string("async staleness inf")
          : absl::StrCat("async staleness ", config->staleness),
      config->workers, servers, config->steps, absl::GetFlag(FLAGS_bind), port);
  PS_LOG_INFO(
      "global batch %d = local batch %d x %d workers x %d accumulation steps",
      config->local_batch * config->workers * config->grad_accum_steps,
      config->local_batch, config->workers, config->grad_accum_steps);

  InstallStopSignalHandlers();
  const absl::Time startup_deadline =
      absl::Now() + absl::Seconds(config->startup_timeout_s);
  while (!(*service)->WaitForEnd(absl::Now() + absl::Milliseconds(200))) {
    if (StopRequested()) {
      (*service)->Fail("coordinator stopped by signal");
      break;
    }
    if (absl::Now() > startup_deadline && !(*service)->TrainingStarted()) {
      (*service)->Fail(
          absl::StrCat("not every server and worker registered within ",
                       config->startup_timeout_s, "s"));
      break;
    }
  }
  JobOutcome outcome = (*service)->Outcome();
  const absl::Duration timeout = absl::Seconds(config->rpc_timeout_s);
  std::vector<pstrain::v1::ShardStats> stats = CollectStatsAndShutdown(
      (*service)->ServerAddresses(), *client_creds, timeout,
      outcome.failed ? "job failed" : "job finished");
  if (!out.empty()) {
    absl::Status st =
        WriteSummaryJson(out + "/summary.json", *config, outcome, stats);
    if (!st.ok()) PS_LOG_ERROR("%s", st.message());
  }
  if (absl::GetFlag(FLAGS_keep_serving_after_job) && !StopRequested()) {
    PS_LOG_INFO("job over; serving status and metrics until terminated");
    while (!StopRequested()) absl::SleepFor(absl::Milliseconds(200));
  }
  // Let workers' final reports get their answers before the port closes.
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  if (outcome.failed) {
    PS_LOG_ERROR("job failed: %s", outcome.message);
    return 1;
  }
  PS_LOG_INFO("job finished: %d steps in %.2fs, final loss %.5f%s",
              outcome.steps, outcome.wall_s, outcome.final_loss,
              outcome.has_accuracy ? absl::StrFormat(", test accuracy %.4f",
                                                     outcome.final_accuracy)
                                   : "");
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pstrain coordinator: registers servers and workers, publishes the shard "
      "map, aggregates metrics.\nUsage: ps_coordinator [--config job.yaml] "
      "[--port N] [--out DIR] [overrides]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
