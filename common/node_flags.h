// The command-line flags every pstrain node (coordinator, server, worker)
// shares, defined once here, and their parsed form. Only a binary's main()
// calls NodeOptionsFromFlags(); everything below main takes NodeOptions.
//
// Flags: --config, --coordinator, --metrics_port, --tls_cert, --tls_key,
// --tls_ca, --token_file, --rpc_timeout_s, --startup_timeout_s.
#ifndef PSTRAIN_COMMON_NODE_FLAGS_H_
#define PSTRAIN_COMMON_NODE_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/job_config.h"

namespace pstrain {

enum class NodeRole { kCoordinator, kServer, kWorker };

struct NodeOptions {
  // The job file named by --config (defaults when absent). Servers and
  // workers read only its network section; the job comes from the
  // coordinator.
  JobConfig file_config = DefaultJobConfig();
  // --coordinator host:port (required for servers and workers; the
  // coordinator rejects it).
  std::string coordinator;
  // --metrics_port: -1 disables, 0 picks a free port.
  int metrics_port = -1;
  // TLS files and the job token file: each --tls_* / --token_file flag
  // wins over the job file's network.tls_* / network.token_file.
  TlsFiles tls;
  // --rpc_timeout_s / --startup_timeout_s; when not given: 30 s and 120 s
  // for servers and workers, the job file's network.rpc_timeout_s and
  // network.startup_timeout_s for the coordinator (a given flag overrides
  // those keys, and file_config reflects it).
  absl::Duration rpc_timeout;
  absl::Duration startup_timeout;
};

// Parses the shared flags for `role`. INVALID_ARGUMENT (or the config file's
// error) with a message that starts with the offending flag, e.g.
// "--rpc_timeout_s: must be > 0, got -1". With `require_token` (every
// process that will listen or call; not a dry run), a process without a job
// token fails unless the job file sets security.insecure
// (CheckTokenRequired), and one with the opt-out logs a warning.
absl::StatusOr<NodeOptions> NodeOptionsFromFlags(NodeRole role,
                                                 bool require_token = true);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_NODE_FLAGS_H_
