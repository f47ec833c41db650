#include "tools/report/config_doc.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace pstrain {
namespace {

std::string Cell(const std::string& text) {
  return absl::StrReplaceAll(text, {{"|", "\\|"}});
}

}  // namespace

std::string ConfigDocMarkdown(const std::vector<ConfigKeyDoc>& keys) {
  std::string out = absl::StrCat(kConfigDocMarker, "\n");
  const std::string* section = nullptr;
  for (const ConfigKeyDoc& key : keys) {
    if (section == nullptr || *section != key.section) {
      section = &key.section;
      absl::StrAppend(&out, "\n## `", key.section, "`\n\n",
                      "| key | type | default | meaning |\n",
                      "|---|---|---|---|\n");
    }
    const std::string default_value =
        key.default_value.empty() ? "unset"
                                  : absl::StrCat("`", key.default_value, "`");
    absl::StrAppend(&out, "| `", key.section, ".", key.name, "` | ",
                    Cell(key.type), " | ", Cell(default_value), " | ",
                    Cell(key.description), " |\n");
  }
  return out;
}

absl::StatusOr<std::string> UpdateConfigDoc(const std::string& doc,
                                            const std::string& generated) {
  const std::string marker = kConfigDocMarker;
  size_t at = 0;
  while (at < doc.size()) {
    const size_t end = doc.find('\n', at);
    const size_t len = (end == std::string::npos ? doc.size() : end) - at;
    if (doc.compare(at, len, marker) == 0) {
      return absl::StrCat(doc.substr(0, at), generated);
    }
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no line '", marker,
                   "' (the generated part starts after it; put it below the "
                   "hand-written introduction)"));
}

}  // namespace pstrain
