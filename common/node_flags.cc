#include "common/node_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, config, "",
          "job YAML file (defaults when empty); servers and workers read only "
          "its network section (TLS files), the job comes from the "
          "coordinator");
ABSL_FLAG(std::string, coordinator, "",
          "servers and workers: coordinator address, host:port or "
          "DNS-name:port (required)");
ABSL_FLAG(int, metrics_port, -1,
          "serve Prometheus metrics at http://BIND:PORT/metrics; 0 picks a "
          "free port, -1 disables");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (overrides network.tls_cert)");
ABSL_FLAG(std::string, tls_key, "",
          "PEM private key (overrides network.tls_key)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA: verifies the peers; on a listening node also requires "
          "client certificates (overrides network.tls_ca)");
ABSL_FLAG(std::string, token_file, "",
          "job token file: every call carries it and every service requires "
          "it (overrides network.token_file)");
ABSL_FLAG(double, rpc_timeout_s, 0,
          "deadline of each call; 0: 30 for servers and workers, "
          "network.rpc_timeout_s for the coordinator");
ABSL_FLAG(double, startup_timeout_s, 0,
          "how long to wait for the peers at start-up; 0: 120 for servers and "
          "workers, network.startup_timeout_s for the coordinator");

namespace pstrain {
namespace {

// A timeout flag: 0 means "not given" (returns `fallback` seconds).
absl::StatusOr<double> TimeoutFlag(const char* flag, double value,
                                   double fallback) {
  if (value == 0) return fallback;
  if (!(value > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": must be > 0, got ", value));
  }
  return value;
}

}  // namespace

absl::StatusOr<NodeOptions> NodeOptionsFromFlags(NodeRole role,
                                                 bool require_token) {
  NodeOptions options;
  PS_ASSIGN_OR_RETURN(options.file_config,
                      LoadConfigFlag(absl::GetFlag(FLAGS_config)));
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  const bool is_coordinator = role == NodeRole::kCoordinator;
  if (is_coordinator && !options.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "--coordinator: not used by the coordinator itself");
  }
  if (!is_coordinator && options.coordinator.empty()) {
    return absl::InvalidArgumentError("--coordinator: required (host:port)");
  }
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (options.metrics_port < -1 || options.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port: must be -1 (off), 0 (any) or a port, "
                     "got ",
                     options.metrics_port));
  }
  JobConfig& file = options.file_config;
  PS_ASSIGN_OR_RETURN(
      const double rpc_s,
      TimeoutFlag("rpc_timeout_s", absl::GetFlag(FLAGS_rpc_timeout_s),
                  is_coordinator ? file.network().rpc_timeout_s() : 30));
  PS_ASSIGN_OR_RETURN(
      const double startup_s,
      TimeoutFlag("startup_timeout_s", absl::GetFlag(FLAGS_startup_timeout_s),
                  is_coordinator ? file.network().startup_timeout_s() : 120));
  if (is_coordinator) {
    file.mutable_network()->set_rpc_timeout_s(rpc_s);
    file.mutable_network()->set_startup_timeout_s(startup_s);
  }
  options.rpc_timeout = absl::Seconds(rpc_s);
  options.startup_timeout = absl::Seconds(startup_s);
  options.tls = ResolveTls(
      file, absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
      absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_token_file));
  if (!require_token) return options;
  const char* name = is_coordinator              ? "coordinator"
                     : role == NodeRole::kServer ? "server"
                                                 : "worker";
  PS_RETURN_IF_ERROR(CheckTokenRequired(file, options.tls, name));
  if (options.tls.token_file.empty()) {
    PS_LOG_WARN(
        "security.insecure is set: this %s runs WITHOUT a job token, so "
        "anyone who can reach its ports can call it (docs/security.md)",
        name);
  }
  return options;
}

}  // namespace pstrain
