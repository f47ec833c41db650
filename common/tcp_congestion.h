// Which TCP congestion control a host gives new connections, for the
// benchmarks' tables and psctl run's notes (docs/performance-log.md, "The
// machine's TCP congestion control").
#ifndef PSTRAIN_COMMON_TCP_CONGESTION_H_
#define PSTRAIN_COMMON_TCP_CONGESTION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

inline constexpr char kTcpCongestionControlPath[] =
    "/proc/sys/net/ipv4/tcp_congestion_control";
inline constexpr char kTcpAvailableCongestionControlPath[] =
    "/proc/sys/net/ipv4/tcp_available_congestion_control";
// What a process without CAP_NET_ADMIN may ask for.
inline constexpr char kTcpAllowedCongestionControlPath[] =
    "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

// The congestion control new TCP connections of this network namespace get
// (the sysctl net.ipv4.tcp_congestion_control, e.g. "cubic"); "" when `path`
// cannot be read. pstrain keeps it unless network.tcp_congestion_control
// names another (SetListenersCongestionControl).
std::string TcpCongestionControl(
    const std::string& path = kTcpCongestionControlPath);

// TcpCongestionControl(), or "unknown" when it cannot be read: for tables.
std::string TcpCongestionControlName();

// Whether `name` paces every connection, loopback included. BBR does (the
// kernel's own pacing when the qdisc is not fq): on a 2-core test machine it
// held iperf3 -l 1M on loopback at 4.4-4.8 GB/s against 14-15.5 with cubic,
// and same-host jobs pulled 1.13-1.51x slower.
bool PacesEveryConnection(absl::string_view name);

// The longest congestion control name the kernel takes (TCP_CA_NAME_MAX
// less its terminating zero).
inline constexpr int kMaxTcpCongestionControlName = 15;

// Whether this process may give its TCP sockets congestion control `name`
// (network.tcp_congestion_control), tried on a fresh socket that is closed
// at once: OK for "" (the host's own) and for a name the kernel accepts;
// else INVALID_ARGUMENT naming `key`, `name` and what this host has (or,
// for a process without CAP_NET_ADMIN, what
// net.ipv4.tcp_allowed_congestion_control allows it).
absl::Status CheckCongestionControl(absl::string_view key,
                                    absl::string_view name);

// Gives congestion control `name` to this process's listening TCP sockets
// bound to `port` (IPv4 and IPv6); every connection they accept from then on
// inherits it (the kernel's tcp_ca_openreq_child), connections already
// accepted keep theirs. For a server's pulls on a host whose default paces
// every connection (docs/performance-log.md, "The servers' TCP congestion
// control, a job key"). gRPC 1.51 reaches its sockets only through a socket
// mutator whose type is in its internal headers, so the listeners are found
// among the process's own descriptors (/proc/self/fd): sockets listening
// (SO_ACCEPTCONN), TCP (SO_PROTOCOL) and bound to `port` (getsockname).
// Returns how many were set; NOT_FOUND when none listens on `port`;
// INVALID_ARGUMENT as CheckCongestionControl when the kernel refuses `name`
// ("" sets nothing).
absl::StatusOr<int> SetListenersCongestionControl(int port,
                                                  absl::string_view name);

// The congestion control of TCP socket `fd`; "" when `fd` is not one.
std::string SocketCongestionControl(int fd);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TCP_CONGESTION_H_
