// allreduce.backend nccl: the all-reduce runs in GPU memory through NCCL
// (ncclAllReduce on the backend's device and stream) instead of the gRPC
// ring. Training uses SumInPlaceOnDevice: the model's gradient is reduced in
// place where it was computed, with no host round trip; SumInPlace (host
// memory) copies through a device buffer of its own. Every worker needs a
// CUDA device of its own (NCCL refuses two ranks on one GPU); rank 0 makes
// the NCCL unique id and the coordinator's GetPeers hands it to the others.
// Built only with CUDA and NCCL (worker/allreduce/BUILD,
// third_party/cuda/cuda_configure.bzl); elsewhere, and on machines without a
// GPU, every function answers FAILED_PRECONDITION saying why.
#ifndef PSTRAIN_WORKER_ALLREDUCE_NCCL_ALLREDUCER_H_
#define PSTRAIN_WORKER_ALLREDUCE_NCCL_ALLREDUCER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/allreduce/allreducer.h"
#include "worker/compute/compute_backend.h"

namespace pstrain {

// Whether this binary was built with NCCL (CUDA and nccl.h found at build
// time, not --config=nocuda).
bool BuiltWithNccl();

// OK when NCCL can run on `backend`: built with CUDA and NCCL, a CUDA device
// visible, and `backend` is the CUDA backend. FAILED_PRECONDITION otherwise.
absl::Status NcclUsable(const ComputeBackend& backend);

// A fresh ncclUniqueId (opaque bytes) for rank 0 to publish.
absl::StatusOr<std::string> NewNcclUniqueId();

// Joins the NCCL communicator of `size` ranks named by `unique_id` as
// `rank`, on `backend`'s device; `backend` (checked with NcclUsable) is
// shared: the reducer keeps it alive as long as it needs it, so the caller
// may drop its own share first. Communicator set-up and each all-reduce must
// finish within `timeout`, else the communicator is aborted and the call
// returns DEADLINE_EXCEEDED (a missing rank cannot hang the worker). A failed
// set-up says that NCCL needs a distinct GPU per rank (the usual cause on a
// host with fewer GPUs than workers). Close() finalizes the communicator
// (ncclCommFinalize, then ncclCommDestroy) within `timeout`; a reducer
// destroyed without Close does the same within at most 5 s, and aborts the
// communicator when that fails.
absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(
    std::shared_ptr<ComputeBackend> backend, int rank, int size,
    const std::string& unique_id, absl::Duration timeout);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_NCCL_ALLREDUCER_H_
