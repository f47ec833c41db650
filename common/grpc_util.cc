#include "common/grpc_util.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

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
  // After a failed connection attempt gRPC waits 1 s (growing to 120 s)
  // before the next: a retried call within that window fails at once. Peers
  // here are on a job's own network and come and go in seconds, so try again
  // after 100 ms, growing to at most 2 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is not a backoff: gRPC takes it as the
  // least time one connection attempt (TCP, TLS and the first SETTINGS
  // frame) is given, the attempt's deadline being max(it, the next backoff).
  // At 100 ms an attempt had 2 s at most, and on a loaded machine TLS
  // handshakes then never completed ("connection attempt timed out before
  // receiving SETTINGS frame", "tcp handshaker shutdown"; grpc/grpc#33423).
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kMinConnectTimeoutMs);
  return args;
}

std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials, int connection) {
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args = DefaultChannelArgs();
  // gRPC shares a connection (subchannel) between channels whose target
  // and arguments are equal; an argument of our own tells them apart.
  if (connection != 0) args.SetInt("pstrain.connection", connection);
  return grpc::CreateCustomChannel(address, credentials, args);
}

namespace {
absl::StatusOr<std::string> ReadPem(const std::string& what,
                                    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", what, " file '", path, "'"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (buffer.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " file '", path, "' is empty"));
  }
  return buffer.str();
}
}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls) {
  std::string token;
  if (!tls.token_file.empty()) {
    PS_ASSIGN_OR_RETURN(token, ReadJobToken(tls.token_file));
  }
  if (tls.cert.empty() && tls.key.empty()) {
    if (token.empty()) return grpc::InsecureServerCredentials();
    return TokenCheckingServerCredentials(nullptr, token);
  }
  if (tls.cert.empty() || tls.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  auto options = std::make_unique<grpc::SslServerCredentialsOptions>(
      tls.ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  PS_ASSIGN_OR_RETURN(pair.private_key, ReadPem("TLS key", tls.key));
  PS_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem("TLS certificate", tls.cert));
  options->pem_key_cert_pairs.push_back(pair);
  if (!tls.ca.empty()) {
    PS_ASSIGN_OR_RETURN(options->pem_root_certs, ReadPem("TLS CA", tls.ca));
  }
  if (!token.empty()) {
    return TokenCheckingServerCredentials(std::move(options), token);
  }
  return grpc::SslServerCredentials(*options);
}

namespace {
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeTransportCredentials(const TlsFiles& tls) {
  if (tls.ca.empty() && tls.cert.empty())
    return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!tls.ca.empty()) {
    PS_ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem("TLS CA", tls.ca));
  }
  if (!tls.cert.empty()) {
    PS_ASSIGN_OR_RETURN(options.pem_cert_chain,
                        ReadPem("TLS certificate", tls.cert));
    PS_ASSIGN_OR_RETURN(options.pem_private_key, ReadPem("TLS key", tls.key));
  }
  return grpc::SslCredentials(options);
}
}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& tls, CallerRole role) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> transport,
                      MakeTransportCredentials(tls));
  if (tls.token_file.empty()) return transport;
  PS_ASSIGN_OR_RETURN(std::string token, ReadJobToken(tls.token_file));
  return WithJobToken(std::move(transport), std::move(token), role);
}

absl::StatusOr<StartedServer> StartGrpcServer(
    const std::string& bind, int port,
    std::shared_ptr<grpc::ServerCredentials> credentials,
    const std::vector<grpc::Service*>& services,
    const std::vector<std::pair<std::string, int>>& int_args,
    int max_receive_bytes) {
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  StartedServer started;
  // Our health service (bounded Watch streams) in place of gRPC's default:
  // the server owns it and answers GetHealthCheckService() with it.
  auto health = std::make_unique<HealthService>();
  started.health = health.get();
  builder.RegisterService(started.health);
  builder.SetOption(
      std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(
          std::move(health)));
  builder.AddListeningPort(absl::StrCat(bind, ":", port), credentials,
                           &started.port);
  builder.SetMaxReceiveMessageSize(max_receive_bytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  // gRPC turns SO_REUSEPORT on by default: a second process could then bind
  // the same port and the kernel would split the clients between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (const auto& [key, value] : int_args) {
    builder.AddChannelArgument(key, value);
  }
  for (grpc::Service* service : services) builder.RegisterService(service);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", bind, ":", port,
                     port == 0 ? "" : " (is another process using the port?)"));
  }
  return started;
}

void ShutdownGrpcServer(grpc::Server* server, absl::Duration grace) {
  if (grpc::HealthCheckServiceInterface* health =
          server->GetHealthCheckService()) {
    health->Shutdown();
  }
  server->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

void SetTimeout(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

absl::Time ServerDeadline(const grpc::ServerContextBase& context,
                          absl::Duration cap) {
  const absl::Time now = absl::Now();
  const absl::Time client = absl::FromChrono(context.deadline());
  const absl::Duration margin = std::min(absl::Seconds(1), (client - now) / 10);
  return std::min(client - margin, now + cap);
}

}  // namespace pstrain
