// ps_coordinator: registers servers and workers, publishes the shard map,
// aggregates metrics and ends the job. See README.md "Running as separate
// services".
// Flags -> options (coordinator_flags.cc) -> CoordinatorNode (or DryRun,
// coordinator/dry_run.h) -> exit code:
// 0 the job succeeded, 1 it failed, 2 bad flags, config or port, 3 --out
// holds a finished job (common/process.h).
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/job_config.h"
#include "common/logging.h"
#include "common/mutex_mode.h"
#include "common/process.h"
#include "common/signals.h"
#include "coordinator/coordinator_flags.h"
#include "coordinator/coordinator_node.h"
#include "coordinator/dry_run.h"

namespace pstrain {
namespace {

int Main() {
  SetLogRole("coordinator");
  absl::StatusOr<CoordinatorNodeOptions> options =
      CoordinatorOptionsFromFlags();
  if (!options.ok()) return FailStartup("ps_coordinator", options.status());
  if (DryRunRequested()) return DryRun(*options);
  for (const std::string& w : ConfigWarnings(options->config)) {
    PS_LOG_WARN("%s", w);
  }
  const std::string termination_log = options->termination_log;
  absl::StatusOr<std::unique_ptr<CoordinatorNode>> node =
      CoordinatorNode::Create(*std::move(options));
  if (!node.ok()) {
    if (!IsJobOver(node.status())) {
      return FailStartup("ps_coordinator", node.status());
    }
    PS_LOG_ERROR("%s", node.status().message());
    // A restarted coordinator pod over a finished job: say why it exits 3.
    if (!termination_log.empty()) {
      absl::Status st = WriteTerminationMessage(
          termination_log, std::string(node.status().message()));
      if (!st.ok()) PS_LOG_ERROR("%s", st.message());
    }
    return kExitJobOver;
  }
  InstallStopSignalHandlers();
  absl::Status job = (*node)->Run(StopRequested);
  return job.ok() ? kExitOk : kExitFailed;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::SetMutexChecksForThisBuild();  // first: before any thread
  absl::SetProgramUsageMessage(
      "pstrain coordinator: registers servers and workers, publishes the shard "
      "map, aggregates metrics.\nUsage: ps_coordinator [--config job.yaml] "
      "[--port N] [--out DIR] [overrides]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
