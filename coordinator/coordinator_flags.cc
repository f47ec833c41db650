#include "coordinator/coordinator_flags.h"

#include <cmath>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/node_flags.h"
#include "common/process.h"
#include "common/status_macros.h"

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
ABSL_FLAG(std::string, resume, "",
          "resume from a checkpoint: 'latest' (the newest complete one under "
          "checkpoint.dir, default --out/ckpt), a checkpoint directory "
          "(step-N/) or a directory of them (its newest); sync mode only");
ABSL_FLAG(bool, keep_serving_after_job, false,
          "after the job, keep answering status and metrics until SIGTERM "
          "(for a Kubernetes Deployment, which would restart an exited pod)");
ABSL_FLAG(std::string, termination_log, "",
          "also write the final summary (one line of JSON, at most 4096 "
          "bytes) to this file, e.g. /dev/termination-log on Kubernetes; "
          "when --out holds a finished job, why the coordinator exits 3");
ABSL_FLAG(bool, dry_run, false,
          "validate the config, print the effective job (first line: "
          "'workers=N servers=K') and exit");
ABSL_FLAG(std::string, plan_dir, "",
          "with --dry_run: also write DIR/job.yaml (the effective job) and "
          "DIR/plan.env ('workers=N', 'servers=K' and 'lease_s=S' lines: the "
          "processes to launch and the lease in whole seconds)");

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

}  // namespace

absl::StatusOr<JobConfig> ConfigFromFlags() {
  PS_ASSIGN_OR_RETURN(NodeOptions node,
                      NodeOptionsFromFlags(NodeRole::kCoordinator,
                                           /*require_token=*/false));
  return ConfigFromFlags(node);
}

absl::StatusOr<CoordinatorNodeOptions> CoordinatorOptionsFromFlags() {
  // A dry run listens nowhere and calls nobody: no token needed.
  PS_ASSIGN_OR_RETURN(
      NodeOptions node,
      NodeOptionsFromFlags(NodeRole::kCoordinator,
                           /*require_token=*/!DryRunRequested()));
  CoordinatorNodeOptions o;
  PS_ASSIGN_OR_RETURN(o.config, ConfigFromFlags(node));
  o.bind = absl::GetFlag(FLAGS_bind);
  o.port = absl::GetFlag(FLAGS_port);
  o.port_file = absl::GetFlag(FLAGS_port_file);
  o.out = absl::GetFlag(FLAGS_out);
  o.progress = !absl::GetFlag(FLAGS_quiet);
  o.metrics_port = node.metrics_port;
  o.keep_serving_after_job = absl::GetFlag(FLAGS_keep_serving_after_job);
  o.tls = node.tls;
  o.resume = absl::GetFlag(FLAGS_resume);
  o.termination_log = absl::GetFlag(FLAGS_termination_log);
  return o;
}

bool DryRunRequested() { return absl::GetFlag(FLAGS_dry_run); }

absl::Status WritePlanIfRequested(const JobConfig& config,
                                  const pstrain::v1::JobSpec& spec,
                                  const ResumePoint* resume) {
  const std::string dir = absl::GetFlag(FLAGS_plan_dir);
  if (dir.empty()) return absl::OkStatus();
  const int servers = config.training().mode() == pstrain::v1::MODE_ALLREDUCE
                          ? 0
                          : config.job().servers();
  std::ofstream job(dir + "/job.yaml"), plan(dir + "/plan.env");
  job << JobConfigToYaml(config);
  // lease_s in whole seconds, rounded up (psctl waits that long for the
  // coordinator to record why a process died).
  plan << "workers=" << config.job().workers() << "\nservers=" << servers
       << "\nlease_s="
       << static_cast<int64_t>(std::ceil(config.network().lease_s())) << "\n";
  // psctl run supervises restarts by the job's FailurePolicy, built from
  // these (tools/launch/supervisor.h).
  plan << "on_failure=" << ConfigName(config.training().on_failure())
       << "\nmax_restarts=" << config.training().max_restarts()
       << "\nmode=" << ConfigName(config.training().mode())
       << "\nmin_workers=" << config.training().min_workers() << "\n";
  // What the policy asks of workers (JobSpec.worker_recovery): psctl run
  // refuses --worker-cmd when live workers must stand in for lost ranks,
  // which Python workers cannot.
  plan << "stands_in=" << (spec.worker_recovery().stands_in() ? 1 : 0) << "\n";
  // training.clock model in async: C++ workers only (psctl run refuses
  // --worker-cmd).
  plan << "model_clock="
       << (config.training().mode() == pstrain::v1::MODE_ASYNC &&
                   config.training().clock() ==
                       pstrain::v1::TrainingConfig::CLOCK_MODEL
               ? 1
               : 0)
       << "\n";
  // What the servers set on their connections (psctl run's note).
  plan << "tcp_congestion_control=" << config.network().tcp_congestion_control()
       << "\n";
  if (resume != nullptr) {
    plan << "resume_step=" << resume->step << "\nresume_from=" << resume->dir
         << "\n";
  }
  std::ofstream spec_file(dir + "/job_spec.pb", std::ios::binary);
  const bool spec_ok = spec.SerializeToOstream(&spec_file) && spec_file.flush();
  if (!job.flush() || !plan.flush() || !spec_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("--plan_dir: cannot write '", dir, "'"));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
