#include "coordinator/rollbacks.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace pstrain {

Rollbacks::Rollbacks(const FailurePolicy* policy,
                     const pstrain::v1::TrainingConfig& training,
                     Recovery* recovery, Membership* members,
                     LeaseTable* leases, StepLog* step_log,
                     pstrain::v1::JobSpec* job, SupervisionNotes* notes,
                     JobEvents* events)
    : policy_(*policy),
      restart_timeout_s_(training.restart_timeout_s()),
      max_restarts_(training.max_restarts()),
      recovery_(*recovery),
      members_(*members),
      leases_(*leases),
      step_log_(*step_log),
      job_(*job),
      notes_(*notes),
      events_(*events) {}

void Rollbacks::Lose(LeaseHolder holder, int id, const std::string& why) {
  const bool server = holder == LeaseHolder::kServer;
  const RunFailure failure{server ? "server" : "worker", server ? -1 : id,
                           server ? id : -1, why};
  if (members_.AnyWorkerDone()) {
    // A finished worker's process is gone: nobody could redo its steps.
    events_.Fail({failure.process, failure.rank, failure.shard,
                  absl::StrCat(why,
                               "; a worker has already finished, so the job "
                               "cannot roll back (training.on_failure: ",
                               policy_.name(), ")")});
    return;
  }
  if (absl::Status st = recovery_.Lost(holder, id, absl::Now()); !st.ok()) {
    events_.Fail({failure.process, failure.rank, failure.shard,
                  absl::StrCat(why, "; ", st.message())});
    return;
  }
  if (server) {
    members_.VacateServer(id);
  } else {
    members_.VacateWorker(id);
  }
  leases_.Release(holder, id);
  job_.set_generation(recovery_.generation());
  notes_.Lost(recovery_.generation(), server, id);
  if (policy_.HostsRanks()) {
    PS_LOG_WARN(
        "worker %d lost (%s); generation %d: waiting up to %g s for its new "
        "ring member, then every rank rolls back to the newest checkpoint "
        "(training.on_failure: elastic)",
        id, why, recovery_.generation(), restart_timeout_s_);
    return;
  }
  PS_LOG_WARN(
      "%s %d lost (%s); generation %d: waiting up to %g s for its "
      "replacement (restart %d of training.max_restarts = %d)",
      server ? "server shard" : "worker", id, why, recovery_.generation(),
      restart_timeout_s_, recovery_.restarts(), max_restarts_);
}

std::optional<RunFailure> Rollbacks::Overdue(absl::Time now) const {
  if (!recovery_.recovering() || now <= recovery_.deadline()) {
    return std::nullopt;
  }
  // The failure names the first process whose replacement did not come.
  const auto [holder, id] = recovery_.FirstMissing();
  const bool server = holder == LeaseHolder::kServer;
  return RunFailure{
      id < 0   ? "coordinator"
      : server ? "server"
               : "worker",
      server ? -1 : id, server ? id : -1,
      absl::StrCat("no replacement for ", recovery_.Missing(),
                   " within training.restart_timeout_s = ", restart_timeout_s_,
                   " s (training.on_failure: ", policy_.name(), ")")};
}

bool Rollbacks::Due() const {
  return recovery_.recovering() && recovery_.AllFilled() &&
         members_.AllServersReady() && members_.AllWorkersRegistered();
}

bool Rollbacks::Finish(uint64_t generation, const std::string& checkpoint,
                       uint64_t step) {
  if (!recovery_.recovering() || recovery_.generation() != generation ||
      !recovery_.AllFilled()) {
    return false;
  }
  recovery_.Done(step);
  // Every worker did the steps below `step`; unreported records of them
  // never come (docs/failures-and-recovery.md, "training.on_failure:
  // restart": what is lost).
  step_log_.RolledBack(step);
  job_.set_resume_from(checkpoint);
  job_.set_start_step(step);
  notes_.RolledBack(generation, step);
  PS_LOG_WARN(
      "rolled back to step %d (generation %d, from %s); training "
      "resumes",
      step, generation, checkpoint.empty() ? "the initial state" : checkpoint);
  return true;
}

}  // namespace pstrain
