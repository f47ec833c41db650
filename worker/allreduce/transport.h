// The ring all-reduce's view of the network, after gloo's transport::Pair:
// each rank sends segments to its right neighbour ((rank + 1) % size) and
// receives segments from its left neighbour ((rank + size - 1) % size).
// Implementations: in memory (ranks as threads of one process, for tests)
// and gRPC (RingPeer streams between worker processes).
#ifndef PSTRAIN_WORKER_ALLREDUCE_TRANSPORT_H_
#define PSTRAIN_WORKER_ALLREDUCE_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"
#include "worker/allreduce/segment_payload.h"

namespace pstrain {

// Names one segment of one all-reduce uniquely within a job.
struct SegmentKey {
  uint64_t step = 0;  // which all-reduce (the training step)
  pstrain::v1::RingPhase phase = pstrain::v1::RING_PHASE_UNSPECIFIED;
  uint32_t chunk = 0;   // ring chunk index in [0, size)
  uint64_t offset = 0;  // first element of the segment in the flat vector

  bool operator==(const SegmentKey& o) const {
    return step == o.step && phase == o.phase && chunk == o.chunk &&
           offset == o.offset;
  }
  template <typename H>
  friend H AbslHashValue(H h, const SegmentKey& k) {
    return H::combine(std::move(h), k.step, static_cast<int>(k.phase), k.chunk,
                      k.offset);
  }
  // "step 3 reduce-scatter chunk 1 offset 4096"
  std::string ToString() const;
};

// How long a transport may wait (Flush, Close): until `deadline`, or until
// `cancelled` (when set) returns true. `cancelled` is polled before the wait
// and about every `poll` during it, on the caller's thread and outside the
// transport's locks, so a cancelled wait ends within about `poll`; it must
// be cheap and thread-safe with whatever makes it true (a signal handler's
// flag, the job's end).
struct WaitBound {
  explicit WaitBound(absl::Time deadline,
                     std::function<bool()> cancelled = nullptr,
                     absl::Duration poll = absl::Milliseconds(50))
      : deadline(deadline), cancelled(std::move(cancelled)), poll(poll) {}

  absl::Time deadline;
  std::function<bool()> cancelled;
  absl::Duration poll;
};

// One rank's two ring links. Thread-compatible: one thread (the rank's
// all-reduce) calls Send and Recv; the byte counters may be read from any
// thread.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  int right() const { return (rank() + 1) % size(); }
  int left() const { return (rank() + size() - 1) % size(); }

  // Queues `data` as segment `key` for the right neighbour, on the wire as
  // `wire` (DTYPE_F32, or DTYPE_BF16: rounded to nearest even; see
  // segment_payload.h IsRingWireDtype), and returns at once: the transport
  // may read `data` until Flush returns, so the caller must keep it alive
  // and unchanged until then (the ring only overwrites a sent range after
  // the neighbour has passed it on). Segments leave in the order sent. The
  // link's error if it broke (then every later Send fails too); `deadline`
  // bounds any wait for room (none in these transports).
  virtual absl::Status Send(const SegmentKey& key, absl::Span<const float> data,
                            pstrain::v1::DType wire, absl::Time deadline) = 0;

  // Waits until every segment sent so far is on its way (written to the
  // connection; the neighbour's mailbox for the in-memory transport, which
  // never waits). DEADLINE_EXCEEDED if the neighbour has not taken them by
  // bound.deadline, CANCELLED if bound.cancelled turned true first: then
  // the link is cancelled and broken (every later Send fails). OK, not
  // CANCELLED, when nothing was left to wait for. Whatever it returns, the
  // transport holds no reference to any `data` given to Send when it
  // returns (a transport that sent from `data` in place would wait, after
  // cancelling its link, until the link let go of it; both transports here
  // copy `data` in Send, and the gRPC one still waits briefly for gRPC to
  // let go of its copies and end the call).
  virtual absl::Status Flush(const WaitBound& bound) = 0;

  // Waits for segment `key` from the left neighbour and folds it into `out`
  // as `how` says (copy, or add to the rank's own values), decoding it from
  // whichever ring wire dtype it came in; its size must be the segment's
  // (DATA_LOSS otherwise). DEADLINE_EXCEEDED, naming the
  // segment and the neighbour, at `deadline`.
  virtual absl::Status Recv(const SegmentKey& key, Combine how,
                            absl::Span<float> out, absl::Time deadline) = 0;

  // Ends the outgoing link gracefully: waits until the right neighbour has
  // every segment sent so far (Flush, then the neighbour's confirmation).
  // Call once, after the last Send (and Flush); Send fails afterwards.
  // DEADLINE_EXCEEDED at bound.deadline and CANCELLED when bound.cancelled
  // turns true first, as Flush: then the link is cancelled instead.
  virtual absl::Status Close(const WaitBound& bound) = 0;

  // Payload bytes sent and received so far, as on the wire (4 per element
  // in fp32, 2 in bf16).
  virtual uint64_t bytes_sent() const = 0;
  virtual uint64_t bytes_received() const = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_TRANSPORT_H_
