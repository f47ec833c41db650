// Derived job files: a base YAML job file with `section.key=value` overrides
// applied, so every run of `psctl compare` trains the same job (data, seeds,
// model, workers) and differs only in what it was asked to vary.
#ifndef PSTRAIN_TOOLS_REPORT_DERIVE_CONFIG_H_
#define PSTRAIN_TOOLS_REPORT_DERIVE_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

struct ConfigOverride {
  std::string key;    // dotted path, e.g. "worker.compute_ms"
  std::string value;  // YAML text: "20", "inf", "[64, 64]"
};

// "KEY=VALUE" (the value may be empty or contain '='). INVALID_ARGUMENT
// naming the argument for a missing '=' or an empty path segment.
absl::StatusOr<ConfigOverride> ParseOverride(const std::string& arg);

// Applies `overrides` in order to the YAML job text `base` (named
// `source_name` in errors) and returns the derived YAML. The base must parse
// as a job config (errors name its file and line); each override must name
// a known key with a valid value (INVALID_ARGUMENT "--set KEY=VALUE: ..."
// naming the bad key); the result must pass ValidateJobConfig (errors name
// the key). The overrides go through the job config's key table
// (ApplyConfigOverride), the same path as the coordinator's flags; the result
// is the full effective config (JobConfigToYaml), without the base's comments.
absl::StatusOr<std::string> DeriveConfig(
    const std::string& base, const std::string& source_name,
    const std::vector<ConfigOverride>& overrides);

// One run of a `psctl compare` plan: its folder name under runs/, the mode
// label it reports under, and the overrides that select its mode.
struct PlannedRun {
  std::string name;   // "async-2", "sync-r3" (repeats > 1)
  std::string label;  // "async:2"
  std::vector<ConfigOverride> mode_sets;
};

// The compare plan: every mode of the comma-separated `modes`, `repeats`
// times each, in order. The mode grammar: sync | async (the base's
// staleness) | async:S (S an integer >= 0 or inf, the one staleness parser)
// | async:S:scaled (and training.async_lr_per_push: scaled) | backup:B
// (sync with B >= 1 backup workers) | allreduce | allreduce:dense |
// allreduce:allgather (and allreduce.sparse: how a row-sparse table travels;
// plain allreduce keeps the base's). INVALID_ARGUMENT "--modes:
// unknown mode 'x' (...)", "'sync' given twice", "--modes: empty", "--repeats:
// must be >= 1".
absl::StatusOr<std::vector<PlannedRun>> PlanRuns(const std::string& modes,
                                                 int repeats);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_DERIVE_CONFIG_H_
