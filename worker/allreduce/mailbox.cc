#include "worker/allreduce/mailbox.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {

std::string SegmentKey::ToString() const {
  const char* name = phase == pstrain::v1::REDUCE_SCATTER ? "reduce-scatter"
                     : phase == pstrain::v1::ALL_GATHER   ? "all-gather"
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
  if (generation > generation_) {
    // The neighbour re-formed the ring first: held apart until this rank
    // expects the generation (ExpectSender checks the session id then).
    if (early_.contains({key, session_id})) {
      return absl::AlreadyExistsError(
          absl::StrCat("segment ", key.ToString(), " arrived twice"));
    }
    if (size > max_bytes_ - early_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "segment ", key.ToString(), " of generation ", generation, " (", size,
          " bytes) would take the ring mailbox's segments of newer ",
          "generations over ", max_bytes_, " bytes; not stored"));
    }
    early_bytes_ += size;
    early_.try_emplace(
        std::make_pair(key, session_id),
        Segment{from_rank, session_id, std::move(payload), size, generation});
    return absl::OkStatus();
  }
  if (sender_.has_value() &&
      (session_id == 0 || session_id != sender_session_)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "segment ", key.ToString(), " from rank ", from_rank,
        session_id == 0 ? " carries no session id"
                        : " carries a session id that is not the current "
                          "one of that rank (another process, or a "
                          "replaced one)"));
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
  sender_ = rank;
  sender_session_ = session_id;
  generation_ = generation;
  auto wrong = [&](const Segment& s) {
    return s.from_rank != rank || s.session_id == 0 ||
           s.session_id != session_id || s.generation != generation;
  };
  DropLocked([&](const SegmentKey&, const Segment& s) { return wrong(s); });
  // Held segments of this generation from the sender join; those of an
  // older one, or of this one from anyone else, go.
  for (auto it = early_.begin(); it != early_.end();) {
    Segment& s = it->second;
    if (s.generation > generation) {
      ++it;
      continue;
    }
    early_bytes_ -= s.bytes;
    if (!wrong(s) && !segments_.contains(it->first.first)) {
      bytes_ += s.bytes;
      segments_.try_emplace(it->first.first, std::move(s));
    }
    early_.erase(it++);
  }
  std::optional<uint64_t> first_step;
  for (const auto& [key, s] : segments_) {
    if (!first_step.has_value() || key.step < *first_step) {
      first_step = key.step;
    }
  }
  step_ = first_step;
  for (auto it = failed_.begin(); it != failed_.end();) {
    if (it->second.generation < generation) {
      failed_.erase(it++);
    } else {
      ++it;
    }
  }
}

void Mailbox::Fail(uint32_t from_rank, absl::Status error,
                   uint64_t generation) {
  if (error.ok()) error = absl::UnknownError("the stream broke");
  absl::MutexLock lock(&mu_);
  if (generation < generation_) return;  // a stream of before a rollback
  failed_.insert_or_assign(from_rank, Broken{std::move(error), generation});
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
      auto it = failed_.find(from_rank);
      return it != failed_.end() && it->second.generation == generation_;
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
      const absl::Status& error = failed_.at(from_rank).error;
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
  return segments_.size() + early_.size();
}

size_t Mailbox::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_ + early_bytes_;
}

}  // namespace pstrain
