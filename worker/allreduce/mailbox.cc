#include "worker/allreduce/mailbox.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {

std::string SegmentKey::ToString() const {
  const char* name = phase == pstrain::v1::REDUCE_SCATTER ? "reduce-scatter"
                     : phase == pstrain::v1::ALL_GATHER   ? "all-gather"
                     : phase == pstrain::v1::ROW_GATHER   ? "row-gather"
                                                          : "phase?";
  return absl::StrCat("step ", step, " ", name, " chunk ", chunk, " offset ",
                      offset);
}

template <typename Pred>
void Mailbox::DropLocked(Pred drop) {
  for (auto it = segments_.begin(); it != segments_.end();) {
    if (drop(it->first, it->second)) {
      bytes_ -= it->second.bytes;
      segments_.erase(it++);
    } else {
      ++it;
    }
  }
}

absl::Status Mailbox::Put(const SegmentKey& key, uint32_t from_rank,
                          uint64_t session_id, SegmentPayload payload,
                          uint64_t generation) {
  const size_t size = payload.size();
  if (!IsRingWireDtype(payload.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment ", key.ToString(), " is in ",
                     pstrain::v1::DType_Name(payload.dtype),
                     ", not a ring dtype (fp32 or bf16)"));
  }
  if (size % RingWireBytes(payload.dtype, 1) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment ", key.ToString(), " has ", size,
                     " bytes, not a whole number ", "of ",
                     pstrain::v1::DType_Name(payload.dtype), " values"));
  }
  if (session_id == 0) {
    return absl::PermissionDeniedError(absl::StrCat("segment ", key.ToString(),
                                                    " from rank ", from_rank,
                                                    " carries no session id"));
  }
  absl::MutexLock lock(&mu_);
  // The left neighbour's rank is the same in every generation.
  if (sender_.has_value() && from_rank != *sender_) {
    return absl::PermissionDeniedError(absl::StrCat(
        "segment ", key.ToString(), " claims rank ", from_rank,
        "; only the left neighbour, rank ", *sender_, ", sends here"));
  }
  if (generation < generation_) {
    return absl::AbortedError(
        absl::StrCat("segment ", key.ToString(), " of generation ", generation,
                     " refused: this rank trains in generation ", generation_,
                     " (the job rolled back); nothing stored"));
  }
  if (!sender_.has_value() || generation > generation_) {
    // Not checkable yet (the neighbour started, or re-formed the ring,
    // first): held apart until this rank expects the sender and generation
    // (ExpectSender checks the session id then).
    if (held_.contains({key, session_id})) {
      return absl::AlreadyExistsError(
          absl::StrCat("segment ", key.ToString(), " arrived twice"));
    }
    if (size > max_bytes_ - held_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "segment ", key.ToString(), " of generation ", generation, " (", size,
          " bytes) would take the ring mailbox's segments held before they ",
          "can be checked over ", max_bytes_, " bytes; not stored"));
    }
    held_bytes_ += size;
    held_.try_emplace(
        std::make_pair(key, session_id),
        Segment{from_rank, session_id, std::move(payload), size, generation});
    return absl::OkStatus();
  }
  if (session_id != sender_session_) {
    return absl::PermissionDeniedError(
        absl::StrCat("segment ", key.ToString(), " from rank ", from_rank,
                     " carries a session id that is not the current one of "
                     "that rank (another process, or a replaced one)"));
  }
  if (!step_.has_value()) step_ = key.step;
  if (key.step < *step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment ", key.ToString(), " is for a step before ",
                     *step_, ", which this rank has moved past"));
  }
  if (key.step - *step_ > 1) {
    return absl::OutOfRangeError(
        absl::StrCat("segment ", key.ToString(),
                     " is more than one step ahead of step ", *step_));
  }
  if (segments_.contains(key)) {
    return absl::AlreadyExistsError(
        absl::StrCat("segment ", key.ToString(), " arrived twice"));
  }
  if (size > max_bytes_ - bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("segment ", key.ToString(), " (", size,
                     " bytes) would take the ring mailbox over its ",
                     max_bytes_, " bytes (", bytes_, " waiting); not stored"));
  }
  bytes_ += size;
  segments_.try_emplace(key, Segment{from_rank, session_id, std::move(payload),
                                     size, generation});
  return absl::OkStatus();
}

void Mailbox::ExpectSender(uint32_t rank, uint64_t session_id,
                           uint64_t generation) {
  absl::MutexLock lock(&mu_);
  const bool same_sender = sender_.has_value() && *sender_ == rank &&
                           sender_session_ == session_id &&
                           generation_ == generation;
  if (!same_sender) broken_.reset();
  sender_ = rank;
  sender_session_ = session_id;
  generation_ = generation;
  auto wrong = [&](const Segment& s) {
    return s.from_rank != rank || s.session_id != session_id ||
           s.generation != generation;
  };
  DropLocked([&](const SegmentKey&, const Segment& s) { return wrong(s); });
  // Held segments of this generation from the sender join; those of an
  // older one, or of this one from anyone else, go.
  for (auto it = held_.begin(); it != held_.end();) {
    Segment& s = it->second;
    if (s.generation > generation) {
      ++it;
      continue;
    }
    held_bytes_ -= s.bytes;
    if (!wrong(s) && !segments_.contains(it->first.first)) {
      bytes_ += s.bytes;
      segments_.try_emplace(it->first.first, std::move(s));
    }
    held_.erase(it++);
  }
  std::optional<uint64_t> first_step;
  for (const auto& [key, s] : segments_) {
    if (!first_step.has_value() || key.step < *first_step) {
      first_step = key.step;
    }
  }
  step_ = first_step;
  // Likewise a held broken stream: the sender's counts, the rest go.
  auto held = held_failures_.find({session_id, generation});
  if (held != held_failures_.end() && held->second.from_rank == rank) {
    broken_ = std::move(held->second.error);
  }
  for (auto it = held_failures_.begin(); it != held_failures_.end();) {
    if (it->first.second <= generation) {
      held_failures_.erase(it++);
    } else {
      ++it;
    }
  }
}

void Mailbox::Fail(uint32_t from_rank, uint64_t session_id, absl::Status error,
                   uint64_t generation) {
  if (error.ok()) error = absl::UnknownError("the stream broke");
  absl::MutexLock lock(&mu_);
  if (generation < generation_) return;  // a stream of before a rollback
  if (sender_.has_value() && from_rank != *sender_) return;  // not the left
  if (sender_.has_value() && generation == generation_) {
    // Checkable now: only the expected sender's stream counts.
    if (session_id == sender_session_) broken_ = std::move(error);
    return;
  }
  // Before ExpectSender, or of a newer generation: held by the claimed id.
  if (session_id == 0) return;
  const std::pair<uint64_t, uint64_t> id{session_id, generation};
  if (held_failures_.size() >= kMaxHeldFailures &&
      !held_failures_.contains(id)) {
    return;  // only a fast path is lost: the Takes wait for their deadline
  }
  held_failures_.insert_or_assign(id, HeldFailure{from_rank, std::move(error)});
}

absl::Status Mailbox::Take(const SegmentKey& key, uint32_t from_rank,
                           Combine how, absl::Span<float> out,
                           absl::Time deadline, size_t* bytes) {
  Segment segment;
  {
    absl::MutexLock lock(&mu_);
    if (!step_.has_value() || *step_ != key.step) {
      step_ = key.step;
      DropLocked([&](const SegmentKey& k, const Segment&) {
        return k.step < key.step;
      });
    }
    auto here = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = segments_.find(key);
      return it != segments_.end() && it->second.generation == generation_;
    };
    auto broken = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return broken_.has_value() && sender_ == from_rank;
    };
    auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return here() || broken();
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&arrived), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "segment ", key.ToString(), " did not arrive from rank ", from_rank));
    }
    auto it = segments_.find(key);
    if (!here()) {
      const absl::Status& error = *broken_;
      return absl::Status(error.code(),
                          absl::StrCat("segment ", key.ToString(),
                                       " will not arrive: the "
                                       "stream from rank ",
                                       from_rank, " broke: ", error.message()));
    }
    bytes_ -= it->second.bytes;
    segment = std::move(it->second);
    segments_.erase(it);
  }
  const pstrain::v1::DType dtype = segment.payload.dtype;
  if (!IsRingWireDtype(dtype)) {
    return absl::DataLossError(absl::StrCat(
        "segment ", key.ToString(), " from rank ", segment.from_rank, " is in ",
        pstrain::v1::DType_Name(dtype), ", not a ring dtype"));
  }
  if (segment.from_rank != from_rank ||
      segment.bytes != RingWireBytes(dtype, out.size())) {
    return absl::DataLossError(absl::StrCat(
        "segment ", key.ToString(), ": expected ",
        RingWireBytes(dtype, out.size()), " bytes (",
        pstrain::v1::DType_Name(dtype), ") from rank ", from_rank, ", got ",
        segment.bytes, " bytes from rank ", segment.from_rank));
  }
  CombineInto(segment.payload, how, out);
  if (bytes != nullptr) *bytes = segment.bytes;
  return absl::OkStatus();
}

size_t Mailbox::size() const {
  absl::MutexLock lock(&mu_);
  return segments_.size() + held_.size();
}

size_t Mailbox::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_ + held_bytes_;
}

}  // namespace pstrain
