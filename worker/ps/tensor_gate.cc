#include "worker/ps/tensor_gate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pstrain {

void TensorGate::Reset() {
  absl::MutexLock lock(&mu_);
  std::fill(open_.begin(), open_.end(), false);
  aborted_ = absl::OkStatus();
  last_open_ = absl::InfinitePast();
}

void TensorGate::Open(int tensor) {
  absl::MutexLock lock(&mu_);
  if (tensor >= 0 && tensor < static_cast<int>(open_.size())) {
    open_[tensor] = true;
    last_open_ = absl::Now();
  }
}

void TensorGate::OpenAll() {
  absl::MutexLock lock(&mu_);
  std::fill(open_.begin(), open_.end(), true);
  last_open_ = absl::Now();
}

absl::Time TensorGate::last_open() const {
  absl::MutexLock lock(&mu_);
  return last_open_;
}

void TensorGate::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  aborted_ = status.ok() ? absl::CancelledError("gate aborted") : status;
}

bool TensorGate::IsOpen(int tensor) const {
  absl::MutexLock lock(&mu_);
  return tensor >= 0 && tensor < static_cast<int>(open_.size()) &&
         open_[tensor];
}

absl::Status TensorGate::Wait(int tensor, absl::Time deadline) const {
  if (tensor < 0 || tensor >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gate entry ", tensor, " not in the gate (", size(), ")"));
  }
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return open_[tensor] || !aborted_.ok();
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  if (open_[tensor]) return absl::OkStatus();
  if (!aborted_.ok()) return aborted_;
  return absl::DeadlineExceededError(
      absl::StrCat("gate entry ", tensor, " was not ready in time"));
}

}  // namespace pstrain
