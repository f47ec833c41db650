#include "common/grpc_util.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace pstrain {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

grpc::ChannelArguments DefaultChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  return args;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   DefaultChannelArgs());
}

void SetTimeout(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

absl::Time ServerDeadline(const grpc::ServerContext& context,
                          absl::Duration cap) {
  const absl::Time now = absl::Now();
  const absl::Time client = absl::FromChrono(context.deadline());
  const absl::Duration margin = std::min(absl::Seconds(1), (client - now) / 10);
  return std::min(client - margin, now + cap);
}

}  // namespace pstrain
