#include "server/server_flags.h"

#include <unistd.h>

#include <string>

#include "absl/flags/flag.h"
#include "common/node_flags.h"
#include "common/process.h"
#include "common/status_macros.h"

// Shared flags (--config, --coordinator, --metrics_port, --tls_*,
// --rpc_timeout_s, --startup_timeout_s): common/node_flags.h.
ABSL_FLAG(std::string, bind, "127.0.0.1", "address to listen on");
ABSL_FLAG(int, port, 0, "port to listen on; 0 picks a free one");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "host name workers use to reach this server (e.g. ps-0.ps)");
ABSL_FLAG(int, shard, -1, "shard id to claim; -1 lets the coordinator assign");
ABSL_FLAG(bool, shard_from_hostname, false,
          "claim the shard of the host name's -<ordinal> (pod ps-3: shard 3)");
ABSL_FLAG(bool, tune_memory, true,
          "one malloc arena, a fixed 1 MiB mmap threshold and bounded gRPC "
          "read buffers, so peak RSS does not grow with the number of "
          "workers (server/process_memory.h); false: glibc's and gRPC's "
          "defaults");

namespace pstrain {

absl::StatusOr<ServerNodeOptions> ServerOptionsFromFlags() {
  ServerNodeOptions o;
  PS_ASSIGN_OR_RETURN(o.node, NodeOptionsFromFlags(NodeRole::kServer));
  o.requested_shard = absl::GetFlag(FLAGS_shard);
  if (absl::GetFlag(FLAGS_shard_from_hostname)) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    PS_ASSIGN_OR_RETURN(o.requested_shard, OrdinalFromHostname(host));
  }
  o.bind = absl::GetFlag(FLAGS_bind);
  o.port = absl::GetFlag(FLAGS_port);
  o.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  return o;
}

bool TuneMemoryRequested() { return absl::GetFlag(FLAGS_tune_memory); }

}  // namespace pstrain
