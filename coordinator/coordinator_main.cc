// ps_coordinator: registers servers and workers, publishes the shard map,
// aggregates metrics and ends the job. See README "Running as services".
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

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
#include "common/node_flags.h"
#include "common/process.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"

// Shared flags (--config, --metrics_port, --tls_*, --rpc_timeout_s,
// --startup_timeout_s): common/node_flags.h.
ABSL_FLAG(std::string, bind, "127.0.0.1", "address to listen on");
ABSL_FLAG(int, port, 0, "port to listen on; 0 picks a free one");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file");
ABSL_FLAG(std::string, out, "", "directory for metrics.csv and summary.json");
// Overrides of single keys, applied through the job config's key table
// (ApplyFlagOverrides); empty = not given. A given value is honoured or
// rejected with an error naming the flag.
ABSL_FLAG(std::string, mode, "",
          "override training.mode: sync | async | allreduce (workers only, "
          "no servers)");
ABSL_FLAG(std::string, staleness, "", "override training.staleness: N | inf");
ABSL_FLAG(std::string, workers, "", "override job.workers");
ABSL_FLAG(std::string, servers, "", "override job.servers");
ABSL_FLAG(std::string, steps, "", "override training.steps");
ABSL_FLAG(bool, quiet, false, "no per-second progress lines");
ABSL_FLAG(bool, keep_serving_after_job, false,
          "after the job, keep answering status and metrics until SIGTERM "
          "(for a Kubernetes Deployment, which would restart an exited pod)");
ABSL_FLAG(bool, dry_run, false,
          "validate the config, print the effective job (first line: "
          "'workers=N servers=K') and exit");
ABSL_FLAG(std::string, plan_dir, "",
          "with --dry_run: also write DIR/job.yaml (the effective job) and "
          "DIR/plan.env ('workers=N' and 'servers=K' lines: the processes to "
          "launch)");

namespace pstrain {
namespace {

// The job: the --config file (in node.file_config) with the flag overrides.
absl::StatusOr<JobConfig> ConfigFromFlags(const NodeOptions& node) {
  JobConfig config = node.file_config;
  std::vector<FlagOverride> overrides;
  for (const auto& [flag, key, value] :
       std::vector<std::tuple<const char*, const char*, std::string>>{
           {"--mode", "training.mode", absl::GetFlag(FLAGS_mode)},
           {"--staleness", "training.staleness",
            absl::GetFlag(FLAGS_staleness)},
           {"--workers", "job.workers", absl::GetFlag(FLAGS_workers)},
           {"--servers", "job.servers", absl::GetFlag(FLAGS_servers)},
           {"--steps", "training.steps", absl::GetFlag(FLAGS_steps)},
       }) {
    if (!value.empty()) overrides.push_back({flag, key, value});
  }
  PS_RETURN_IF_ERROR(ApplyFlagOverrides(overrides, &config));
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
  absl::StatusOr<NodeOptions> node =
      NodeOptionsFromFlags(NodeRole::kCoordinator);
  if (!node.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n",
                 std::string(node.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<JobConfig> config = ConfigFromFlags(*node);
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
    const std::string dir = absl::GetFlag(FLAGS_plan_dir);
    if (!dir.empty()) {
      std::ofstream job(dir + "/job.yaml"), plan(dir + "/plan.env");
      job << JobConfigToYaml(*config);
      plan << "workers=" << config->workers << "\nservers=" << servers << "\n";
      if (!job.flush() || !plan.flush()) {
        std::fprintf(stderr, "ps_coordinator: --plan_dir: cannot write '%s'\n",
                     dir.c_str());
        return 2;
      }
    }
    return 0;
  }
  const TlsFiles& tls = node->tls;
  auto server_creds = MakeServerCredentials(tls);
  auto client_creds = MakeChannelCredentials(tls);
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
                                          node->metrics_port);
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
    return 1;
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
