// Segments that arrived from the left neighbour and wait for the rank's
// all-reduce to take them. A neighbour may run ahead (within one all-reduce,
// or into the next), so segments are kept by key rather than in a queue; a
// well-behaved neighbour leaves at most about one all-reduce's worth here.
//
// Session ids (README "Security"): every segment carries its sender's
// session id. Once the rank knows its left neighbour and that neighbour's id
// (ExpectSender, from the coordinator's GetPeers), a segment from another
// rank or with another id is PERMISSION_DENIED and stored nothing; segments
// that came earlier (the neighbour may start first) are kept with their ids
// and those that do not match are dropped by ExpectSender.
#ifndef PSTRAIN_WORKER_ALLREDUCE_MAILBOX_H_
#define PSTRAIN_WORKER_ALLREDUCE_MAILBOX_H_

#include <cstdint>
#include <optional>
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
  // Bytes of segment payload that may wait at once (all senders together).
  static constexpr size_t kDefaultMaxBytes = size_t{256} << 20;

  explicit Mailbox(size_t max_bytes = kDefaultMaxBytes)
      : max_bytes_(max_bytes) {}

  // From now on only segments from `rank` (the left neighbour) carrying
  // `session_id` (its id) are stored; waiting ones that are not are dropped
  // (and the step window is taken again from those that remain).
  void ExpectSender(uint32_t rank, uint64_t session_id);

  // Stores segment `key` (little-endian fp32 bytes) from `from_rank`, whose
  // session id it claims to be `session_id`.
  // PERMISSION_DENIED if ExpectSender named another rank or another session
  // id (the message names the rank, never the expected id); OUT_OF_RANGE if
  // its step is beyond the window (the step of the rank's latest Take, or
  // before any Take the first segment's step, plus one); FAILED_PRECONDITION
  // if its step is before that window (it would never be taken);
  // ALREADY_EXISTS if a segment with that key is already waiting;
  // INVALID_ARGUMENT if the payload is not whole floats; RESOURCE_EXHAUSTED
  // if it would take the waiting bytes over max_bytes (nothing stored).
  absl::Status Put(const SegmentKey& key, uint32_t from_rank,
                   uint64_t session_id, std::string bytes);

  // The stream from `from_rank` broke (`error`, not OK): from now on a Take
  // from that rank whose segment is not already here fails with `error` at
  // once instead of waiting for its deadline.
  void Fail(uint32_t from_rank, absl::Status error);

  // Waits until segment `key` is here, removes it and copies it into `out`.
  // Moves the step window to key.step and drops waiting segments of earlier
  // steps.
  // DEADLINE_EXCEEDED at `deadline`; the error given to Fail(from_rank) if
  // the stream broke before the segment came; DATA_LOSS if its size differs
  // from out.size() or it came from another rank than `from_rank`.
  absl::Status Take(const SegmentKey& key, uint32_t from_rank,
                    absl::Span<float> out, absl::Time deadline);

  // Segments waiting, and their payload bytes.
  size_t size() const;
  size_t bytes() const;

 private:
  struct Segment {
    uint32_t from_rank;
    uint64_t session_id;
    std::string bytes;
  };
  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<SegmentKey, Segment> segments_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<uint32_t> sender_ ABSL_GUARDED_BY(mu_);
  uint64_t sender_session_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<uint64_t> step_ ABSL_GUARDED_BY(mu_);  // window start
  absl::flat_hash_map<uint32_t, absl::Status> failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_MAILBOX_H_
