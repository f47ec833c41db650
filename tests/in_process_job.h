// A whole pstrain job in one process, on the real node classes: the
// coordinator service, K ServerNodes and N WorkerNodes, each on its own
// thread, talking gRPC on loopback ephemeral ports (gloo's style of holding
// every rank in one test binary).
#ifndef PSTRAIN_TESTS_IN_PROCESS_JOB_H_
#define PSTRAIN_TESTS_IN_PROCESS_JOB_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "coordinator/coordinator.h"
#include "worker/local_step.h"

namespace pstrain {

struct InProcessJob {
  JobOutcome outcome;              // the coordinator's account of the job
  std::vector<TensorList> finals;  // each worker's final weights, by rank
};

// Runs `config` (mode sync, async or allreduce; config.servers shards except
// in mode allreduce) to the end. Every node must end OK and the coordinator
// must see the job end within config.network.startup_timeout_s; otherwise
// the first error, naming the node ("worker 2: ..."). Workers compute on the
// CPU backend.
absl::StatusOr<InProcessJob> RunInProcessJob(const JobConfig& config);

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_IN_PROCESS_JOB_H_
