#include "common/logging.h"

#include <cstdio>
#include <ctime>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pstrain {
namespace {
std::string& Role() {
  static std::string* role = new std::string("pstrain");
  return *role;
}
}  // namespace

void SetLogRole(std::string role) { Role() = std::move(role); }

void LogLine(char level, const std::string& message) {
  std::string ts =
      absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::UTCTimeZone());
  std::fprintf(stderr, "%s %c %s %s\n", ts.c_str(), level, Role().c_str(),
               message.c_str());
}

}  // namespace pstrain
