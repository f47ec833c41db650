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

absl::Status Mailbox::Put(const SegmentKey& key, uint32_t from_rank,
                          uint64_t session_id, std::string bytes) {
  if (bytes.size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment ", key.ToString(), " has ", bytes.size(),
                     " bytes, not a whole number of floats"));
  }
  absl::MutexLock lock(&mu_);
  if (sender_.has_value() && from_rank != *sender_) {
    return absl::PermissionDeniedError(absl::StrCat(
        "segment ", key.ToString(), " claims rank ", from_rank,
        "; only the left neighbour, rank ", *sender_, ", sends here"));
  }
  if (sender_.has_value() &&
      (session_id == 0 || session_id != sender_session_)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "segment ", key.ToString(), " from rank ", from_rank,
        session_id == 0 ? " carries no session id"
                        : " carries a session id that is not the current "
                          "one of that rank (another process, or a replaced "
                          "one)"));
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
  if (bytes.size() > max_bytes_ - bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("segment ", key.ToString(), " (", bytes.size(),
                     " bytes) would take the ring mailbox over its ",
                     max_bytes_, " bytes (", bytes_, " waiting); not stored"));
  }
  bytes_ += bytes.size();
  segments_.try_emplace(key, Segment{from_rank, session_id, std::move(bytes)});
  return absl::OkStatus();
}

void Mailbox::ExpectSender(uint32_t rank, uint64_t session_id) {
  absl::MutexLock lock(&mu_);
  sender_ = rank;
  sender_session_ = session_id;
  std::optional<uint64_t> first_step;
  for (auto it = segments_.begin(); it != segments_.end();) {
    const Segment& s = it->second;
    if (s.from_rank != rank || s.session_id == 0 ||
        s.session_id != session_id) {
      bytes_ -= s.bytes.size();
      segments_.erase(it++);
      continue;
    }
    if (!first_step.has_value() || it->first.step < *first_step) {
      first_step = it->first.step;
    }
    ++it;
  }
  step_ = first_step;
}

void Mailbox::Fail(uint32_t from_rank, absl::Status error) {
  if (error.ok()) error = absl::UnknownError("the stream broke");
  absl::MutexLock lock(&mu_);
  failed_.insert_or_assign(from_rank, std::move(error));
}

absl::Status Mailbox::Take(const SegmentKey& key, uint32_t from_rank,
                           absl::Span<float> out, absl::Time deadline) {
  Segment segment;
  {
    absl::MutexLock lock(&mu_);
    if (!step_.has_value() || *step_ != key.step) {
      step_ = key.step;
      for (auto it = segments_.begin(); it != segments_.end();) {
        if (it->first.step < key.step) {
          bytes_ -= it->second.bytes.size();
          segments_.erase(it++);
        } else {
          ++it;
        }
      }
    }
    auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return segments_.contains(key) || failed_.contains(from_rank);
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&arrived), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "segment ", key.ToString(), " did not arrive from rank ", from_rank));
    }
    auto it = segments_.find(key);
    if (it == segments_.end()) {
      const absl::Status& error = failed_.at(from_rank);
      return absl::Status(error.code(),
                          absl::StrCat("segment ", key.ToString(),
                                       " will not arrive: the "
                                       "stream from rank ",
                                       from_rank, " broke: ", error.message()));
    }
    bytes_ -= it->second.bytes.size();
    segment = std::move(it->second);
    segments_.erase(it);
  }
  if (segment.from_rank != from_rank ||
      segment.bytes.size() != out.size() * sizeof(float)) {
    return absl::DataLossError(absl::StrCat(
        "segment ", key.ToString(), ": expected ", out.size() * sizeof(float),
        " bytes from rank ", from_rank, ", got ", segment.bytes.size(),
        " bytes from rank ", segment.from_rank));
  }
  std::memcpy(out.data(), segment.bytes.data(), segment.bytes.size());
  return absl::OkStatus();
}

size_t Mailbox::size() const {
  absl::MutexLock lock(&mu_);
  return segments_.size();
}

size_t Mailbox::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace pstrain
