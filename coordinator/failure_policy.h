// training.on_failure as a type (docs/failures-and-recovery.md).
//
// What the job does when one of its processes is lost, who may register for
// a slot a live process holds, and which recovery machinery the coordinator,
// the shards and the workers run, decided from the job's plain values, like
// ConsistencyRule decides reads and pushes for a shard. The coordinator
// service, the server node, the worker node and psctl run's launcher
// (tools/launch/supervisor.h) ask the policy; no other file compares
// training.on_failure.
//
//   policy             lost worker          lost server   newcomer for a
//                                                          held slot
//   fail               job fails            job fails     refused
//   restart            roll back            roll back     replaces it
//   elastic (sync,     taken over by a      job fails     rejoins (sync: a
//     async)           live worker                         handover)
//   elastic (ring)     hosted by a live     (none)        takes the rank back
//                      worker + roll back
//
//   policy             psctl run starts a server or worker again
//   fail               never
//   restart            at once, to take its shard or rank back after the
//                       rollback; out of training.max_restarts: job fails
//   elastic (every     a worker, once its lease has run out, to rejoin its
//     mode)            rank; out of training.max_restarts: the job goes on
//                       without it; a server: never
//
// "Roll back": a new generation; once every lost process's replacement is in
// (coordinator/recovery.h) every process restarts from the newest complete
// checkpoint. "Taken over": coordinator/elastic.h. Policies are immutable
// and thread-compatible.
#ifndef PSTRAIN_COORDINATOR_FAILURE_POLICY_H_
#define PSTRAIN_COORDINATOR_FAILURE_POLICY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/elastic.h"
#include "coordinator/leases.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// What losing a process (its lease expired) does to the job.
enum class LossResponse {
  kFailJob,   // the job fails now, naming the process
  kRollBack,  // a new generation awaits its replacement, then every
              // process rolls back to the newest checkpoint
  kTakeOver,  // the rank departs; live workers take its micro-batches over
              // (sync) or the job goes on without them (async)
  kHostAndRollBack,  // a live worker hosts the rank as a second ring member
                     // and every rank rolls back (all-reduce)
};

// Whether psctl run starts again a server or worker process that exited
// (status 1 or a signal, the job live) or that the coordinator declared lost.
enum class Relaunch {
  kNever,     // the job fails with it
  kNow,       // started again at once; the coordinator's rollback takes it
              // back into its shard or rank
  kToRejoin,  // started again after RelaunchDelay (its lease must run out
              // first: a live rank is never given away) to rejoin its rank
};

class FailurePolicy {
 public:
  // The policy of a job with `training` (on_failure, mode, max_restarts,
  // min_workers). An unset on_failure is `fail`.
  static std::unique_ptr<FailurePolicy> ForJob(
      const pstrain::v1::TrainingConfig& training);

  virtual ~FailurePolicy() = default;

  // training.on_failure as the job file spells it: "fail", "restart" or
  // "elastic".
  virtual const char* name() const = 0;

  // --- Coordinator ---------------------------------------------------------
  // A process of kind `holder` is lost.
  virtual LossResponse OnLost(LeaseHolder holder) const = 0;
  // Why a loss under kFailJob fails the job, appended to the cause:
  // " (training.on_failure: fail)".
  virtual std::string FailureNote(LeaseHolder holder) const;
  // A process registering for a shard or rank that a live process holds
  // replaces it (the holder is lost, OnLost). Otherwise membership refuses
  // it, or the elastic membership handles it (Rejoins, RingMembers).
  virtual bool NewcomerReplacesHolder() const { return false; }
  // The elastic membership (coordinator/elastic.h) the job keeps, or none.
  virtual std::optional<ElasticOptions> Elastic(int num_workers) const {
    return std::nullopt;
  }
  // A new worker for a departed rank rejoins under the elastic membership
  // (parameter-server modes).
  virtual bool Rejoins() const { return false; }
  // ... and in sync mode takes the rank back through a handover: the rank's
  // stand-in releases it at a step boundary (ReleaseRank).
  virtual bool HandsOver() const { return false; }
  // Workers register as all-reduce ring members that may host a lost rank
  // (RegisterWorkerRequest.adopt) and take it back.
  virtual bool RingMembers() const { return false; }
  // How many losses the job may recover from by rolling back.
  virtual int64_t max_rollbacks() const { return 0; }

  // "training.on_failure: NAME", for log lines.
  std::string Described() const;

  // --- Job validation (common/job_config.cc) -------------------------------
  // What this policy cannot do with the rest of `config`, whose training is
  // the one the policy was made for and whose other keys are each valid on
  // their own: INVALID_ARGUMENT "training.on_failure: ...", naming the key
  // that conflicts and what to use instead; OK otherwise. Fail: always OK.
  virtual absl::Status CheckJob(const pstrain::v1::JobConfig& config) const {
    return absl::OkStatus();
  }

  // --- Launcher (psctl run, tools/launch/supervisor.h) ----------------------
  // A process of kind `holder` exited or was lost: is it started again?
  virtual Relaunch RelaunchOnExit(LeaseHolder holder) const {
    return Relaunch::kNever;
  }
  // How long after its exit it is started again, for a job whose leases
  // last `lease`.
  virtual absl::Duration RelaunchDelay(absl::Duration lease) const {
    return absl::ZeroDuration();
  }
  // How many processes psctl run may start again in all (every relaunch,
  // of any process, counts one against training.max_restarts).
  virtual int64_t max_relaunches() const { return 0; }
  // A process not started again because none is left: true, the job goes
  // on without it; false, the job fails.
  virtual bool GoesOnWithout(LeaseHolder holder) const { return false; }
  // A process the coordinator declared lost while it still runs (hung) is
  // ended (SIGKILL), so that it is started again like one that died.
  virtual bool EndsLostProcesses() const { return false; }

  // --- Server shards -------------------------------------------------------
  // The highest generation the coordinator may roll a shard back to; 0: the
  // job never rolls shards back.
  virtual uint64_t max_shard_generation() const { return 0; }

  // --- Workers -------------------------------------------------------------
  // Each generation starts from a rollback: a worker of generation > 0 first
  // waits for it, and a failed step waits for the next generation.
  virtual bool RollsBack() const { return false; }
  // A live worker stands in for departed ranks (parameter-server sync).
  virtual bool StandsIn() const { return false; }
  // A live worker hosts departed ranks as second ring members.
  virtual bool HostsRanks() const { return false; }
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_FAILURE_POLICY_H_
