// What the all-reduce trainer needs from a collective: an element-wise sum
// over all ranks, in place. Implementations: RingAllReducer (ring over a
// Transport, ring_allreduce.h) and the NCCL one (nccl_allreducer.h).
#ifndef PSTRAIN_WORKER_ALLREDUCE_ALLREDUCER_H_
#define PSTRAIN_WORKER_ALLREDUCE_ALLREDUCER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "worker/compute/compute_backend.h"

namespace pstrain {

// Thread-compatible: one thread calls SumInPlace and Close; the byte
// counters may be read from any thread.
class AllReducer {
 public:
  virtual ~AllReducer() = default;

  // E.g. "ring over gRPC, 1 MiB segments" or "nccl".
  virtual std::string name() const = 0;

  // Replaces `data` by its element-wise sum over all ranks. Every rank calls
  // it with the same sequence of steps and sizes; `step` tags the operation
  // (increasing). On success every rank holds bit-identical values. Errors
  // (DEADLINE_EXCEEDED when a peer does not take part in time) leave `data`
  // unspecified and the reducer unusable.
  virtual absl::Status SumInPlace(uint64_t step, absl::Span<float> data) = 0;

  // True when SumInPlaceOnDevice works: the sum then runs where the data
  // already is (NCCL, on the GPU), with no host round trip.
  virtual bool sums_on_device() const { return false; }
  // SumInPlace for data[0, n) of a buffer of the compute backend the reducer
  // was created with. UNIMPLEMENTED unless sums_on_device().
  virtual absl::Status SumInPlaceOnDevice(uint64_t step, DeviceBuffer* data,
                                          int64_t n) {
    (void)step;
    (void)data;
    (void)n;
    return absl::UnimplementedError(
        absl::StrCat(name(), " sums host memory only"));
  }

  // Gathers every rank's block: `data` holds the blocks of all ranks back to
  // back, rank r's of sizes[r] floats (the same `sizes` on every rank); on
  // entry this rank's block is filled in, on success every block is, bit for
  // bit as its rank gave it. Same step rules as SumInPlace (an all-gather may
  // share its step with one SumInPlace that came before it). UNIMPLEMENTED
  // unless the reducer gathers (the ring: ring_allgather.h).
  virtual absl::Status AllGather(uint64_t step,
                                 absl::Span<const uint64_t> sizes,
                                 absl::Span<float> data) {
    (void)step;
    (void)sizes;
    (void)data;
    return absl::UnimplementedError(absl::StrCat(name(), " does not gather"));
  }

  // Ends the collective gracefully (the last data reaches every peer) after
  // the last SumInPlace.
  virtual absl::Status Close() = 0;

  // Payload bytes this rank sent to and received from its peers.
  virtual uint64_t bytes_sent() const = 0;
  virtual uint64_t bytes_received() const = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_ALLREDUCER_H_
