// Minimal structured logging: one line per event on stderr, prefixed with a
// timestamp and the process role (e.g. "server/1", "worker/3", "coordinator").
// Debian's Abseil (2022-06) has no absl/log, and one line per event is all the
// binaries need. Thread-safe: each line is written with a single fprintf.
#ifndef PSTRAIN_COMMON_LOGGING_H_
#define PSTRAIN_COMMON_LOGGING_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pstrain {

// Sets the role shown on every line. Call once from main before threads start.
void SetLogRole(std::string role);

// Writes "<time> <level> <role> <message>\n" to stderr.
void LogLine(char level, const std::string& message);

}  // namespace pstrain

#define PS_LOG_INFO(...) ::pstrain::LogLine('I', ::absl::StrFormat(__VA_ARGS__))
#define PS_LOG_WARN(...) ::pstrain::LogLine('W', ::absl::StrFormat(__VA_ARGS__))
#define PS_LOG_ERROR(...) \
  ::pstrain::LogLine('E', ::absl::StrFormat(__VA_ARGS__))

#endif  // PSTRAIN_COMMON_LOGGING_H_
