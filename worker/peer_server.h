// Mode allreduce: a worker's RingPeer service, which its left neighbour
// streams ring segments to (worker/allreduce/grpc_transport.h).
#ifndef PSTRAIN_WORKER_PEER_SERVER_H_
#define PSTRAIN_WORKER_PEER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "worker/allreduce/grpc_transport.h"
#include "worker/worker_node.h"

namespace pstrain {

// The service and its server, empty until StartPeerServer. Stops before the
// service goes: it gives the neighbour's streams up to 2 s to end by
// themselves (its last segments), polled every 50 ms, then 100 ms to gRPC's
// Shutdown. The wait ends as soon as `stopped` says so, also when SIGTERM
// comes during it, so that SIGTERM ends the worker within a second even
// while a stopped or hung neighbour holds its stream open.
struct PeerServer {
  std::unique_ptr<RingPeerService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;            // advertised host:port
  std::function<bool()> stopped;  // may be empty
  ~PeerServer();
};

// Serves `peer->service` on options.peer_bind:options.peer_port (0: any
// free port) and sets the address the neighbour dials
// (options.advertise_host and the bound port). With TLS the worker needs a
// certificate and key (INVALID_ARGUMENT naming the flags); a port that
// cannot be bound is an error.
absl::Status StartPeerServer(const WorkerNodeOptions& options,
                             PeerServer* peer);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PEER_SERVER_H_
