// Ring all-reduce (Patarasuk & Yuan 2009; gloo's AllreduceRing): the vector
// is cut into N chunks; in N - 1 reduce-scatter rounds partial sums travel
// right around the ring until rank r holds the full sum of chunk r + 1; in
// N - 1 all-gather rounds the finished chunks travel on until every rank has
// all of them. Each rank sends and receives 2 (N - 1) / N of the vector, and
// every chunk is cut into segments of at most segment_elems floats that are
// passed on as soon as they are ready, so the rounds pipeline and no message
// is larger than one segment.
#ifndef PSTRAIN_WORKER_ALLREDUCE_RING_ALLREDUCE_H_
#define PSTRAIN_WORKER_ALLREDUCE_RING_ALLREDUCE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"
#include "worker/allreduce/allreducer.h"
#include "worker/allreduce/transport.h"

namespace pstrain {

struct RingOptions {
  size_t segment_elems = (1 << 20) / sizeof(float);  // allreduce.segment_bytes
  absl::Duration timeout = absl::Seconds(60);  // each send and each receive
  // network.wire_dtype: DTYPE_F32, or DTYPE_BF16 (segments sent as bf16,
  // sums in fp32; see RingAllReduce).
  pstrain::v1::DType wire_dtype = pstrain::v1::DTYPE_F32;
  // When set, polled before and about every `poll` during each wait for a
  // segment, the final flush of a step and the close (RingAllReducer::
  // Close): true ends the wait with CANCELLED (SIGTERM, the job's end, or a
  // rollback: docs/failures-and-recovery.md), so no wait outlasts it by
  // more than `poll` (plus, for the flush and close, the transport's brief
  // wait for its cancelled link to let go). Called on the rank's thread;
  // must be cheap and thread-safe with whatever sets it.
  std::function<bool()> cancelled;
  absl::Duration poll = absl::Milliseconds(50);
};

// [begin, begin + size) of chunk `c` when `n` elements are cut into `parts`
// chunks whose sizes differ by at most one (the first n % parts are longer).
struct ChunkRange {
  size_t begin = 0;
  size_t size = 0;
};
ChunkRange RingChunk(size_t n, int parts, int c);

// Sums `data` element-wise over the ranks of `transport`'s ring, in place;
// see AllReducer::SumInPlace. Every rank's floating-point additions for a
// chunk happen in one fixed order on one rank, and the all-gather copies the
// result, so all ranks end bit-identical.
// With wire_dtype DTYPE_BF16 every segment travels as bf16 (half the bytes):
// each reduce-scatter hop rounds the partial sum it passes on to bf16 and the
// receiver adds it, decoded, to its own fp32 values in fp32; the rank that
// completes a chunk rounds the sum to bf16 in place before the all-gather
// sends it, so every rank ends with the same bf16-representable values,
// bit-identical across ranks. Error: each of the N - 1 hops and the final
// rounding add at most 2^-8 of the partial sum's magnitude, so
// |result - exact sum| <= about N * 2^-8 * sum over ranks of |x_r|
// (ring_allreduce_test checks N * 2^-7).
// INVALID_ARGUMENT when segment_elems is 0 or wire_dtype is neither
// DTYPE_F32 nor DTYPE_BF16; DEADLINE_EXCEEDED when a neighbour's segment
// does not arrive (or is not taken) within options.timeout; CANCELLED when
// options.cancelled turns true while it waits, for a segment or in the final
// flush of the segments still being written (then `data` may be partly
// summed: the caller must not use it). Either way the transport no longer
// reads `data` when it returns.
absl::Status RingAllReduce(Transport* transport, uint64_t step,
                           absl::Span<float> data, const RingOptions& options);

// RingAllReduce as an AllReducer. Borrows `transport`, which must outlive it.
class RingAllReducer : public AllReducer {
 public:
  RingAllReducer(Transport* transport, RingOptions options)
      : transport_(transport), options_(options) {}

  std::string name() const override;
  absl::Status SumInPlace(uint64_t step, absl::Span<float> data) override {
    return RingAllReduce(transport_, step, data, options_);
  }
  // RingAllGather (ring_allgather.h).
  absl::Status AllGather(uint64_t step, absl::Span<const uint64_t> sizes,
                         absl::Span<float> data) override;
  // Transport::Close within options.timeout; CANCELLED when
  // options.cancelled turns true first.
  absl::Status Close() override {
    return transport_->Close(WaitBound(absl::Now() + options_.timeout,
                                       options_.cancelled, options_.poll));
  }
  uint64_t bytes_sent() const override { return transport_->bytes_sent(); }
  uint64_t bytes_received() const override {
    return transport_->bytes_received();
  }

 private:
  Transport* const transport_;
  const RingOptions options_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_RING_ALLREDUCE_H_
