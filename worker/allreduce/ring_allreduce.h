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
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/allreduce/allreducer.h"
#include "worker/allreduce/transport.h"

namespace pstrain {

struct RingOptions {
  size_t segment_elems = (1 << 20) / sizeof(float);  // allreduce.segment_bytes
  absl::Duration timeout = absl::Seconds(60);  // each send and each receive
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
// result, so all ranks end bit-identical. INVALID_ARGUMENT when
// segment_elems is 0; DEADLINE_EXCEEDED when a neighbour's segment does not
// arrive (or is not taken) within options.timeout.
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
  absl::Status Close() override {
    return transport_->Close(absl::Now() + options_.timeout);
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
