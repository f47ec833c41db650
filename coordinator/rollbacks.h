// Rollbacks at the coordinator service (training.on_failure: restart, and an
// elastic ring's lost rank; coordinator/recovery.h holds the generations,
// docs/failures-and-recovery.md the story): a lost process starts a new
// generation and frees its slot (its supervisor is told: "lost ..." in
// supervision.txt); once every replacement is in, the node rolls every shard
// back and Finish ends the recovery; a replacement that does not come within
// training.restart_timeout_s fails the job (Overdue).
//
// The service owns it beside the Recovery, Membership, LeaseTable, StepLog,
// JobSpec and SupervisionNotes it is given (they must outlive it), all
// guarded by the service's mutex: every method runs with that mutex held.
// Failing the job goes through JobEvents (coordinator/elastic_ranks.h). Not
// thread-safe on its own.
#ifndef PSTRAIN_COORDINATOR_ROLLBACKS_H_
#define PSTRAIN_COORDINATOR_ROLLBACKS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "common/run_record.h"
#include "coordinator/elastic_ranks.h"
#include "coordinator/failure_policy.h"
#include "coordinator/leases.h"
#include "coordinator/membership.h"
#include "coordinator/recovery.h"
#include "coordinator/step_log.h"
#include "coordinator/supervision_notes.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

class Rollbacks {
 public:
  // `training`: restart_timeout_s and max_restarts, for the log and the
  // failures.
  Rollbacks(const FailurePolicy* policy,
            const pstrain::v1::TrainingConfig& training, Recovery* recovery,
            Membership* members, LeaseTable* leases, StepLog* step_log,
            pstrain::v1::JobSpec* job, SupervisionNotes* notes,
            JobEvents* events);

  // `holder` `id` is gone (`why`, for the log and the failure): a new
  // generation (JobSpec.generation), its slot and lease freed; or the job
  // fails when no restart is left or a worker already finished (nobody
  // could redo its steps).
  void Lose(LeaseHolder holder, int id, const std::string& why);
  // At `now`, past the recovery's deadline: the failure naming the first
  // process whose replacement did not come; nullopt otherwise.
  std::optional<RunFailure> Overdue(absl::Time now) const;
  // Generation `generation` (or a later one) has started and rolled back.
  bool Recovered(uint64_t generation) const {
    return recovery_.generation() >= generation && !recovery_.recovering();
  }
  // Every replacement is in (and every slot filled): the node rolls back.
  bool Due() const;
  // Every shard rolled back to `checkpoint` ("" = the initial state) at
  // `step` for `generation`: the recovery ends, the step log and the JobSpec
  // restart there. False (nothing changed) if another failure started a
  // newer generation or a replacement is missing.
  bool Finish(uint64_t generation, const std::string& checkpoint,
              uint64_t step);

 private:
  const FailurePolicy& policy_;
  const double restart_timeout_s_;
  const int64_t max_restarts_;
  Recovery& recovery_;
  Membership& members_;
  LeaseTable& leases_;
  StepLog& step_log_;
  pstrain::v1::JobSpec& job_;
  SupervisionNotes& notes_;
  JobEvents& events_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_ROLLBACKS_H_
