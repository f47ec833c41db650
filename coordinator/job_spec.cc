#include "coordinator/job_spec.h"

#include "common/model_spec.h"
#include "common/sharding.h"
#include "common/status_macros.h"

namespace pstrain {

absl::StatusOr<pstrain::v1::JobSpec> MakeJobSpec(const JobConfig& c) {
  PS_RETURN_IF_ERROR(ValidateJobConfig(c));
  PS_ASSIGN_OR_RETURN(std::vector<pstrain::v1::TensorSpec> tensors,
                      ModelParamSpecs(c.model));
  // All-reduce jobs have no servers (job.servers is ignored): the shard map
  // only lists the tensors.
  const bool allreduce = c.mode == pstrain::v1::MODE_ALLREDUCE;
  const int servers = allreduce ? 0 : c.servers;
  pstrain::v1::JobSpec job;
  job.set_job_name(c.name);
  job.set_mode(c.mode);
  job.set_staleness(c.staleness);
  job.set_num_workers(c.workers);
  job.set_num_servers(servers);
  job.set_steps(c.steps);
  job.set_backup_workers(c.backup_workers);
  job.set_staleness_aware_lr(c.staleness_aware_lr);
  job.set_dc_lambda(c.dc_lambda);
  job.set_wire_dtype(c.wire_dtype);
  job.set_barrier_timeout_s(c.barrier_timeout_s);
  job.set_lease_s(c.lease_s);
  *job.mutable_optimizer() = c.optimizer;
  if (allreduce) {
    for (auto& t : tensors) *job.mutable_shard_map()->add_tensors() = t;
  } else {
    const uint64_t chunk_elems = c.chunk_bytes > 0
                                     ? c.chunk_bytes / sizeof(float)
                                     : AutoChunkElems(tensors, servers);
    PS_ASSIGN_OR_RETURN(*job.mutable_shard_map(),
                        BuildShardMap(tensors, servers, chunk_elems));
  }
  job.set_worker_config(JobConfigToYaml(c));
  return job;
}

}  // namespace pstrain
