// Start-up helpers shared by the three binaries' main(): everything here
// takes plain values that main read from its flags or environment, so the
// stack below main never looks at either.
#ifndef PSTRAIN_COMMON_PROCESS_H_
#define PSTRAIN_COMMON_PROCESS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
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

// The ordinal of a StatefulSet pod from its host name ("ps-3" -> 3).
absl::StatusOr<int> OrdinalFromHostname(const std::string& hostname);

// A rank or index from the value of environment variable `name` (e.g. the
// Kubernetes Indexed Job's JOB_COMPLETION_INDEX); `value` null = unset.
absl::StatusOr<int> IndexFromEnv(const std::string& name, const char* value);

// A node's start-up failure: prints "program: message" to stderr and returns
// 2, the exit code of bad flags, configs and ports.
int FailStartup(const char* program, const absl::Status& status);

// The rank a node claims: `env_var` (--rank_from_env) when non-empty, read
// from the environment with errors naming --rank_from_env, else `rank`.
absl::StatusOr<int> RankFromFlags(int rank, const std::string& env_var);

// Serves `registry` at http://bind:port/metrics when port >= 0 (0 picks a
// free port) and logs the address; null when port < 0.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MaybeServeMetrics(
    const MetricsRegistry* registry, const std::string& bind, int port);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PROCESS_H_
