#include "coordinator/coordinator_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/process.h"

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

absl::StatusOr<CoordinatorNodeOptions> CoordinatorOptionsFromFlags() {
  absl::StatusOr<JobConfig> config = ConfigFromFlags();
  if (!config.ok()) return config.status();
  CoordinatorNodeOptions o;
  o.config = *config;
  o.bind = absl::GetFlag(FLAGS_bind);
  o.port = absl::GetFlag(FLAGS_port);
  o.port_file = absl::GetFlag(FLAGS_port_file);
  o.out = absl::GetFlag(FLAGS_out);
  o.progress = !absl::GetFlag(FLAGS_quiet);
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.keep_serving_after_job = absl::GetFlag(FLAGS_keep_serving_after_job);
  o.tls = ResolveTls(o.config, absl::GetFlag(FLAGS_tls_cert),
                     absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_ca));
  return o;
}

bool DryRunRequested() { return absl::GetFlag(FLAGS_dry_run); }

}  // namespace pstrain
