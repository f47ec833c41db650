#include "tools/launch/supervisor.h"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pstrain::launch {

std::string Slot::Name() const {
  switch (role) {
    case Role::kCoordinator:
      return "coordinator";
    case Role::kServer:
      return absl::StrCat("server-", index);
    case Role::kWorker:
      return absl::StrCat("worker-", index);
  }
  return "a process";
}

absl::StatusOr<LaunchPlan> ParseLaunchPlan(absl::string_view text,
                                           absl::string_view path) {
  absl::flat_hash_map<std::string, std::string> values;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (!kv.first.empty()) values[kv.first] = std::string(kv.second);
  }
  LaunchPlan plan;
  int max_restarts = 0, min_workers = 0;
  auto number = [&](const char* key, int* field, bool required) {
    auto it = values.find(key);
    if (it == values.end()) {
      return required ? absl::InvalidArgumentError(
                            absl::StrCat(path, ": no '", key, "=N' line"))
                      : absl::OkStatus();
    }
    if (!absl::SimpleAtoi(it->second, field) || *field < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", key, ": '", it->second, "' is not a count"));
    }
    return absl::OkStatus();
  };
  for (absl::Status s : {number("workers", &plan.workers, true),
                         number("servers", &plan.servers, true),
                         number("lease_s", &plan.lease_s, false),
                         number("max_restarts", &max_restarts, false),
                         number("min_workers", &min_workers, false)}) {
    if (!s.ok()) return s;
  }
  plan.training.set_max_restarts(max_restarts);
  plan.training.set_min_workers(min_workers);
  if (auto mode = values.find("mode"); mode != values.end()) {
    if (mode->second == "sync") {
      plan.training.set_mode(pstrain::v1::MODE_SYNC);
    } else if (mode->second == "async") {
      plan.training.set_mode(pstrain::v1::MODE_ASYNC);
    } else if (mode->second == "allreduce") {
      plan.training.set_mode(pstrain::v1::MODE_ALLREDUCE);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": mode: '", mode->second,
                       "' is not sync, async or allreduce"));
    }
  }
  if (auto cc = values.find("tcp_congestion_control"); cc != values.end()) {
    plan.tcp_congestion_control = cc->second;
  }
  auto it = values.find("on_failure");
  if (it != values.end()) {
    if (it->second == "fail") {
      plan.training.set_on_failure(pstrain::v1::TrainingConfig::FAIL);
    } else if (it->second == "restart") {
      plan.training.set_on_failure(pstrain::v1::TrainingConfig::RESTART);
    } else if (it->second == "elastic") {
      plan.training.set_on_failure(pstrain::v1::TrainingConfig::ELASTIC);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": on_failure: '", it->second,
                       "' is not fail, restart or elastic"));
    }
  }
  return plan;
}

Relaunch Supervisor::RelaunchOf(Slot slot) const {
  switch (slot.role) {
    case Role::kServer:
      return policy_->RelaunchOnExit(LeaseHolder::kServer);
    case Role::kWorker:
      return policy_->RelaunchOnExit(LeaseHolder::kWorker);
    case Role::kCoordinator:
      break;
  }
  return Relaunch::kNever;
}

Action Supervisor::OnExit(Slot slot, int pid, int status,
                          const JobFacts& facts) {
  Action action;
  if (status == 0) {
    if (slot.role == Role::kCoordinator) {
      action.kind = Action::Kind::kDrain;
      // Tearing down PyTorch's interpreter took over 10 s on a loaded
      // 2-core machine.
      action.delay = absl::Seconds(worker_cmd_ ? 30 : 10);
    }
    return action;
  }
  const std::string exited =
      absl::StrCat(slot.Name(), " (pid ", pid, ") exited with status ", status);
  // Once the job is over (or failed) the others leave with status 1
  // because of it: nothing is restarted.
  const bool job_live = facts.coordinator_alive && !facts.draining &&
                        !facts.job_over && !facts.job_failed;
  const bool recoverable = RecoverableStatus(status) && job_live;
  action.kind = Action::Kind::kFailJob;
  const Relaunch relaunch = RelaunchOf(slot);
  if (relaunch == Relaunch::kNever || !recoverable) return action;
  const LeaseHolder holder =
      slot.role == Role::kServer ? LeaseHolder::kServer : LeaseHolder::kWorker;
  const int64_t max = policy_->max_relaunches();
  if (relaunch == Relaunch::kNow) ++deaths_[slot];
  if (restarts_ < max) {
    action.restart = ++restarts_;
    action.delay = policy_->RelaunchDelay(absl::Seconds(plan_.lease_s));
    if (relaunch == Relaunch::kNow) {
      action.kind = Action::Kind::kRestart;
      return action;
    }
    action.kind = Action::Kind::kRejoinLater;
    action.log = absl::StrCat(
        exited, "; starting it again in ", absl::ToInt64Seconds(action.delay),
        " s, once its lease has run out (", policy_->Described(), ")");
    return action;
  }
  if (policy_->GoesOnWithout(holder)) {
    action.kind = Action::Kind::kGoOnWithout;
    action.log = absl::StrCat(exited, "; not restarted (", restarts_,
                              " of training.max_restarts = ", max,
                              " used): the job goes on without it (",
                              policy_->Described(), ")");
    return action;
  }
  action.log = absl::StrCat(exited, "; no restart left (", restarts_,
                            " of training.max_restarts = ", max, " used)");
  return action;
}

std::string Supervisor::StartedAgainLog(Slot slot, int old_pid, int status,
                                        int new_pid, int restart) const {
  const bool rejoin = RelaunchOf(slot) == Relaunch::kToRejoin;
  return absl::StrCat(slot.Name(), " (pid ", old_pid, ") exited with status ",
                      status, "; restarted as pid ", new_pid,
                      rejoin ? " to rejoin its rank" : "", " (restart ",
                      restart, " of ", policy_->max_relaunches(), ", ",
                      policy_->Described(), ")");
}

bool Supervisor::OnLost(Slot slot) {
  if (!policy_->EndsLostProcesses()) return false;
  return ++losses_[slot] > deaths_[slot];
}

bool ParseLostLine(absl::string_view line, Slot* slot) {
  std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
  if (f.size() != 4 || f[0] != "lost") return false;
  int id = 0;
  if (!absl::SimpleAtoi(f[3], &id) || id < 0) return false;
  if (f[2] == "server") {
    *slot = Slot{Role::kServer, id};
  } else if (f[2] == "worker") {
    *slot = Slot{Role::kWorker, id};
  } else {
    return false;
  }
  return true;
}

size_t CompleteLines(absl::string_view notes) {
  return static_cast<size_t>(std::count(notes.begin(), notes.end(), '\n'));
}

bool RegisteredSince(absl::string_view notes, size_t from_lines, int rank) {
  const std::string want = absl::StrCat("registered worker ", rank);
  std::vector<absl::string_view> lines = absl::StrSplit(notes, '\n');
  lines.pop_back();  // after the last '\n': an incomplete line, or ""
  for (size_t i = from_lines; i < lines.size(); ++i) {
    if (lines[i] == want) return true;
  }
  return false;
}

std::string CoordinatorExitCause(int status) {
  if (status > 128) {
    const char* abbrev = sigabbrev_np(status - 128);
    return absl::StrCat(
        "the coordinator process was killed by SIG",
        abbrev != nullptr ? abbrev : absl::StrCat(status - 128));
  }
  return absl::StrCat("the coordinator process exited with status ", status);
}

std::string CoordinatorFate(absl::string_view first_exit, char proc_state,
                            int exit_status) {
  if (proc_state == 'T' || proc_state == 't') {
    return "the coordinator was stopped (SIGSTOP) and answered no one; psctl "
           "ended it";
  }
  if (exit_status >= 0) return CoordinatorExitCause(exit_status);
  return absl::StrCat(
      "the coordinator recorded no cause within network.lease_s + 2 s of: ",
      first_exit, "; psctl ended it");
}

std::string FirstFailure(absl::string_view why, absl::string_view first_exit,
                         absl::string_view summary_path) {
  if (why == "coordinator: coordinator stopped by signal" &&
      !first_exit.empty()) {
    return absl::StrCat(first_exit, " (no cause recorded; see its log)");
  }
  if (why.empty()) return absl::StrCat("none recorded in ", summary_path);
  return std::string(why);
}

}  // namespace pstrain::launch
