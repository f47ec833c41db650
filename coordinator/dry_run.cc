#include "coordinator/dry_run.h"

#include <cstdio>
#include <optional>
#include <string>

#include "checkpoint/env.h"
#include "common/job_config.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_flags.h"
#include "coordinator/job_spec.h"

namespace pstrain {
namespace {

// --dry_run --resume: where the job would start.
absl::StatusOr<ResumePoint> DryRunResume(const CoordinatorNodeOptions& o) {
  PS_ASSIGN_OR_RETURN(std::string root, CheckpointRoot(o.config, o.out));
  PS_ASSIGN_OR_RETURN(pstrain::v1::JobSpec job, MakeJobSpec(o.config));
  return ResolveResume(CheckpointEnv::Default(), o.resume, root, job);
}

}  // namespace

int DryRun(const CoordinatorNodeOptions& options) {
  const JobConfig& c = options.config;
  // What the coordinator builds at start-up (the model's tensors and the
  // shard map), so a job the real run would refuse is refused here.
  if (absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(c); !job.ok()) {
    return FailStartup("ps_coordinator", job.status());
  }
  // What a valid config does that its author may not expect (psctl run
  // shows stderr before anything starts).
  for (const std::string& w : ConfigWarnings(c)) {
    std::fprintf(stderr, "ps_coordinator: warning: %s\n", w.c_str());
  }
  // Servers the job needs: none in mode allreduce (job.servers ignored).
  std::printf("workers=%d servers=%d\n%s", c.job().workers(),
              c.training().mode() == pstrain::v1::MODE_ALLREDUCE
                  ? 0
                  : c.job().servers(),
              JobConfigToYaml(c).c_str());
  // --resume: the checkpoint the job would start from, resolved and
  // verified as the real run does (exit 2 when it does not fit).
  std::optional<ResumePoint> resume;
  if (!options.resume.empty()) {
    absl::StatusOr<ResumePoint> point = DryRunResume(options);
    if (!point.ok()) return FailStartup("ps_coordinator", point.status());
    resume = *point;
    std::printf("# resume: step %llu from %s\n",
                static_cast<unsigned long long>(resume->step),
                resume->dir.c_str());
    for (const std::string& s : resume->skipped) {
      std::printf("# skipped damaged checkpoint %s\n", s.c_str());
    }
  }
  // The shard map and every tensor (model.tensors of an external model
  // included), as the real run builds them: a bad one is exit 2 here.
  absl::StatusOr<pstrain::v1::JobSpec> spec = MakeJobSpec(c);
  if (!spec.ok()) return FailStartup("ps_coordinator", spec.status());
  const absl::Status plan =
      WritePlanIfRequested(c, *spec, resume ? &*resume : nullptr);
  if (!plan.ok())
    std::fprintf(stderr, "ps_coordinator: %s\n", plan.ToString().c_str());
  return plan.ok() ? 0 : 2;
}

}  // namespace pstrain
