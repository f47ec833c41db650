#include "common/process.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/retry.h"
#include "common/timeline.h"

namespace pstrain {

absl::StatusOr<JobConfig> LoadConfigFlag(const std::string& path) {
  if (path.empty()) return DefaultJobConfig();
  absl::StatusOr<JobConfig> config = LoadJobConfig(path);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat("--config: ", config.status().message()));
  }
  return config;
}

absl::Status CheckTokenRequired(const JobConfig& config, const TlsFiles& tls,
                                absl::string_view role) {
  if (!tls.token_file.empty() || config.security().insecure()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--token_file: required: a ", role,
      " will not start without the job token (every process of a job needs "
      "the same one). Make one with `openssl rand -hex 32 > job.token` "
      "(mode 0600) and pass --token_file=job.token to the coordinator, every "
      "server and every worker (./psctl run does this for you); or, on a "
      "network you trust, opt out with `security: {insecure: true}` in the "
      "job file given to every process with --config"));
}

TlsFiles ResolveTls(const JobConfig& config, const std::string& cert_flag,
                    const std::string& key_flag, const std::string& ca_flag,
                    const std::string& token_flag) {
  TlsFiles tls{config.network().tls_cert(), config.network().tls_key(),
               config.network().tls_ca(), config.network().token_file()};
  if (!token_flag.empty()) tls.token_file = token_flag;
  if (!cert_flag.empty()) tls.cert = cert_flag;
  if (!key_flag.empty()) tls.key = key_flag;
  if (!ca_flag.empty()) tls.ca = ca_flag;
  return tls;
}

absl::StatusOr<int> OrdinalFromHostname(const std::string& hostname) {
  const size_t dash = hostname.rfind('-');
  int ordinal;
  if (dash == std::string::npos ||
      !absl::SimpleAtoi(hostname.substr(dash + 1), &ordinal) || ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard_from_hostname: host name '", hostname,
                     "' does not end in -<ordinal> (as StatefulSet pods do)"));
  }
  return ordinal;
}

absl::StatusOr<int> IndexFromEnv(const std::string& name, const char* value) {
  int index;
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, " is not set"));
  }
  if (!absl::SimpleAtoi(value, &index) || index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", value,
                     "' is not a non-negative integer"));
  }
  return index;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MaybeServeMetrics(
    const MetricsRegistry* registry, const std::string& bind, int port) {
  if (port < 0) return std::unique_ptr<MetricsHttpServer>();
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(registry, bind, port);
  if (!server.ok()) {
    return absl::Status(
        server.status().code(),
        absl::StrCat("--metrics_port: ", server.status().message()));
  }
  PS_LOG_INFO("metrics at http://%s:%d/metrics", bind, (*server)->port());
  return server;
}

namespace {
constexpr char kJobOverPayload[] = "type.pstrain/job_over";
}  // namespace

absl::Status JobOverError(absl::string_view message) {
  absl::Status status = absl::FailedPreconditionError(message);
  status.SetPayload(kJobOverPayload, absl::Cord("1"));
  return status;
}

bool IsJobOver(const absl::Status& status) {
  return status.GetPayload(kJobOverPayload).has_value();
}

int ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  return IsJobOver(status) ? kExitJobOver : kExitFailed;
}

void ExitNow(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  ProcessTimeline().Flush();  // _Exit runs no atexit handler
  std::_Exit(code);
}

CancelOnStop::CancelOnStop(grpc::ClientContext* context,
                           std::function<bool()> stop) {
  if (!stop) return;
  thread_ = std::thread([this, context, stop = std::move(stop)] {
    while (!done_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
      if (stop()) {
        context->TryCancel();
        return;
      }
    }
  });
}

CancelOnStop::~CancelOnStop() {
  done_.Notify();
  if (thread_.joinable()) thread_.join();
}

int FailStartup(const char* program, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", program,
               std::string(status.message()).c_str());
  return kExitBadStart;
}

absl::StatusOr<int> RankFromFlags(int rank, const std::string& env_var) {
  if (env_var.empty()) return rank;
  absl::StatusOr<int> index =
      IndexFromEnv(env_var, std::getenv(env_var.c_str()));
  if (index.ok()) return index;
  return absl::InvalidArgumentError(
      absl::StrCat("--rank_from_env: ", index.status().message()));
}

absl::Status CallUntil(
    absl::Time deadline, const std::string& what, absl::Duration rpc_timeout,
    const std::function<bool()>& stop,
    const std::function<grpc::Status(grpc::ClientContext*)>& call) {
  return RetryUntil(
      deadline, what,
      [&] {
        grpc::ClientContext ctx;
        SetTimeout(&ctx, rpc_timeout);
        CancelOnStop cancel(&ctx, stop);
        return FromGrpcStatus(call(&ctx));
      },
      stop);
}

}  // namespace pstrain
