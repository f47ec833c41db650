// The one place where absl::Status meets grpc::Status, plus shared channel
// and server settings.
#ifndef PSTRAIN_COMMON_GRPC_UTIL_H_
#define PSTRAIN_COMMON_GRPC_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pstrain {

// Messages carry at most one 4 MiB chunk batch plus headers.
inline constexpr int kMaxGrpcMessageBytes = 8 << 20;

// Abseil's codes are gRPC's codes: the mapping is one cast each way.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Channel to `address` (host:port) with pstrain's message limits; insecure
// credentials (TLS is configured by deploy/, not yet here).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);
grpc::ChannelArguments DefaultChannelArgs();

// Sets `context`'s deadline to now + timeout.
void SetTimeout(grpc::ClientContext* context, absl::Duration timeout);

// How long a server-side call may block: a little before the client's own
// deadline (so the client receives the server's explanatory status rather
// than its bare timeout), and at most now + cap.
absl::Time ServerDeadline(const grpc::ServerContext& context,
                          absl::Duration cap);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_GRPC_UTIL_H_
