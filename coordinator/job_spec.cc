#include "coordinator/job_spec.h"

#include <memory>

#include "common/model_spec.h"
#include "common/sharding.h"
#include "common/status_macros.h"
#include "coordinator/failure_policy.h"

namespace pstrain {

absl::StatusOr<pstrain::v1::JobSpec> MakeJobSpec(const JobConfig& c) {
  PS_RETURN_IF_ERROR(ValidateJobConfig(c));
  PS_ASSIGN_OR_RETURN(std::vector<pstrain::v1::TensorSpec> tensors,
                      ModelParamSpecs(c.model()));
  // All-reduce jobs have no servers (job.servers is ignored): the shard map
  // only lists the tensors.
  const bool allreduce = c.training().mode() == pstrain::v1::MODE_ALLREDUCE;
  const int servers = allreduce ? 0 : c.job().servers();
  pstrain::v1::JobSpec job;
  *job.mutable_config() = c;
  job.set_num_servers(servers);
  const std::unique_ptr<FailurePolicy> policy =
      FailurePolicy::ForJob(c.training());
  pstrain::v1::WorkerRecovery* recovery = job.mutable_worker_recovery();
  recovery->set_rolls_back(policy->RollsBack());
  recovery->set_stands_in(policy->StandsIn());
  recovery->set_hosts_ranks(policy->HostsRanks());
  if (allreduce) {
    for (auto& t : tensors) *job.mutable_shard_map()->add_tensors() = t;
  } else {
    const uint64_t chunk_elems = c.server().chunk_bytes() > 0
                                     ? c.server().chunk_bytes() / sizeof(float)
                                     : AutoChunkElems(tensors, servers);
    PS_ASSIGN_OR_RETURN(*job.mutable_shard_map(),
                        BuildShardMap(tensors, servers, chunk_elems));
  }
  return job;
}

}  // namespace pstrain
