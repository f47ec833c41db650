// Mode allreduce's TrainerFactory (worker/generation_loop.h): per
// generation the ring from the coordinator (GetPeers), the collective over
// it (the gRPC ring or NCCL), and an AllReduceTrainer
// (worker/allreduce/allreduce_trainer.h) with the generation's checkpoint
// options; training.on_failure: restart re-forms the ring after each
// rollback.
#ifndef PSTRAIN_WORKER_RING_TRAINER_FACTORY_H_
#define PSTRAIN_WORKER_RING_TRAINER_FACTORY_H_

#include <functional>
#include <memory>

#include "worker/allreduce/allreducer.h"
#include "worker/allreduce/grpc_transport.h"
#include "worker/compute/compute_backend.h"
#include "worker/generation_loop.h"
#include "worker/trainer_context.h"

namespace pstrain {

// The collective a worker trains with; outlives the training (the final
// report reads its byte counters).
struct AllReduceLink {
  std::unique_ptr<Transport> transport;  // backend grpc
  std::unique_ptr<AllReducer> reducer;   // borrows the transport
};

// `backend`: the model's, shared with a NCCL reducer. `peer`: this worker's
// RingPeer service (worker/peer_server.h), which the left neighbour streams
// to. `link` holds the current generation's collective: the factory
// replaces it per generation (the reporter and metrics are told first) and
// the caller keeps it past the factory. `cancelled` ends the ring's waits
// (RingOptions::cancelled; thread-safe). All borrowed; they must outlive the
// factory.
std::unique_ptr<TrainerFactory> NewRingTrainerFactory(
    TrainerContext context, std::shared_ptr<ComputeBackend> backend,
    RingPeerService* peer, AllReduceLink* link,
    std::function<bool()> cancelled);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_RING_TRAINER_FACTORY_H_
