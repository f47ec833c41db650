// Start-up helpers shared by the three binaries' main(): everything here
// takes plain values that main read from its flags or environment, so the
// stack below main never looks at either.
#ifndef PSTRAIN_COMMON_PROCESS_H_
#define PSTRAIN_COMMON_PROCESS_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/job_config.h"
#include "common/metrics.h"
#include "common/metrics_http.h"

namespace pstrain {

// The job file named by --config (DefaultJobConfig() when `path` is empty).
// Errors start with "--config: " and name the file and line.
absl::StatusOr<JobConfig> LoadConfigFlag(const std::string& path);

// TLS and token files: each non-empty flag value wins over the job file's
// network.tls_* and network.token_file.
TlsFiles ResolveTls(const JobConfig& config, const std::string& cert_flag,
                    const std::string& key_flag, const std::string& ca_flag,
                    const std::string& token_flag = "");

// Secure by default (docs/security.md): a process with no job token
// (`tls.token_file` empty) may start only when the job file says
// `security: {insecure: true}`. INVALID_ARGUMENT naming --token_file, how to
// make a token and how to opt out; OK otherwise. `role` ("coordinator",
// "server", "worker") is named in the message.
absl::Status CheckTokenRequired(const JobConfig& config, const TlsFiles& tls,
                                absl::string_view role);

// The ordinal of a StatefulSet pod from its host name ("ps-3" -> 3).
absl::StatusOr<int> OrdinalFromHostname(const std::string& hostname);

// A rank or index from the value of environment variable `name` (e.g. the
// Kubernetes Indexed Job's JOB_COMPLETION_INDEX); `value` null = unset.
absl::StatusOr<int> IndexFromEnv(const std::string& name, const char* value);

// Exit codes of ps_coordinator, ps_server and ps_worker
// (docs/failures-and-recovery.md):
inline constexpr int kExitOk = 0;        // the job succeeded (or stopped)
inline constexpr int kExitFailed = 1;    // the job or this process failed
inline constexpr int kExitBadStart = 2;  // bad flags, config or port
// The job was already over when this process started: orchestrators must
// not count it as success, nor restart it forever.
inline constexpr int kExitJobOver = 3;

// "The job is already over" (FAILED_PRECONDITION with a payload that
// IsJobOver() recognises), e.g. a worker started after its job ended.
absl::Status JobOverError(absl::string_view message);
bool IsJobOver(const absl::Status& status);
// kExitOk, kExitJobOver or kExitFailed for a node's final status.
int ExitCodeFor(const absl::Status& status);

// Ends the process with `code` at once, for a node's main once Run has
// returned (everything the node writes is written by then): stdout,
// stderr and the process's timeline (common/timeline.h) are flushed, and
// nothing else runs (no destructors, no atexit handlers). The node's
// destructors would start gRPC's own shutdown, which in gRPC 1.51 can wait
// up to 10 s for a TCP backup poller after large writes. That was seen at
// the end of 25 M-parameter jobs: a server still exiting 8 s after the job
// had ended, which psctl (10 s) and orchestrators count as a hang.
[[noreturn]] void ExitNow(int code);

// A node's start-up failure: prints "program: message" to stderr and returns
// 2, the exit code of bad flags, configs and ports.
int FailStartup(const char* program, const absl::Status& status);

// Cancels `context` (TryCancel) as soon as `stop()` returns true, polled
// every 50 ms on a thread of its own, until destroyed: a blocking RPC then
// ends within about 50 ms of SIGTERM. A null `stop` watches nothing. The
// context must outlive this object.
class CancelOnStop {
 public:
  CancelOnStop(grpc::ClientContext* context, std::function<bool()> stop);
  ~CancelOnStop();
  CancelOnStop(const CancelOnStop&) = delete;
  CancelOnStop& operator=(const CancelOnStop&) = delete;

 private:
  absl::Notification done_;
  std::thread thread_;
};

// RetryUntil (common/retry.h) of one gRPC call: every attempt gets a fresh
// context with `rpc_timeout` that `stop` cancels (CancelOnStop); `call`
// makes the call on it and returns its status.
absl::Status CallUntil(
    absl::Time deadline, const std::string& what, absl::Duration rpc_timeout,
    const std::function<bool()>& stop,
    const std::function<grpc::Status(grpc::ClientContext*)>& call);

// The rank a node claims: `env_var` (--rank_from_env) when non-empty, read
// from the environment with errors naming --rank_from_env, else `rank`.
absl::StatusOr<int> RankFromFlags(int rank, const std::string& env_var);

// Serves `registry` at http://bind:port/metrics when port >= 0 (0 picks a
// free port) and logs the address; null when port < 0.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MaybeServeMetrics(
    const MetricsRegistry* registry, const std::string& bind, int port);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PROCESS_H_
