// ps_server: one parameter-server shard (server/server_node.h): flags ->
// options (server_flags.cc) -> ServerNode::Run. Exit 0 when the job ends, 1
// when the node fails, 2 on bad flags, 3 when the job was already over
// (common/process.h). The barrier timeout is the job's
// network.barrier_timeout_s.
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/logging.h"
#include "common/mutex_mode.h"
#include "common/process.h"
#include "common/signals.h"
#include "server/process_memory.h"
#include "server/server_flags.h"
#include "server/server_node.h"

namespace pstrain {
namespace {

int Main() {
  // Before any thread and any gRPC call (server/process_memory.h).
  if (TuneMemoryRequested()) {
    absl::Status st = ConfigureProcessMemory(ProcessMemoryOptions{});
    if (!st.ok()) return FailStartup("ps_server --tune_memory", st);
  }
  // SIGTERM during start-up is a clean stop too.
  InstallStopSignalHandlers();
  MetricsRegistry metrics;
  absl::StatusOr<ServerNodeOptions> options = ServerOptionsFromFlags();
  if (!options.ok()) return FailStartup("ps_server", options.status());
  options->metrics = &metrics;
  absl::StatusOr<std::unique_ptr<ServerNode>> server =
      ServerNode::Create(*std::move(options));
  if (!server.ok()) return FailStartup("ps_server", server.status());
  SetLogRole("server");
  const ServerNodeOptions& o = (*server)->options();
  auto http = MaybeServeMetrics(&metrics, o.bind, o.node.metrics_port);
  absl::Status st = http.ok() ? (*server)->Run(StopRequested) : http.status();
  if (!st.ok()) PS_LOG_ERROR("%s", st.message());
  ExitNow(ExitCodeFor(st));  // not gRPC's shutdown (common/process.h)
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::SetMutexChecksForThisBuild();  // first: before any thread
  absl::SetProgramUsageMessage(
      "pstrain parameter-server shard.\nUsage: ps_server --coordinator "
      "HOST:PORT [flags]; --helpfull lists them");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
