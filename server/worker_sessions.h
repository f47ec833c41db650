// The workers' session ids as a shard knows them (docs/security.md): every
// pull and push names its rank and carries that rank's session id, which the
// coordinator issued at registration (coordinator/membership.h). The shard
// learns the ids from the coordinator (GetWorkerSessions) when a pull brings
// an id it does not know: at each worker's first pull, and when a rank was
// registered again by a new process (its old id is then refused).
//
// Refreshes are serialised and at least `min_refresh_interval` apart, so
// pulls with made-up ids cost the coordinator at most one call per interval;
// a pull with an unknown id waits (bounded by its deadline) for a refresh
// that started after it arrived. Pushes only consult the table: every worker
// pulls from a shard before it pushes to it (a stand-in, whose first push may
// have to complete a step before any pull could read, sends a pull with
// PullRequest.session_only instead).
//
// Thread-safe.
#ifndef PSTRAIN_SERVER_WORKER_SESSIONS_H_
#define PSTRAIN_SERVER_WORKER_SESSIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

class WorkerSessions {
 public:
  // Returns the current session id of every rank (index = rank, 0: not
  // registered), or an error; must honour `deadline`.
  using Fetch =
      std::function<absl::StatusOr<std::vector<uint64_t>>(absl::Time deadline)>;

  WorkerSessions(int num_workers, Fetch fetch,
                 absl::Duration min_refresh_interval = absl::Milliseconds(100));

  // A table that never changes (tests, benchmarks): `ids` by rank.
  static std::shared_ptr<WorkerSessions> Fixed(std::vector<uint64_t> ids);

  // OK if `session_id` is `rank`'s id as far as the table knows;
  // NOT_FOUND for a rank outside the job ("unknown worker R", as the shard
  // says); PERMISSION_DENIED (naming the rank and `what`, never the expected
  // id) otherwise.
  absl::Status Check(uint32_t rank, uint64_t session_id,
                     const char* what) const;

  // Check; on PERMISSION_DENIED refreshes the table from the coordinator
  // (see above; the fetch gets at most `deadline`) and checks again. A
  // failed refresh leaves the table as it was and is named in the error.
  absl::Status CheckOrRefresh(uint32_t rank, uint64_t session_id,
                              const char* what, absl::Time deadline);

  // Refreshes the table from the coordinator now (a refresh that starts
  // after this call), e.g. when the coordinator says the membership
  // changed (elastic workers); the error of a failed one.
  absl::Status Refresh(absl::Time deadline);

  // Completed refreshes (successful or not).
  uint64_t refreshes() const;

 private:
  absl::Status CheckLocked(uint32_t rank, uint64_t session_id,
                           const char* what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Waits for (or runs) a refresh that starts after the call.
  void RefreshLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NotRefreshing() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !refreshing_;
  }

  const int num_workers_;
  const Fetch fetch_;
  const absl::Duration min_interval_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> ids_ ABSL_GUARDED_BY(mu_);
  bool refreshing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_WORKER_SESSIONS_H_
