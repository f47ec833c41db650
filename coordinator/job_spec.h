// The JobSpec the coordinator publishes for a job config.
#ifndef PSTRAIN_COORDINATOR_JOB_SPEC_H_
#define PSTRAIN_COORDINATOR_JOB_SPEC_H_

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// The validated `config` itself (JobSpec.config: servers and workers read
// the job from it), the tensors from the model and a shard map over
// job.servers shards with no addresses yet. Mode allreduce: no servers
// (num_servers 0, job.servers ignored) and a shard map that only lists the
// tensors. worker_recovery holds the failure policy's answers
// (coordinator/failure_policy.h) for workers.
absl::StatusOr<pstrain::v1::JobSpec> MakeJobSpec(const JobConfig& config);

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_JOB_SPEC_H_
