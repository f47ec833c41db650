// The addresses ps_stranger may call: loopback only. A soak must never send
// traffic anywhere but this machine, so a target list naming any other host
// (a name that resolves elsewhere, another 127/8 address, a LAN address) is
// refused before anything is sent. Host names are never resolved:
// "localhost" is taken to mean 127.0.0.1.
#ifndef PSTRAIN_TESTS_STRANGER_LOOPBACK_TARGET_H_
#define PSTRAIN_TESTS_STRANGER_LOOPBACK_TARGET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {
namespace stranger {

struct LoopbackTarget {
  std::string given;  // as written in the list, e.g. "localhost:4000"
  std::string ip;     // "127.0.0.1" or "::1"
  int port = 0;       // 1..65535

  // The gRPC target: "127.0.0.1:PORT" or "[::1]:PORT" (no name lookup).
  std::string GrpcAddress() const;
};

// Parses "host:port,host:port,...", where host is 127.0.0.1, localhost or
// [::1] and port 1..65535. INVALID_ARGUMENT naming the first bad entry (and
// why) for anything else, including an empty list; duplicates are kept.
absl::StatusOr<std::vector<LoopbackTarget>> ParseLoopbackTargets(
    absl::string_view list);

}  // namespace stranger
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_STRANGER_LOOPBACK_TARGET_H_
