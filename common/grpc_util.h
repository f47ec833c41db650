// The one place where absl::Status meets grpc::Status, plus shared channel
// and server settings.
#ifndef PSTRAIN_COMMON_GRPC_UTIL_H_
#define PSTRAIN_COMMON_GRPC_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/health_service.h"
#include "common/job_token.h"

namespace pstrain {

// Messages carry at most one 4 MiB chunk batch plus headers.
inline constexpr int kMaxGrpcMessageBytes = 8 << 20;
// The least time a connection attempt (TCP, TLS, the first SETTINGS frame)
// is given, whatever the reconnect backoff: gRPC's own default.
inline constexpr int kMinConnectTimeoutMs = 20000;

// Abseil's codes are gRPC's codes: the mapping is one cast each way.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// PEM files for TLS. A server needs cert+key (and with ca, requires and
// verifies client certificates); a client needs ca (and with cert+key,
// presents a client certificate). All empty: plaintext.
// `token_file`: the job token (common/job_token.h); when set, servers
// require it on every call (health checks excepted) and clients send it.
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
  std::string token_file;
};

// Credentials from `tls`; errors name the unreadable file. Client calls
// carry the job token and `role` when tls.token_file is set.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& tls,
                       CallerRole role = CallerRole::kMember);

// Channel to `address` (host:port or a DNS name such as ps-0.ps:50061) with
// pstrain's message limits; plaintext when `credentials` is null. Channels
// to one address share a connection unless their `connection` differs
// (e.g. the parts of a push, PsClient).
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
    int connection = 0);
grpc::ChannelArguments DefaultChannelArgs();

// A started gRPC server and the port it listens on.
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  // The server's health service (grpc.health.v1, common/health_service.h),
  // owned by `server`; also server->GetHealthCheckService().
  HealthService* health = nullptr;
};

// Starts a server on bind:port (port 0 picks a free one) with pstrain's
// message limits, the standard health protocol (grpc.health.v1, served by
// HealthService with bounded Watch streams) and server
// reflection, serving `services` (borrowed; they must outlive the server).
// Port reuse (SO_REUSEPORT) is off, so a port another process holds is an
// error rather than a silent split of its clients.
// UNAVAILABLE naming the address when it cannot listen.
// `int_args`: extra integer channel arguments of the server (e.g.
// grpc.http2.bdp_probe). `max_receive_bytes`: the largest request message
// accepted (larger ones are RESOURCE_EXHAUSTED); a service whose requests
// are all small passes a small bound, so junk is refused early.
absl::StatusOr<StartedServer> StartGrpcServer(
    const std::string& bind, int port,
    std::shared_ptr<grpc::ServerCredentials> credentials,
    const std::vector<grpc::Service*>& services,
    const std::vector<std::pair<std::string, int>>& int_args = {},
    int max_receive_bytes = kMaxGrpcMessageBytes);

// Stops `server`: its health service says NOT_SERVING and ends its Watch
// streams (gRPC does not tell a custom health service), then the server
// shuts down, cancelling calls still running after `grace`.
void ShutdownGrpcServer(grpc::Server* server, absl::Duration grace);

// Sets `context`'s deadline to now + timeout.
void SetTimeout(grpc::ClientContext* context, absl::Duration timeout);

// How long a server-side call may block: a little before the client's own
// deadline (so the client receives the server's explanatory status rather
// than its bare timeout), and at most now + cap.
absl::Time ServerDeadline(const grpc::ServerContextBase& context,
                          absl::Duration cap);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_GRPC_UTIL_H_
