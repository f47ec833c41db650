// Segments that arrived from the left neighbour and wait for the rank's
// all-reduce to take them. A neighbour may run ahead (within one all-reduce,
// or into the next), so segments are kept by key rather than in a queue; a
// well-behaved neighbour leaves at most about one all-reduce's worth here.
//
// Session ids (docs/security.md): every segment carries its sender's
// session id. Once the rank knows its left neighbour and that neighbour's id
// (ExpectSender, from the coordinator's GetPeers), a segment from another
// rank or with another id is PERMISSION_DENIED and stored nothing.
//
// Generations (training.on_failure: restart,
// docs/failures-and-recovery.md): every segment carries the job generation its
// sender trains in, and the rank expects one (ExpectSender; 0 before any
// rollback). A segment of an older generation is refused (ABORTED, nothing
// stored), so a late segment from before a rollback is never summed.
//
// Held segments: one that cannot be checked yet -- it came before the
// first ExpectSender (the neighbour may start first), or it is of a newer
// generation (the neighbour re-formed the ring first, with a session id
// this rank does not know yet) -- is held apart, by key and claimed session
// id, with a byte bound of its own, until this rank expects that sender
// and generation: then those with the right sender and id join the waiting
// segments, the rest are dropped. So a segment without the sender's id
// changes nothing the rank's all-reduce sees, whatever it claims: it
// neither moves the step window nor takes a key the neighbour will send.
//
// Broken streams (Fail) follow the same rule: a stream counts as "the
// stream from rank r" only if its first segment carried the id and
// generation the rank expects from r. A stranger's stream that breaks
// fails nothing; one that breaks before the rank knows whom to expect is
// held by its claimed id (a few at most) and counts only if ExpectSender
// then names that id.
#ifndef PSTRAIN_WORKER_ALLREDUCE_MAILBOX_H_
#define PSTRAIN_WORKER_ALLREDUCE_MAILBOX_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/allreduce/segment_payload.h"
#include "worker/allreduce/transport.h"

namespace pstrain {

// Thread-safe.
class Mailbox {
 public:
  // Bytes of segment payload that may wait at once (all senders together).
  static constexpr size_t kDefaultMaxBytes = size_t{256} << 20;

  explicit Mailbox(size_t max_bytes = kDefaultMaxBytes)
      : max_bytes_(max_bytes) {}

  // Broken streams (Fail) held before they can be checked, at most.
  static constexpr size_t kMaxHeldFailures = 16;

  // From now on only segments from `rank` (the left neighbour) carrying
  // `session_id` (its id) and `generation` are stored; held ones that are
  // join the waiting ones, waiting and held ones of this or an older
  // generation that are not are dropped (and the step window is taken again
  // from those that remain). A broken stream counts only if it is that
  // sender's (one held with that id and generation, or one already counted
  // for the same sender, id and generation).
  void ExpectSender(uint32_t rank, uint64_t session_id,
                    uint64_t generation = 0);

  // Stores segment `key` (little-endian fp32 bytes, kept as they came) from
  // `from_rank`, whose session id it claims to be `session_id`.
  // PERMISSION_DENIED if ExpectSender named another rank or another session
  // id (the message names the rank, never the expected id); OUT_OF_RANGE if
  // its step is beyond the window (the step of the rank's latest Take, or
  // before any Take the first segment's step, plus one); FAILED_PRECONDITION
  // if its step is before that window (it would never be taken);
  // ALREADY_EXISTS if a segment with that key is already waiting;
  // INVALID_ARGUMENT if the payload is not whole floats; RESOURCE_EXHAUSTED
  // if it would take the waiting bytes over max_bytes (nothing stored);
  // ABORTED if `generation` is older than the expected one; PERMISSION_DENIED
  // for session id 0 (an honest sender always has one). A segment that
  // cannot be checked yet (before ExpectSender, or of a newer generation) is
  // held apart (see above): its session id and step are checked by
  // ExpectSender; ALREADY_EXISTS only for the same key and session id;
  // RESOURCE_EXHAUSTED past max_bytes of such segments.
  absl::Status Put(const SegmentKey& key, uint32_t from_rank,
                   uint64_t session_id, SegmentPayload payload,
                   uint64_t generation = 0);
  absl::Status Put(const SegmentKey& key, uint32_t from_rank,
                   uint64_t session_id, std::string bytes,
                   uint64_t generation = 0) {
    return Put(key, from_rank, session_id,
               SegmentPayload::FromString(std::move(bytes)), generation);
  }

  // The stream whose first segment claimed `from_rank`, `session_id` and
  // `generation` broke (`error`, not OK). If that is the sender the rank
  // expects (ExpectSender: rank, id and generation), from now on a Take from
  // that rank whose segment is not already here fails with `error` at once
  // instead of waiting for its deadline, while the rank expects that sender.
  // One that cannot be checked yet (before ExpectSender, or of a newer
  // generation) is held by id and generation, kMaxHeldFailures at most
  // (beyond that it is forgotten: Takes then wait for their deadline), and
  // counts if ExpectSender names it. Any other is ignored: a stranger's
  // stream, one of another rank, one of an older generation (a stream of
  // before the rollback, cancelled by its sender).
  void Fail(uint32_t from_rank, uint64_t session_id, absl::Status error,
            uint64_t generation = 0);

  // Waits until segment `key` is here, removes it and folds it into `out`
  // as `how` says (outside the lock, straight from the received bytes).
  // Moves the step window to key.step and drops waiting segments of earlier
  // steps.
  // DEADLINE_EXCEEDED at `deadline`; the error given to Fail(from_rank) if
  // the stream broke before the segment came; DATA_LOSS if its size differs
  // from out.size() elements of its dtype, its dtype is not a ring wire
  // dtype, or it came from another rank than `from_rank`. `bytes`, if not
  // null, is set to the payload's size when OK.
  absl::Status Take(const SegmentKey& key, uint32_t from_rank, Combine how,
                    absl::Span<float> out, absl::Time deadline,
                    size_t* bytes = nullptr);
  absl::Status Take(const SegmentKey& key, uint32_t from_rank,
                    absl::Span<float> out, absl::Time deadline) {
    return Take(key, from_rank, Combine::kCopy, out, deadline);
  }

  // Segments waiting (of the expected sender and generation, and held
  // ones), and their payload bytes.
  size_t size() const;
  size_t bytes() const;

 private:
  struct Segment {
    uint32_t from_rank;
    uint64_t session_id;
    SegmentPayload payload;
    size_t bytes;  // payload.size()
    uint64_t generation;
  };
  struct HeldFailure {
    uint32_t from_rank;
    absl::Status error;
  };
  // Drops waiting segments for which `drop` is true.
  template <typename Pred>
  void DropLocked(Pred drop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<SegmentKey, Segment> segments_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<uint32_t> sender_ ABSL_GUARDED_BY(mu_);
  uint64_t sender_session_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<uint64_t> step_ ABSL_GUARDED_BY(mu_);  // window start
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;       // expected
  // Segments not checked yet, by key and claimed session id.
  absl::flat_hash_map<std::pair<SegmentKey, uint64_t>, Segment> held_
      ABSL_GUARDED_BY(mu_);
  size_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The expected sender's stream broke (its error).
  std::optional<absl::Status> broken_ ABSL_GUARDED_BY(mu_);
  // Broken streams not checked yet, by claimed session id and generation.
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, HeldFailure> held_failures_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_MAILBOX_H_
