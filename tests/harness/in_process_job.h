// A whole pstrain job in one process, on the real node classes: a
// CoordinatorNode, K ServerNodes and N WorkerNodes, each on its own
// thread, talking gRPC on loopback ephemeral ports (gloo's style of holding
// every rank in one test binary).
#ifndef PSTRAIN_TESTS_HARNESS_IN_PROCESS_JOB_H_
#define PSTRAIN_TESTS_HARNESS_IN_PROCESS_JOB_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "common/run_record.h"
#include "worker/model/local_step.h"

namespace pstrain {

struct InProcessJob {
  RunSummary summary;              // the coordinator's summary.json
  std::vector<TensorList> finals;  // each worker's final weights, by rank
};

// Runs `config` (mode sync, async or allreduce; config.job().servers() shards
// except in mode allreduce) to the end. Every node must end OK and the
// coordinator must end the job OK; otherwise the first error, naming the node
// ("worker 2: ...", "coordinator: ..."). Workers compute on the CPU backend;
// the run record goes to a temporary folder, read back and removed.
//
// `resume` is the coordinator's --resume ("" for a fresh job).
absl::StatusOr<InProcessJob> RunInProcessJob(const JobConfig& config,
                                             const std::string& resume = "");

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_HARNESS_IN_PROCESS_JOB_H_
