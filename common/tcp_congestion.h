// Which TCP congestion control a host gives new connections, for the
// benchmarks' tables and psctl run's notes (docs/performance-log.md, "The
// machine's TCP congestion control").
#ifndef PSTRAIN_COMMON_TCP_CONGESTION_H_
#define PSTRAIN_COMMON_TCP_CONGESTION_H_

#include <string>

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
// cannot be read. pstrain sets none of its own: gRPC 1.51 offers no public
// way to reach its sockets.
std::string TcpCongestionControl(
    const std::string& path = kTcpCongestionControlPath);

// TcpCongestionControl(), or "unknown" when it cannot be read: for tables.
std::string TcpCongestionControlName();

// Whether the kernel offers `name` to a connection that asks for it (the
// space-separated list at `path`: the available ones for a process with
// CAP_NET_ADMIN, kTcpAllowedCongestionControlPath's for the others).
bool TcpCongestionControlAvailable(
    absl::string_view name,
    const std::string& path = kTcpAvailableCongestionControlPath);

// Whether `name` paces every connection, loopback included. BBR does (the
// kernel's own pacing when the qdisc is not fq): on a 2-core test machine it
// held iperf3 -l 1M on loopback at 4.4-4.8 GB/s against 14-15.5 with cubic,
// and same-host jobs pulled 1.13-1.51x slower.
bool PacesEveryConnection(absl::string_view name);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TCP_CONGESTION_H_
