// Quoting what a client sent inside an error message.
#ifndef PSTRAIN_COMMON_CLIENT_TEXT_H_
#define PSTRAIN_COMMON_CLIENT_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
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

// Bounds on strings a client sends, checked when a request is read (before
// anything is stored or echoed): a host name (DNS allows 253 characters,
// 255 bytes on the wire) with ":PORT"; a name (tensor, process kind); a file
// path; a free-text message (a worker's error).
inline constexpr size_t kMaxAddressBytes = 255 + 6;
inline constexpr size_t kMaxNameBytes = 128;
inline constexpr size_t kMaxPathBytes = 4096;
inline constexpr size_t kMaxMessageBytes = 4096;

// INVALID_ARGUMENT "<field> is N bytes long; at most MAX are accepted
// (<the first bytes>...)" when `value` is longer than `max_bytes`, else OK.
absl::Status CheckClientString(absl::string_view field, absl::string_view value,
                               size_t max_bytes);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CLIENT_TEXT_H_
