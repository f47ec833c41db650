#include "worker/peer_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {

PeerServer::~PeerServer() {
  if (!server) return;
  const absl::Time grace_end = absl::Now() + absl::Seconds(2);
  while (service->open_streams() > 0 && !(stopped && stopped()) &&
         absl::Now() < grace_end) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ShutdownGrpcServer(server.get(), absl::Milliseconds(100));
}

absl::Status StartPeerServer(const WorkerNodeOptions& options,
                             PeerServer* peer) {
  const TlsFiles& tls = options.node.tls;
  if (!tls.ca.empty() && tls.cert.empty()) {
    return absl::InvalidArgumentError(
        "mode allreduce with TLS: workers serve their ring neighbours and "
        "need a certificate and key (--tls_cert, --tls_key)");
  }
  PS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds,
                      MakeServerCredentials(tls));
  peer->service = std::make_unique<RingPeerService>();
  PS_ASSIGN_OR_RETURN(StartedServer started,
                      StartGrpcServer(options.peer_bind, options.peer_port,
                                      creds, {peer->service.get()},
                                      RingLinkArgs()));  // ring's window
  peer->server = std::move(started.server);
  const int port = started.port;
  peer->address = absl::StrCat(options.advertise_host, ":", port);
  PS_LOG_INFO("ring peer service at %s (listening on %s:%d)", peer->address,
              options.peer_bind, port);
  return absl::OkStatus();
}

}  // namespace pstrain
