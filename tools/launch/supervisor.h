// What `psctl run` does when one of the job's processes exits or is declared
// lost (docs/failures-and-recovery.md, "Supervision by psctl run"), decided
// from plain values, like ConsistencyRule decides reads and pushes and
// FailurePolicy decides losses inside the job. The launcher
// (tools/launch/launcher.h) gathers the facts, asks, and carries out the
// action; this type starts, signals and reads nothing, so its tests need no
// processes and no sleeps.
//
//   exit of         status        facts                      action
//   coordinator     0             -                          drain (10 s; 30 s
//                                                             with
//                                                             --worker-cmd)
//   server/worker   0             -                          none
//   server/worker   1 or signal   policy relaunches it, job  restart now, or
//                                 live, a restart left       rejoin after
//                                                            lease_s + 1 s
//   server/worker   1 or signal   policy relaunches it, job  go on without it
//                                 live, none left, policy    (elastic: a
//                                 goes on without it         worker)
//   any             other         (or no restart left)       fail the job
//
// Which process is started again, when, how many in all and whether the job
// goes on without it are the job's FailurePolicy's answers
// (coordinator/failure_policy.h, RelaunchOnExit and the questions after
// it): this type never compares training.on_failure itself.
//
// "Job live": the coordinator runs, has not exited 0 (no drain), has written
// no summary.json since the launch, and supervision.txt says no "failed": a
// process exiting after the job failed exits because of it and is not
// restarted. Not thread-safe; one per launch.
#ifndef PSTRAIN_TOOLS_LAUNCH_SUPERVISOR_H_
#define PSTRAIN_TOOLS_LAUNCH_SUPERVISOR_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/failure_policy.h"
#include "proto/pstrain.pb.h"

namespace pstrain::launch {

enum class Role { kCoordinator, kServer, kWorker };

// One slot of the job: the coordinator, server shard `index` or worker rank
// `index`. Restarted processes keep their slot.
struct Slot {
  Role role = Role::kCoordinator;
  int index = 0;

  // "coordinator", "server-K", "worker-R" (psctl's log names).
  std::string Name() const;
  bool operator<(const Slot& o) const {
    return std::make_pair(role, index) < std::make_pair(o.role, o.index);
  }
  bool operator==(const Slot& o) const {
    return role == o.role && index == o.index;
  }
};

// The supervision part of the coordinator's plan (DIR/plan.env, written by
// `ps_coordinator --dry_run --plan_dir=DIR`).
struct LaunchPlan {
  int workers = 0;
  int servers = 0;
  int lease_s = 5;
  // The training fields the job's FailurePolicy is built from: on_failure,
  // max_restarts, mode and min_workers, as far as plan.env has them (unset:
  // fail, 0, unspecified, 0).
  pstrain::v1::TrainingConfig training;
  // network.tcp_congestion_control ("" when the host's): for the launch
  // line's note on the host's congestion control.
  std::string tcp_congestion_control;
};

// Parses plan.env's text (`key=value` lines; unknown keys are ignored).
// workers and servers are required; INVALID_ARGUMENT naming `path` and the
// key when one is missing or malformed (a count, on_failure or mode that
// the job file could not have).
absl::StatusOr<LaunchPlan> ParseLaunchPlan(absl::string_view text,
                                           absl::string_view path);

// What the launcher knows when it asks.
struct JobFacts {
  bool coordinator_alive = true;  // running (not exited, not a zombie)
  bool draining = false;          // the coordinator exited 0
  bool job_over = false;          // summary.json written since the launch
  bool job_failed = false;        // supervision.txt has a "failed" line
};

struct Action {
  enum class Kind {
    kNone,         // an orderly exit: nothing to do
    kDrain,        // the coordinator ended the job: the others must exit
                   // by `delay` from now; stop rejoiners not registered
    kRestart,      // start the slot again now
    kRejoinLater,  // start the worker again after `delay` (its lease must
                   // run out first: a live rank is never given away)
    kGoOnWithout,  // elastic, no restart left: the job goes on without it
    kFailJob,      // stop the job
  };
  Kind kind = Kind::kNone;
  absl::Duration delay = absl::ZeroDuration();
  int restart = 0;  // kRestart, kRejoinLater: which restart of max_restarts
  // psctl's log line for this decision (without "psctl: "): for
  // kRejoinLater, kGoOnWithout, and kFailJob under restart with no restart
  // left; "" otherwise (the launcher writes those lines as it acts).
  std::string log;
};

class Supervisor {
 public:
  Supervisor(LaunchPlan plan, bool worker_cmd)
      : plan_(std::move(plan)),
        policy_(FailurePolicy::ForJob(plan_.training)),
        worker_cmd_(worker_cmd) {}

  // Process `slot` (pid `pid`, for the log line) exited with `status` (its
  // exit code, or 128 + the signal that killed it). Counts restarts.
  Action OnExit(Slot slot, int pid, int status, const JobFacts& facts);

  // The line for the process started again after kRestart or kRejoinLater
  // (`new_pid` replaces `old_pid`, which exited with `status`; `restart`
  // is the action's).
  std::string StartedAgainLog(Slot slot, int old_pid, int status, int new_pid,
                              int restart) const;

  // Whether the launcher reads the coordinator's "lost" notes: the policy
  // ends processes declared lost while they run (EndsLostProcesses).
  bool WatchesLosses() const { return policy_->EndsLostProcesses(); }

  // The coordinator wrote "lost SEQ KIND ID" for `slot`. True when this
  // loss is beyond the deaths of that slot seen so far that were restarted
  // at once (Relaunch::kNow) and the policy ends lost processes: the
  // process running in it is hung and must be ended (SIGKILL) so that it
  // is restarted like one that died.
  bool OnLost(Slot slot);

  int restarts_used() const { return restarts_; }
  const LaunchPlan& plan() const { return plan_; }
  const FailurePolicy& policy() const { return *policy_; }

 private:
  static bool RecoverableStatus(int status) {
    return status == 1 || status > 128;
  }

  // What the policy answers for `slot` (the coordinator: never).
  Relaunch RelaunchOf(Slot slot) const;

  const LaunchPlan plan_;
  const std::unique_ptr<const FailurePolicy> policy_;
  const bool worker_cmd_;
  int restarts_ = 0;
  std::map<Slot, int> deaths_, losses_;  // per slot, under Relaunch::kNow
};

// A "lost SEQ KIND ID" line of supervision.txt: true and its slot; false
// for any other line.
bool ParseLostLine(absl::string_view line, Slot* slot);

// The complete lines of supervision.txt's text `notes`: a process started
// now is after them (RegisteredSince's `from_lines`).
size_t CompleteLines(absl::string_view notes);

// Whether supervision.txt's text `notes` has a "registered worker RANK"
// line for `rank` (the coordinator writes it when a worker process
// registers for its own rank; coordinator/supervision_notes.h) after its
// first `from_lines` complete lines: a worker started again when the notes
// had `from_lines` lines has registered. Only complete lines count.
bool RegisteredSince(absl::string_view notes, size_t from_lines, int rank);

// summary.json's failure message for a coordinator that may have written
// none: it exited with `status` (exit code or 128 + signal).
std::string CoordinatorExitCause(int status);

// How the coordinator looked after the wait for it to record why
// `first_exit` happened: its /proc state letter ('T' or 't': stopped), or
// exited with `exit_status` (>= 0). The message psctl records.
std::string CoordinatorFate(absl::string_view first_exit, char proc_state,
                            int exit_status);

// The "first failure" psctl reports: ps_report's `why`, except that a
// process that died without reporting leaves only the coordinator's stop,
// and then what psctl saw (`first_exit`) says more.
std::string FirstFailure(absl::string_view why, absl::string_view first_exit,
                         absl::string_view summary_path);

}  // namespace pstrain::launch

#endif  // PSTRAIN_TOOLS_LAUNCH_SUPERVISOR_H_
