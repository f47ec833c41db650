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

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

inline constexpr char kTokenMetadataKey[] = "x-pstrain-token";
// The coordinator's per-run key (RegisterServerResponse.coordinator_key), on
// the coordinator's Shutdown, Checkpoint and Rollback calls only.
inline constexpr char kCoordinatorKeyMetadataKey[] = "x-pstrain-coordinator";
inline constexpr int kCoordinatorKeyBytes = 32;  // random bytes, hex-encoded
// Who opens a push stream: "<worker>.<session id>.<generation>" (decimal),
// the same as its first message's PushHeader. A shard checks it when the
// stream opens, before the stream takes an admission slot or any buffer.
inline constexpr char kPushSessionMetadataKey[] = "x-pstrain-push-session";

struct PushSession {
  uint32_t worker = 0;
  uint64_t session_id = 0;
  uint64_t generation = 0;
};
std::string FormatPushSession(const PushSession& s);
// INVALID_ARGUMENT unless `text` is FormatPushSession's form.
absl::StatusOr<PushSession> ParsePushSession(absl::string_view text);
// Adds kPushSessionMetadataKey for a push of `worker` in `session_id` and
// `generation` to `context` (before the call starts).
void AddPushSession(grpc::ClientContext* context, uint32_t worker,
                    uint64_t session_id, uint64_t generation);
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

// A new coordinator key: kCoordinatorKeyBytes from the system's random
// source (std::random_device: /dev/urandom), as lower-case hex.
std::string NewCoordinatorKey();

// Adds the coordinator key to one call (never to a channel: the key must
// reach shards only, and only on coordinator-only calls).
void AddCoordinatorKey(grpc::ClientContext* context, const std::string& key);

// Whether a call that reached a shard carries the coordinator's key
// `expected`: OK, else PERMISSION_DENIED "only the coordinator may <what>"
// (also when `expected` is empty: the shard has no coordinator yet). The
// comparison does not stop at the first differing byte.
absl::Status CheckCoordinatorKey(const grpc::ServerContext& context,
                                 absl::string_view expected,
                                 absl::string_view what);

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
