#include "common/report/derive_config.h"

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

}  // namespace pstrain
