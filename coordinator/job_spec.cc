#include "coordinator/job_spec.h"

#include "common/model_spec.h"
#include "common/sharding.h"
#include "common/status_macros.h"

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
  job.set_job_name(c.job().name());
  job.set_mode(c.training().mode());
  job.set_staleness(c.training().staleness());
  job.set_num_workers(c.job().workers());
  job.set_num_servers(servers);
  job.set_steps(c.training().steps());
  job.set_backup_workers(c.training().backup_workers());
  job.set_staleness_aware_lr(c.training().staleness_aware_lr());
  job.set_dc_lambda(c.training().dc_lambda());
  *job.mutable_optimizer() = c.training().optimizer();
  if (allreduce) {
    for (auto& t : tensors) *job.mutable_shard_map()->add_tensors() = t;
  } else {
    const uint64_t chunk_elems = c.server().chunk_bytes() > 0
                                     ? c.server().chunk_bytes() / sizeof(float)
                                     : AutoChunkElems(tensors, servers);
    PS_ASSIGN_OR_RETURN(*job.mutable_shard_map(),
                        BuildShardMap(tensors, servers, chunk_elems));
  }
  job.set_worker_config(JobConfigToYaml(c));
  return job;
}

}  // namespace pstrain
