#include "common/host_name.h"

#include <arpa/inet.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/client_text.h"

namespace pstrain {
namespace {

bool IsIpAddress(absl::string_view host) {
  std::string text(host);
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
    in6_addr v6;
    return inet_pton(AF_INET6, text.c_str(), &v6) == 1;
  }
  in_addr v4;
  in6_addr v6;
  return inet_pton(AF_INET, text.c_str(), &v4) == 1 ||
         inet_pton(AF_INET6, text.c_str(), &v6) == 1;
}

// Why `host` is not an RFC 1123 host name, or "" when it is one.
std::string DnsNameProblem(absl::string_view host) {
  if (absl::EndsWith(host, ".")) host.remove_suffix(1);
  if (host.empty()) return "is empty";
  if (host.size() > 253) return "is longer than 253 characters";
  for (absl::string_view label : absl::StrSplit(host, '.')) {
    if (label.empty()) return "has an empty label";
    if (label.size() > 63) return "has a label longer than 63 characters";
    if (label.front() == '-' || label.back() == '-') {
      return "has a label starting or ending with '-'";
    }
    for (char c : label) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') {
        return absl::StrCat("contains '",
                            EchoClientText(absl::string_view(&c, 1)),
                            "' (host names are letters, digits, '-' and '.')");
      }
    }
  }
  return "";
}

}  // namespace

absl::Status ValidateHostName(absl::string_view flag, absl::string_view host) {
  if (IsIpAddress(host)) return absl::OkStatus();
  const std::string problem = DnsNameProblem(host);
  if (problem.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " '", EchoClientText(host),
                   "' is not a host name or IP address: it ", problem));
}

}  // namespace pstrain
