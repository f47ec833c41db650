#include "common/report/derive_config.h"

#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/job_config.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace pstrain {
namespace {

// Name the derived text gets in parser messages, whose "NAME:LINE: " prefix
// is dropped: its line numbers mean nothing to the caller.
constexpr char kDerived[] = "derived";

std::string WithoutLocation(const absl::Status& s) {
  static const std::regex* prefix =
      new std::regex(std::string("^") + kDerived + "(:[0-9]+)?: ");
  return std::regex_replace(std::string(s.message()), *prefix, "");
}

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
  PS_RETURN_IF_ERROR(ParseJobConfig(base, source_name).status());
  YAML::Node root;
  try {
    root = YAML::Load(base);
  } catch (const YAML::Exception& e) {  // ParseJobConfig accepted it
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": ", e.msg));
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  for (const ConfigOverride& o : overrides) {
    YAML::Node value;
    try {
      value = o.value.empty() ? YAML::Node(std::string()) : YAML::Load(o.value);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(Quote(o), ": bad YAML value: ", e.msg));
    }
    std::vector<std::string> path = absl::StrSplit(o.key, '.');
    // yaml-cpp nodes are handles and Node::operator= aliases the node it
    // is called on, so the walk copy-constructs a chain of handles and
    // assigns only through operator[].
    std::vector<YAML::Node> chain{root};
    for (size_t i = 0; i < path.size(); ++i) {
      YAML::Node parent = chain.back();
      if (!parent.IsMap()) {
        return absl::InvalidArgumentError(absl::StrCat(
            Quote(o), ": '", i ? path[i - 1] : "", "' is not a section"));
      }
      if (i + 1 == path.size()) break;
      if (!parent[path[i]].IsDefined() || parent[path[i]].IsNull()) {
        parent[path[i]] = YAML::Node(YAML::NodeType::Map);
      }
      chain.push_back(parent[path[i]]);
    }
    chain.back()[path.back()] = value;
    YAML::Emitter out;
    out << root;
    // Each override is checked as it is applied, so an error names it.
    absl::StatusOr<JobConfig> parsed = ParseJobConfig(out.c_str(), kDerived);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Quote(o), ": ", WithoutLocation(parsed.status())));
    }
  }
  YAML::Emitter out;
  out << root;
  const std::string text = absl::StrCat(out.c_str(), "\n");
  PS_ASSIGN_OR_RETURN(JobConfig config, ParseJobConfig(text, kDerived));
  absl::Status valid = ValidateJobConfig(config);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("derived config: ", WithoutLocation(valid)));
  }
  return text;
}

}  // namespace pstrain
