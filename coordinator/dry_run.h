// ps_coordinator --dry_run (README.md "Running a job"): the effective job
// and, with --resume, where it would start, without starting anything.
// Part of the ps_coordinator binary (it writes --plan_dir through
// coordinator_flags.h); only coordinator_main.cc calls it.
#ifndef PSTRAIN_COORDINATOR_DRY_RUN_H_
#define PSTRAIN_COORDINATOR_DRY_RUN_H_

#include "coordinator/coordinator_node.h"

namespace pstrain {

// Prints "workers=N servers=K" (servers 0 in mode allreduce) and the job as
// YAML to stdout; with options.resume also "# resume: step T from DIR", the
// checkpoint resolved and verified as the real run does; then writes
// --plan_dir (WritePlanIfRequested). Returns the exit code: 0, or 2 with the
// reason on stderr (a resume point that does not fit, a plan that cannot be
// written).
int DryRun(const CoordinatorNodeOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_DRY_RUN_H_
