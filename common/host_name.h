// Whether a string can name a host that other processes dial.
#ifndef PSTRAIN_COMMON_HOST_NAME_H_
#define PSTRAIN_COMMON_HOST_NAME_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// OK when `host` is an IPv4 address (dotted quad), an IPv6 address (bare or
// in brackets), or a DNS host name per RFC 1123 (at most 253 characters; dot-
// separated labels of 1-63 letters, digits and hyphens, not starting or
// ending with a hyphen; one trailing dot allowed). Otherwise INVALID_ARGUMENT
// naming `flag` and the (shortened) value, e.g. for a Kubernetes variable
// left unexpanded: "--advertise_host '$(POD_NAME).ps' is not a host name".
absl::Status ValidateHostName(absl::string_view flag, absl::string_view host);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_HOST_NAME_H_
