// ps_coordinator's flags and their parsed form. Only coordinator_main.cc
// calls these (the flags are part of the binary, not of any library).
#ifndef PSTRAIN_COORDINATOR_COORDINATOR_FLAGS_H_
#define PSTRAIN_COORDINATOR_COORDINATOR_FLAGS_H_

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "coordinator/coordinator_node.h"

namespace pstrain {

// The job: --config (defaults when absent) with the override flags (--mode,
// --staleness, --workers, --servers, --steps), finalized and validated.
// Errors start with the offending flag.
absl::StatusOr<JobConfig> ConfigFromFlags();

// Every flag: the job (ConfigFromFlags) and how the node runs.
absl::StatusOr<CoordinatorNodeOptions> CoordinatorOptionsFromFlags();

// --dry_run: validate, print the effective job and exit.
bool DryRunRequested();

// --plan_dir DIR (with --dry_run): writes DIR/job.yaml and DIR/plan.env
// ("workers=N", "servers=K", "lease_s=S", "on_failure=P",
// "max_restarts=M", "mode=X", "min_workers=W", "stands_in=0|1" from
// spec.worker_recovery, and with `resume` "resume_step=T",
// "resume_from=DIR")
// and DIR/job_spec.pb (`spec`, the JobSpec serialised: what the ddp mode of
// psctl compare gives its Python workers, docs/python.md); nothing without
// the flag.
absl::Status WritePlanIfRequested(const JobConfig& config,
                                  const pstrain::v1::JobSpec& spec,
                                  const ResumePoint* resume = nullptr);

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_COORDINATOR_FLAGS_H_
