#include "coordinator/recovery.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pstrain {
namespace {

std::string Name(LeaseHolder holder, int id) {
  return absl::StrCat(
      holder == LeaseHolder::kServer ? "server shard " : "worker ", id);
}

}  // namespace

absl::Status Recovery::Lost(LeaseHolder holder, int id, absl::Time now) {
  if (restarts_ >= max_restarts_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        Name(holder, id), " is gone and the job has used all its restarts (",
        restarts_, " of training.max_restarts = ", max_restarts_, ")"));
  }
  ++restarts_;
  ++generation_;
  if (!recovering_) slots_.clear();
  recovering_ = true;
  deadline_ = now + timeout_;
  for (Slot& s : slots_) {
    if (s.holder == holder && s.id == id) {
      s.filled = false;
      return absl::OkStatus();
    }
  }
  slots_.push_back({holder, id, false});
  return absl::OkStatus();
}

bool Recovery::Covers(LeaseHolder holder, int id) const {
  if (!recovering_) return false;
  for (const Slot& s : slots_) {
    if (s.holder == holder && s.id == id) return true;
  }
  return false;
}

void Recovery::Filled(LeaseHolder holder, int id) {
  for (Slot& s : slots_) {
    if (s.holder == holder && s.id == id) s.filled = true;
  }
}

void Recovery::Refill(LeaseHolder holder, int id) {
  for (Slot& s : slots_) {
    if (s.holder == holder && s.id == id) s.filled = false;
  }
}

bool Recovery::AllFilled() const {
  for (const Slot& s : slots_) {
    if (!s.filled) return false;
  }
  return true;
}

void Recovery::Done(uint64_t step) {
  recovering_ = false;
  generation_step_ = step;
  deadline_ = absl::InfiniteFuture();
  slots_.clear();
}

std::pair<LeaseHolder, int> Recovery::FirstMissing() const {
  for (const Slot& s : slots_) {
    if (!s.filled) return {s.holder, s.id};
  }
  return {LeaseHolder::kServer, -1};
}

std::string Recovery::Missing() const {
  std::vector<std::string> names;
  for (const Slot& s : slots_) {
    if (!s.filled) names.push_back(Name(s.holder, s.id));
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace pstrain
