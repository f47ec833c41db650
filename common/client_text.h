// Quoting what a client sent inside an error message.
#ifndef PSTRAIN_COMMON_CLIENT_TEXT_H_
#define PSTRAIN_COMMON_CLIENT_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace pstrain {

// The most bytes of a client's string an error message repeats.
inline constexpr size_t kMaxEchoBytes = 128;

// `text` made safe to put in a status message or a log line: at most
// `max_bytes` bytes of it, non-printable bytes C-escaped, and, when cut,
// "...(N bytes)" appended. A hostile client sending a name of megabytes thus
// gets a short NOT_FOUND, never a status too large for gRPC's metadata limit
// (which would turn into RESOURCE_EXHAUSTED).
std::string EchoClientText(absl::string_view text,
                           size_t max_bytes = kMaxEchoBytes);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CLIENT_TEXT_H_
