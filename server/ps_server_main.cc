// ps_server: one parameter-server shard (server/server_node.h): flags ->
// options -> ServerNode::Run. Exit 0 when the job ends, 1 when the node
// fails, 2 on bad flags, 3 when the job was already over (common/process.h).
// The barrier timeout is the job's network.barrier_timeout_s.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/logging.h"
#include "common/node_flags.h"
#include "common/process.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "server/process_memory.h"
#include "server/server_node.h"

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
namespace {

// Flags -> options -> node; errors name the flag.
absl::StatusOr<std::unique_ptr<ServerNode>> NodeFromFlags(MetricsRegistry* m) {
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
  o.metrics = m;
  return ServerNode::Create(o);
}

int Main() {
  // Before any thread and any gRPC call (server/process_memory.h).
  if (absl::GetFlag(FLAGS_tune_memory)) {
    absl::Status st = ConfigureProcessMemory(ProcessMemoryOptions{});
    if (!st.ok()) return FailStartup("ps_server --tune_memory", st);
  }
  // SIGTERM during start-up is a clean stop too.
  InstallStopSignalHandlers();
  MetricsRegistry metrics;
  absl::StatusOr<std::unique_ptr<ServerNode>> server = NodeFromFlags(&metrics);
  if (!server.ok()) return FailStartup("ps_server", server.status());
  SetLogRole("server");
  auto http = MaybeServeMetrics(&metrics, absl::GetFlag(FLAGS_bind),
                                (*server)->options().node.metrics_port);
  absl::Status st = http.ok() ? (*server)->Run(StopRequested) : http.status();
  if (!st.ok()) PS_LOG_ERROR("%s", st.message());
  return ExitCodeFor(st);
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pstrain parameter-server shard.\nUsage: ps_server --coordinator "
      "HOST:PORT [flags]; --helpfull lists them");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
