// The job token: a shared secret that keeps strangers out of a job.
//
// Every process of a job reads the same token from a file (psctl run writes
// one per job, mode 0600; on Kubernetes a Secret mounted as a file). Clients
// attach it to every call as metadata `x-pstrain-token`, together with their
// role (`x-pstrain-role`: coordinator or member); servers check it for every
// method of every service before the handler runs, so no service has to
// remember to. Exceptions and limits:
//   - the standard health service (grpc.health.v1.Health) stays open, so
//     kubelet probes need no secret; /metrics (plain HTTP) stays open too;
//   - coordinator-only methods (ParameterServer/Shutdown, Checkpoint,
//     Rollback) also need the coordinator role. The role is a claim made by a
//     holder of the token: it stops a buggy or misdirected worker, not a
//     malicious token holder;
//   - without TLS the token travels in clear text: it stops accidents and
//     strangers on a trusted network, not eavesdroppers.
// The check runs in gRPC's server auth filter (an auth metadata processor on
// the server credentials), with and without TLS.
#ifndef PSTRAIN_COMMON_JOB_TOKEN_H_
#define PSTRAIN_COMMON_JOB_TOKEN_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

inline constexpr char kTokenMetadataKey[] = "x-pstrain-token";
inline constexpr char kRoleMetadataKey[] = "x-pstrain-role";
inline constexpr int kMinTokenBytes = 16;
inline constexpr int kMaxTokenBytes = 1024;

// Who a client says it is. Only the coordinator may stop shards.
enum class CallerRole { kMember, kCoordinator };

// The token in file `path`: its content without trailing whitespace, which
// must be kMinTokenBytes..kMaxTokenBytes printable ASCII characters (it goes
// into gRPC metadata). Errors name the file.
absl::StatusOr<std::string> ReadJobToken(const std::string& path);

// Whether a call of `method` ("/pkg.Service/Method") that carried `token`
// and `role` (empty when absent) may run on a server expecting `expected`:
// OK, UNAUTHENTICATED (missing or wrong token) or PERMISSION_DENIED (a
// coordinator-only method from another role). Health checks always pass.
absl::Status CheckJobToken(absl::string_view method, absl::string_view token,
                           absl::string_view role, absl::string_view expected);

// Channel credentials that add `token` and `role` to every call of every
// channel made from them (plaintext or TLS `inner`).
std::shared_ptr<grpc::ChannelCredentials> WithJobToken(
    std::shared_ptr<grpc::ChannelCredentials> inner, std::string token,
    CallerRole role);

// Server credentials that run CheckJobToken on every call: plaintext when
// `tls` is null, else TLS with these options.
std::shared_ptr<grpc::ServerCredentials> TokenCheckingServerCredentials(
    std::unique_ptr<grpc::SslServerCredentialsOptions> tls,
    std::string expected_token);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_TOKEN_H_
