#include "tools/report/derive_config.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/job_config.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

std::string Quote(const ConfigOverride& o) {
  return absl::StrCat("--set ", o.key, "=", o.value);
}

}  // namespace

absl::StatusOr<ConfigOverride> ParseOverride(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--set ", arg, ": expected KEY=VALUE"));
  }
  ConfigOverride o{arg.substr(0, eq), arg.substr(eq + 1)};
  for (absl::string_view part : absl::StrSplit(o.key, '.')) {
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--set ", arg, ": bad key '", o.key, "' (expected section.key)"));
    }
  }
  return o;
}

absl::StatusOr<std::string> DeriveConfig(
    const std::string& base, const std::string& source_name,
    const std::vector<ConfigOverride>& overrides) {
  // The base on its own first, so its errors keep its own lines.
  PS_ASSIGN_OR_RETURN(JobConfig config, ParseJobConfig(base, source_name));
  for (const ConfigOverride& o : overrides) {
    // Each override is checked as it is applied, so an error names it.
    absl::Status st = ApplyConfigOverride(o.key, o.value, &config);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Quote(o), ": ", st.message()));
    }
  }
  FinalizeJobConfig(&config);
  absl::Status valid = ValidateJobConfig(config);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("derived config: ", valid.message()));
  }
  return JobConfigToYaml(config);
}

absl::StatusOr<std::vector<PlannedRun>> PlanRuns(const std::string& modes,
                                                 int repeats) {
  if (repeats < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--repeats: must be >= 1, got ", repeats));
  }
  std::vector<std::string> labels = absl::StrSplit(modes, ',');
  if (modes.empty()) return absl::InvalidArgumentError("--modes: empty");
  std::vector<PlannedRun> runs;
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string& m = labels[i];
    std::vector<ConfigOverride> sets;
    const std::vector<std::string> parts = absl::StrSplit(m, ':');
    int64_t backups = 0;
    if (m == "sync" || m == "async" || m == "allreduce") {
      sets.push_back({"training.mode", m});
    } else if (parts[0] == "async" &&
               (parts.size() == 2 || parts.size() == 3) &&
               ParseStaleness(parts[1]).ok() &&
               (parts.size() == 2 || parts[2] == "scaled")) {
      sets.push_back({"training.mode", "async"});
      sets.push_back({"training.staleness", parts[1]});
      if (parts.size() == 3) {
        sets.push_back({"training.async_lr_per_push", "scaled"});
      }
    } else if (parts.size() == 2 && parts[0] == "allreduce" &&
               (parts[1] == "dense" || parts[1] == "allgather")) {
      // How a row-sparse table travels (allreduce.sparse).
      sets.push_back({"training.mode", "allreduce"});
      sets.push_back({"allreduce.sparse", parts[1]});
    } else if (parts.size() == 2 && parts[0] == "backup" &&
               absl::SimpleAtoi(parts[1], &backups) && backups >= 1) {
      sets.push_back({"training.mode", "sync"});
      sets.push_back({"training.backup_workers", parts[1]});
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--modes: unknown mode '", m,
          "' (sync, async, async:S, async:inf, async:S:scaled, backup:B, "
          "allreduce, allreduce:dense, allreduce:allgather)"));
    }
    if (std::find(labels.begin(), labels.begin() + i, m) !=
        labels.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("--modes: '", m, "' given twice"));
    }
    std::string name = m;
    std::replace(name.begin(), name.end(), ':', '-');
    for (int r = 1; r <= repeats; ++r) {
      runs.push_back(
          {repeats == 1 ? name : absl::StrCat(name, "-r", r), m, sets});
    }
  }
  return runs;
}

}  // namespace pstrain
