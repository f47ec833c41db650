#include "server/worker_sessions.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pstrain {

WorkerSessions::WorkerSessions(int num_workers, Fetch fetch,
                               absl::Duration min_refresh_interval)
    : num_workers_(num_workers),
      fetch_(std::move(fetch)),
      min_interval_(min_refresh_interval),
      ids_(num_workers, 0) {}

std::shared_ptr<WorkerSessions> WorkerSessions::Fixed(
    std::vector<uint64_t> ids) {
  const int n = static_cast<int>(ids.size());
  auto s =
      std::make_shared<WorkerSessions>(n, [ids](absl::Time) { return ids; });
  absl::MutexLock lock(&s->mu_);
  s->ids_ = std::move(ids);
  return s;
}

absl::Status WorkerSessions::Check(uint32_t rank, uint64_t session_id,
                                   const char* what) const {
  absl::ReaderMutexLock lock(&mu_);
  return CheckLocked(rank, session_id, what);
}

absl::Status WorkerSessions::CheckLocked(uint32_t rank, uint64_t session_id,
                                         const char* what) const {
  if (rank >= static_cast<uint32_t>(num_workers_)) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", rank, " (job has ", num_workers_, ")"));
  }
  if (session_id != 0 && session_id == ids_[rank]) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what, ": the session id for worker ", rank,
      session_id == 0 ? " is missing"
                      : " is not the current one of that rank (another "
                        "process, or a replaced one)"));
}

absl::Status WorkerSessions::CheckOrRefresh(uint32_t rank, uint64_t session_id,
                                            const char* what,
                                            absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  absl::Status st = CheckLocked(rank, session_id, what);
  if (st.code() != absl::StatusCode::kPermissionDenied) return st;
  RefreshLocked(deadline);
  st = CheckLocked(rank, session_id, what);
  if (!st.ok() && !last_error_.ok()) {
    return absl::Status(st.code(), absl::StrCat(st.message(),
                                                " (the last refresh from the "
                                                "coordinator failed: ",
                                                last_error_.ToString(), ")"));
  }
  return st;
}

absl::Status WorkerSessions::Refresh(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  RefreshLocked(deadline);
  return last_error_;
}

void WorkerSessions::RefreshLocked(absl::Time deadline) {
  // A refresh that starts after this call arrived.
  const uint64_t need = started_ + 1;
  while (done_ < need) {
    if (refreshing_) {
      if (!mu_.AwaitWithDeadline(
              absl::Condition(this, &WorkerSessions::NotRefreshing),
              deadline)) {
        break;
      }
      continue;
    }
    const absl::Time now = absl::Now();
    const absl::Time at = std::max(now, last_start_ + min_interval_);
    if (at >= deadline) break;
    refreshing_ = true;
    ++started_;
    last_start_ = at;
    mu_.Unlock();
    if (at > now) absl::SleepFor(at - now);
    absl::StatusOr<std::vector<uint64_t>> ids = fetch_(deadline);
    mu_.Lock();
    refreshing_ = false;
    ++done_;
    if (!ids.ok()) {
      last_error_ = ids.status();
    } else if (ids->size() != static_cast<size_t>(num_workers_)) {
      last_error_ = absl::InternalError(
          absl::StrCat("the coordinator listed ", ids->size(),
                       " worker session ids for a job of ", num_workers_));
    } else {
      last_error_ = absl::OkStatus();
      ids_ = *std::move(ids);
    }
  }
}

uint64_t WorkerSessions::refreshes() const {
  absl::ReaderMutexLock lock(&mu_);
  return done_;
}

}  // namespace pstrain
