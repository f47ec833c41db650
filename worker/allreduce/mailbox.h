// Segments that arrived from the left neighbour and wait for the rank's
// all-reduce to take them. A neighbour may run ahead (within one all-reduce,
// or into the next), so segments are kept by key rather than in a queue; a
// well-behaved neighbour leaves at most about one all-reduce's worth here.
#ifndef PSTRAIN_WORKER_ALLREDUCE_MAILBOX_H_
#define PSTRAIN_WORKER_ALLREDUCE_MAILBOX_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/allreduce/transport.h"

namespace pstrain {

// Thread-safe.
class Mailbox {
 public:
  // Stores segment `key` (little-endian fp32 bytes) from `from_rank`.
  // ALREADY_EXISTS if a segment with that key is already waiting;
  // INVALID_ARGUMENT if the payload is not whole floats.
  absl::Status Put(const SegmentKey& key, uint32_t from_rank,
                   std::string bytes);

  // Waits until segment `key` is here, removes it and copies it into `out`.
  // DEADLINE_EXCEEDED at `deadline`; DATA_LOSS if its size differs from
  // out.size() or it came from another rank than `from_rank`.
  absl::Status Take(const SegmentKey& key, uint32_t from_rank,
                    absl::Span<float> out, absl::Time deadline);

  // Segments waiting.
  size_t size() const;

 private:
  struct Segment {
    uint32_t from_rank;
    std::string bytes;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<SegmentKey, Segment> segments_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_MAILBOX_H_
