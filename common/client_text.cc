#include "common/client_text.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace pstrain {

std::string EchoClientText(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return absl::CEscape(text);
  return absl::StrCat(absl::CEscape(text.substr(0, max_bytes)), "...(",
                      text.size(), " bytes)");
}

absl::Status CheckClientString(absl::string_view field, absl::string_view value,
                               size_t max_bytes) {
  if (value.size() <= max_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " is ", value.size(), " bytes long; at most ", max_bytes,
      " are accepted (", EchoClientText(value, 32), ")"));
}

}  // namespace pstrain
