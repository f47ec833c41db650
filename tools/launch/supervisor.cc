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
                         number("max_restarts", &plan.max_restarts, false)}) {
    if (!s.ok()) return s;
  }
  auto it = values.find("on_failure");
  if (it != values.end()) {
    if (it->second == "fail") {
      plan.on_failure = LaunchPlan::OnFailure::kFail;
    } else if (it->second == "restart") {
      plan.on_failure = LaunchPlan::OnFailure::kRestart;
    } else if (it->second == "elastic") {
      plan.on_failure = LaunchPlan::OnFailure::kElastic;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": on_failure: '", it->second,
                       "' is not fail, restart or elastic"));
    }
  }
  return plan;
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
  if (plan_.on_failure == LaunchPlan::OnFailure::kElastic &&
      slot.role == Role::kWorker && recoverable) {
    if (restarts_ < plan_.max_restarts) {
      action.restart = ++restarts_;
      action.kind = Action::Kind::kRejoinLater;
      action.delay = absl::Seconds(plan_.lease_s + 1);
      action.log = absl::StrCat(
          exited, "; starting it again in ", plan_.lease_s + 1,
          " s, once its lease has run out (training.on_failure: elastic)");
    } else {
      action.kind = Action::Kind::kGoOnWithout;
      action.log =
          absl::StrCat(exited, "; not restarted (", restarts_,
                       " of training.max_restarts = ", plan_.max_restarts,
                       " used): the job goes on without it "
                       "(training.on_failure: elastic)");
    }
    return action;
  }
  if (plan_.on_failure == LaunchPlan::OnFailure::kRestart &&
      slot.role != Role::kCoordinator && recoverable) {
    ++deaths_[slot];
    if (restarts_ < plan_.max_restarts) {
      action.restart = ++restarts_;
      action.kind = Action::Kind::kRestart;
      return action;
    }
    action.log = absl::StrCat(
        exited, "; no restart left (", restarts_,
        " of training.max_restarts = ", plan_.max_restarts, " used)");
  }
  return action;
}

std::string Supervisor::StartedAgainLog(Slot slot, int old_pid, int status,
                                        int new_pid, int restart) const {
  const bool elastic = plan_.on_failure == LaunchPlan::OnFailure::kElastic;
  return absl::StrCat(
      slot.Name(), " (pid ", old_pid, ") exited with status ", status,
      "; restarted as pid ", new_pid, elastic ? " to rejoin its rank" : "",
      " (restart ", restart, " of ", plan_.max_restarts,
      ", training.on_failure: ", elastic ? "elastic" : "restart", ")");
}

bool Supervisor::OnLost(Slot slot) {
  if (plan_.on_failure != LaunchPlan::OnFailure::kRestart) return false;
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
