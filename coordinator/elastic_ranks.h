// training.on_failure: elastic at the coordinator service
// (coordinator/elastic.h holds the rank states and their rules;
// docs/failures-and-recovery.md, "Elastic workers"): what a worker rank's
// departure, a registration for a rank that was registered before (a new
// process rejoining, a live worker taking the rank over with `adopt`, a
// handover in mode sync, a new ring member in mode allreduce) and a
// stand-in's ReleaseRank do to the membership, the leases and the step log.
//
// The coordinator service owns it beside the Membership, LeaseTable, StepLog,
// Recovery and SupervisionNotes it is given (they must outlive it); each
// takeover, hosted rank, dropped rank, release and rejoin is noted there
// (coordinator/supervision_notes.h) as it is decided. All of them are guarded
// by the service's mutex `mu`: every method runs with `mu` held, and only
// Rejoin's handover wait releases it while it waits (bounded by the call's
// deadline and wait_cap). What reaches beyond these values (failing the job,
// losing a process under the recovery, whether the job is over) goes
// through JobEvents, which the service implements. Not thread-safe on its
// own.
#ifndef PSTRAIN_COORDINATOR_ELASTIC_RANKS_H_
#define PSTRAIN_COORDINATOR_ELASTIC_RANKS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/run_record.h"
#include "coordinator/elastic.h"
#include "coordinator/leases.h"
#include "coordinator/membership.h"
#include "coordinator/recovery.h"
#include "coordinator/step_log.h"
#include "coordinator/supervision_notes.h"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {

class FailurePolicy;

// The coordinator service's side of a job, as the elastic handling needs it.
// Called with the service's mutex held.
class JobEvents {
 public:
  virtual ~JobEvents() = default;
  virtual bool ended() const = 0;
  // FAILED_PRECONDITION: the job has already finished.
  virtual absl::Status EndedError() const = 0;
  // The job fails because of `failure` (the first failure is kept).
  virtual void Fail(const RunFailure& failure) = 0;
  // `holder` `id` is gone (`why`): a new generation that rolls every rank
  // back (coordinator/recovery.h), or the job fails.
  virtual void Lose(LeaseHolder holder, int id, const std::string& why) = 0;
};

class ElasticRanks {
 public:
  ElasticRanks(ElasticOptions options, const FailurePolicy* policy,
               Membership* members, LeaseTable* leases, StepLog* step_log,
               Recovery* recovery, JobEvents* events, SupervisionNotes* notes,
               absl::Mutex* mu, absl::Duration wait_cap);

  // Whether a registration for `requested_rank` (-1: any) is a rejoin: a
  // rank registered before, or -1 once every rank was (ElasticWorkers).
  bool Handles(int requested_rank) const;

  // A rejoin (Handles): the rank, its new session and the step it starts
  // at. Mode sync without `adopt`: waits for the handover (UNAVAILABLE:
  // retry while the stand-in has not released the rank; FAILED_PRECONDITION
  // when the rank finished or was abandoned). Async: from the slowest live
  // worker's step. `adopt`: from the rank's first unreported step, or
  // `adopt_from_step` when later. Holds the rank's lease from `peer`.
  struct Rejoined {
    int rank = -1;
    uint64_t session = 0;
    uint64_t start_step = 0;
  };
  absl::StatusOr<Rejoined> Rejoin(
      const grpc::ServerContext& context,
      const pstrain::v1::RegisterWorkerRequest& request,
      uint64_t job_start_step);

  // Mode allreduce (an elastic ring): checks a registration for `*rank` (-1
  // resolved to a rank once every rank was registered). `adopt` (a live
  // worker hosting the rank) only for a departed rank; a live rank is
  // refused (ALREADY_EXISTS); a new worker for a hosted rank takes it back:
  // the hosting member's session ends and a new generation rolls every rank
  // back (JobEvents::Lose).
  absl::Status CheckRingMember(
      const pstrain::v1::RegisterWorkerRequest& request, int* rank);
  // Mode allreduce: `rank` registered with `request` (a hosted rank when
  // `adopt`, noted with its adopter).
  void RingMemberRegistered(int rank,
                            const pstrain::v1::RegisterWorkerRequest& request);

  // Mode sync: the stand-in released its rank (ReleaseRank): checks the
  // session (PERMISSION_DENIED) and the handover (FAILED_PRECONDITION); the
  // stand-in's session for the rank ends and the rank's lease waits for the
  // new worker.
  absl::Status Release(const pstrain::v1::ReleaseRankRequest& request);

  // Worker `dead.id`'s lease expired: its rank departs (its session ends).
  enum class Departure {
    kJobFailed,   // fewer than training.min_workers remain
    kRolledBack,  // mode allreduce: hosted by a live worker (JobEvents::Lose)
    kGoesOn,      // taken over, or (async) skipped: AbandonStranded next
  };
  Departure Depart(const ExpiredLease& dead);
  // Stops expecting reports of departed ranks nobody can take over any more
  // (the step log excuses them).
  void AbandonStranded();

  const ElasticWorkers& workers() const { return workers_; }

 private:
  // Mode sync: a new worker's registration for `rank` (not live) waits until
  // the rank's stand-in released it.
  absl::Status AwaitHandover(const grpc::ServerContext& context, int rank);
  struct HandoverWait {
    const ElasticRanks* ranks;
    int rank;
  };
  static bool HandoverOver(HandoverWait* wait);
  // The registered rank whose ring peer is at `address`, or -1.
  int RingPeerRank(const std::string& address) const;

  ElasticWorkers workers_;
  const FailurePolicy& policy_;
  Membership& members_;
  LeaseTable& leases_;
  StepLog& step_log_;
  Recovery& recovery_;
  JobEvents& events_;
  SupervisionNotes& notes_;
  absl::Mutex& mu_;
  const absl::Duration wait_cap_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_ELASTIC_RANKS_H_
