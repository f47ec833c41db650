#include "tests/stranger/loopback_target.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pstrain {
namespace stranger {

std::string LoopbackTarget::GrpcAddress() const {
  return ip == "::1" ? absl::StrCat("[::1]:", port)
                     : absl::StrCat(ip, ":", port);
}

absl::StatusOr<std::vector<LoopbackTarget>> ParseLoopbackTargets(
    absl::string_view list) {
  std::vector<LoopbackTarget> targets;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("--targets: \"", entry, "\": ", why));
    };
    if (entry.empty()) return bad("empty entry");
    const size_t colon = entry.rfind(':');
    if (colon == absl::string_view::npos) return bad("want host:port");
    const absl::string_view host = entry.substr(0, colon);
    LoopbackTarget t;
    t.given = std::string(entry);
    if (host == "127.0.0.1" || host == "localhost") {
      t.ip = "127.0.0.1";
    } else if (host == "[::1]") {
      t.ip = "::1";
    } else {
      return bad("not a loopback host (127.0.0.1, localhost or [::1] only)");
    }
    const absl::string_view port = entry.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != absl::string_view::npos ||
        !absl::SimpleAtoi(port, &t.port) || t.port < 1 || t.port > 65535) {
      return bad("port must be 1..65535");
    }
    targets.push_back(std::move(t));
  }
  if (targets.empty()) return absl::InvalidArgumentError("--targets: empty");
  return targets;
}

}  // namespace stranger
}  // namespace pstrain
