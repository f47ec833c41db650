#include "tools/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cpu_placement.h"
#include "common/huge_pages.h"
#include "common/tcp_congestion.h"
#include "tools/launch/supervisor.h"

namespace pstrain::launch {
namespace {

void Log(const std::string& line) {
  std::string text = absl::StrCat("psctl: ", line, "\n");
  (void)!write(STDERR_FILENO, text.data(), text.size());
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z', ...), or '\0'
// when there is no such process.
char ProcState(pid_t pid) {
  std::optional<std::string> stat =
      ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat) return '\0';
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
  size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return '\0';
  return (*stat)[close + 2];
}

// An exit as a shell's $? says it: the exit code, or 128 + the signal.
int ShellStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::optional<struct timespec> ModTime(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return st.st_mtim;
}

bool Newer(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec);
}

// Starts argv with stdin from /dev/null, stdout to `stdout_fd` (-1: ours)
// and stderr to `stderr_fd`. The child gets the default signal mask and
// SIGKILL when we die. Returns the pid, or -1 (errno set).
// `cpus`: the child's CPUs (sched_setaffinity before exec); null or empty:
// this process's. `env`: the child's environment ("NAME=VALUE"); null: ours.
pid_t Spawn(const std::vector<std::string>& argv, int stdout_fd, int stderr_fd,
            const cpu_set_t* cpus = nullptr,
            const std::vector<std::string>* env = nullptr) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  if (env != nullptr) {
    for (const std::string& e : *env)
      envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // The child: async-signal-safe calls only until exec.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  if (stdout_fd >= 0) dup2(stdout_fd, STDOUT_FILENO);
  if (stderr_fd >= 0) dup2(stderr_fd, STDERR_FILENO);
  if (cpus != nullptr && CPU_COUNT(cpus) > 0 &&
      sched_setaffinity(0, sizeof(*cpus), cpus) != 0) {
    static const char kUnpinned[] =
        "psctl: cannot pin to the planned CPUs (sched_setaffinity); runs "
        "unpinned\n";
    (void)!write(STDERR_FILENO, kUnpinned, sizeof(kUnpinned) - 1);
  }
  if (env != nullptr) {
    execvpe(args[0], args.data(), envp.data());
  } else {
    execvp(args[0], args.data());
  }
  static const char kFailed[] = "psctl: cannot execute ";
  (void)!write(STDERR_FILENO, kFailed, sizeof(kFailed) - 1);
  (void)!write(STDERR_FILENO, args[0], strlen(args[0]));
  (void)!write(STDERR_FILENO, "\n", 1);
  _exit(127);
}

// Runs argv to its end within `timeout`, returning its stdout; stderr to
// ours, or to /dev/null with `quiet`. nullopt when it failed or ran out of
// time (then it is killed).
std::optional<std::string> RunTool(const std::vector<std::string>& argv,
                                   absl::Duration timeout, bool quiet) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  int null_fd = quiet ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
  const pid_t pid = Spawn(argv, fds[1], null_fd);
  close(fds[1]);
  if (null_fd >= 0) close(null_fd);
  if (pid < 0) {
    close(fds[0]);
    return std::nullopt;
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::string output;
  char buffer[4096];
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) break;
    struct pollfd p = {fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(ms)) <= 0) continue;
    const ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n > 0) {
      output.append(buffer, n);
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::nullopt;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (ShellStatus(status) != 0) return std::nullopt;
  return output;
}

// Copies the coordinator's stderr to its log and to ours until end of file
// (every writer closed it); `done` then.
void Tee(int from, int log_fd, std::shared_ptr<absl::Notification> done) {
  char buffer[4096];
  while (true) {
    const ssize_t n = read(from, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    (void)!write(log_fd, buffer, n);
    (void)!write(STDERR_FILENO, buffer, n);
  }
  close(from);
  close(log_fd);
  done->Notify();
}

class Job {
 public:
  Job(const LaunchOptions& options, LaunchPlan plan)
      : o_(options),
        logs_(options.out + "/logs"),
        supervision_(options.out + "/supervision.txt"),
        supervisor_(plan, !options.worker_argv.empty()),
        allowed_cpus_(options.pin_cores ? AllowedCpus() : std::vector<int>{}),
        worker_env_(WorkerEnvironment(environ)) {}

  int Run();

 private:
  struct Rejoin {
    Slot slot;
    pid_t old_pid;
    int status;
    int restart;
    absl::Time at;
  };
  struct Rejoiner {
    int rank;
    size_t notes_from;  // supervision.txt's lines before its start
  };

  // Why the main loop stopped.
  enum class End { kAllExited, kFailed, kSignal };

  std::string LogPath(Slot slot) const {
    return absl::StrCat(logs_, "/", slot.Name(), ".log");
  }
  // The CPUs `slot` is pinned to (common/cpu_placement.h); empty: unpinned
  // (--pin_cores=false, a one-CPU host, a worker using every core, or a
  // --worker-cmd worker, whose own threads we do not know).
  std::vector<int> CpusOf(Slot slot) const {
    if (slot.role == Role::kServer) {
      return ServerCpus(allowed_cpus_, slot.index);
    }
    if (slot.role != Role::kWorker || !o_.worker_argv.empty()) return {};
    return WorkerCpus(allowed_cpus_, slot.index, o_.compute_threads);
  }
  // "servers on CPUs 1 | 0, workers on CPUs 0 | 1 | 0 | 1" (or "unpinned").
  std::string PlacementText(int servers, int workers) const {
    auto list = [&](Role role, int n) {
      std::vector<std::string> parts;
      for (int i = 0; i < n; ++i) {
        parts.push_back(CpuListText(CpusOf({role, i})));
      }
      return absl::StrJoin(parts, " | ");
    };
    return absl::StrCat("servers on CPUs ", list(Role::kServer, servers),
                        ", workers on CPUs ", list(Role::kWorker, workers));
  }
  std::vector<std::string> Prefix(const std::string& name) const {
    auto it = o_.net.find(name);
    return it == o_.net.end() ? std::vector<std::string>{} : it->second.prefix;
  }
  std::string Address(const std::string& name) const {
    auto it = o_.net.find(name);
    return it == o_.net.end() ? "" : it->second.address;
  }
  std::vector<std::string> Argv(Slot slot) const;
  // Starts `slot` (its stderr appended to its log); the pid, or -1 (logged).
  pid_t Start(Slot slot);
  int StartCoordinator();
  // Waits up to 100 ms for a signal; a stop signal sets stop_signal_.
  void AwaitSignal(absl::Duration timeout);
  JobFacts Facts() const;
  bool JobOver() const;
  // Handles one exit; false when the job must stop (failed_).
  bool OnExit(pid_t pid, int status);
  void Fail(Slot slot, pid_t pid, int status);
  void EndLostProcesses();
  void StopUnregisteredRejoiners();
  void StartDueRejoins();
  void StopAll();
  int Report(End end);

  const LaunchOptions& o_;
  const std::string logs_, supervision_;
  Supervisor supervisor_;
  std::string addr_;
  struct timespec launched_ = {0, 0};  // summary.json newer: the job is over
  std::map<pid_t, Slot> live_;
  std::map<Slot, pid_t> current_;
  pid_t coord_pid_ = -1;
  absl::Time coord_start_;
  std::optional<int> coord_status_;  // once reaped
  std::shared_ptr<absl::Notification> tee_done_;
  bool draining_ = false;
  absl::Time drain_deadline_;
  std::vector<Rejoin> rejoins_;
  std::map<pid_t, Rejoiner> rejoiners_;
  size_t lost_handled_ = 0;
  absl::Time next_supervision_read_ = absl::InfinitePast();
  int stop_signal_ = 0;
  std::string first_exit_, coord_fate_;
  double coord_wall_s_ = 0;
  const std::vector<int> allowed_cpus_;  // empty: nothing is pinned
  // A ps_worker's environment: ours, its heap on huge pages unless ours
  // chose (WorkerEnvironment, common/huge_pages.h).
  const std::vector<std::string> worker_env_;
};

std::vector<std::string> Job::Argv(Slot slot) const {
  const std::string name = slot.Name();
  std::vector<std::string> argv = Prefix(name);
  const std::string address = Address(name);
  const std::string token = "--token_file=" + o_.token_file;
  if (slot.role == Role::kServer) {
    for (std::string a : {o_.bin + "/server/ps_server", "--config=" + o_.config,
                          "--coordinator=" + addr_, std::string("--port=0"),
                          absl::StrCat("--shard=", slot.index),
                          std::string("--metrics_port=0"), token}) {
      argv.push_back(a);
    }
    if (!address.empty()) {
      argv.push_back("--bind=" + address);
      argv.push_back("--advertise_host=" + address);
    }
    return argv;
  }
  if (!o_.worker_argv.empty()) {
    for (const std::string& a : o_.worker_argv) {
      argv.push_back(absl::StrReplaceAll(
          a, {{"{COORDINATOR}", addr_}, {"{RANK}", absl::StrCat(slot.index)}}));
    }
    return argv;
  }
  for (std::string a :
       {o_.bin + "/worker/ps_worker", "--config=" + o_.config,
        "--coordinator=" + addr_, absl::StrCat("--rank=", slot.index),
        std::string("--metrics_port=0"), token,
        absl::StrCat("--compute_threads=", o_.compute_threads)}) {
    argv.push_back(a);
  }
  if (!address.empty() && o_.peer_flags) {
    argv.push_back("--peer_bind=" + address);
    argv.push_back("--advertise_host=" + address);
  }
  return argv;
}

pid_t Job::Start(Slot slot) {
  const std::string log = LogPath(slot);
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    Log(absl::StrCat("cannot open ", log, ": ", strerror(errno)));
    return -1;
  }
  const bool cmd = slot.role == Role::kWorker && !o_.worker_argv.empty();
  const bool ps_worker = slot.role == Role::kWorker && !cmd;
  const cpu_set_t cpus = CpuSetOf(CpusOf(slot));
  const pid_t pid = Spawn(Argv(slot), cmd ? fd : -1, fd, &cpus,
                          ps_worker ? &worker_env_ : nullptr);
  const int spawn_errno = errno;
  close(fd);
  if (pid < 0) {
    Log(absl::StrCat("cannot start ", slot.Name(), ": ",
                     strerror(spawn_errno)));
    return -1;
  }
  live_[pid] = slot;
  current_[slot] = pid;
  return pid;
}

// 0 once the coordinator listens, else psctl's exit status (2).
int Job::StartCoordinator() {
  const std::string port_file = logs_ + "/coordinator.port";
  std::remove(port_file.c_str());
  std::remove(supervision_.c_str());
  std::vector<std::string> argv = Prefix("coordinator");
  argv.push_back(o_.bin + "/coordinator/ps_coordinator");
  argv.insert(argv.end(), o_.coordinator_args.begin(),
              o_.coordinator_args.end());
  for (std::string a : {"--port=0", "--metrics_port=0"}) argv.push_back(a);
  argv.push_back("--port_file=" + port_file);
  argv.push_back("--token_file=" + o_.token_file);
  if (!Address("coordinator").empty()) {
    argv.push_back("--bind=" + Address("coordinator"));
  }
  const std::string log = logs_ + "/coordinator.log";
  int log_fd =
      open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int fds[2];
  if (log_fd < 0 || pipe2(fds, O_CLOEXEC) != 0) {
    Log(absl::StrCat("error: cannot open ", log, ": ", strerror(errno)));
    return 2;
  }
  coord_start_ = absl::Now();
  coord_pid_ = Spawn(argv, -1, fds[1]);
  close(fds[1]);
  if (coord_pid_ < 0) {
    Log(absl::StrCat("error: cannot start the coordinator: ", strerror(errno)));
    close(fds[0]);
    close(log_fd);
    return 2;
  }
  live_[coord_pid_] = Slot{Role::kCoordinator, 0};
  current_[Slot{Role::kCoordinator, 0}] = coord_pid_;
  tee_done_ = std::make_shared<absl::Notification>();
  std::thread(Tee, fds[0], log_fd, tee_done_).detach();
  // As psctl always did: up to 10 s for the port file.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    std::optional<std::string> port = ReadFile(port_file);
    if (port && !absl::StripAsciiWhitespace(*port).empty()) {
      const std::string host =
          Address("coordinator").empty() ? "127.0.0.1" : Address("coordinator");
      addr_ = absl::StrCat(host, ":", absl::StripAsciiWhitespace(*port));
      return 0;
    }
    int status;
    if (waitpid(coord_pid_, &status, WNOHANG) == coord_pid_) {
      live_.erase(coord_pid_);
      Log(absl::StrCat("error: coordinator exited early (see ", log, ")"));
      return 2;
    }
    if (absl::Now() >= deadline) {
      Log("error: coordinator did not start listening");
      return 2;
    }
    AwaitSignal(absl::Milliseconds(50));
    if (stop_signal_ != 0) return 0;
  }
}

void Job::AwaitSignal(absl::Duration timeout) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&set, s);
  const struct timespec ts = absl::ToTimespec(timeout);
  const int s = sigtimedwait(&set, nullptr, &ts);
  if ((s == SIGINT || s == SIGTERM) && stop_signal_ == 0) stop_signal_ = s;
}

bool Job::JobOver() const {
  std::optional<struct timespec> summary = ModTime(o_.out + "/summary.json");
  return summary && Newer(*summary, launched_);
}

JobFacts Job::Facts() const {
  JobFacts facts;
  facts.coordinator_alive = live_.count(coord_pid_) != 0 &&
                            ProcState(coord_pid_) != 'Z' &&
                            ProcState(coord_pid_) != '\0';
  facts.draining = draining_;
  facts.job_over = JobOver();
  std::optional<std::string> notes = ReadFile(supervision_);
  if (notes) {
    for (absl::string_view line : absl::StrSplit(*notes, '\n')) {
      if (line == "failed") facts.job_failed = true;
    }
  }
  return facts;
}

bool Job::OnExit(pid_t pid, int status) {
  const Slot slot = live_[pid];
  live_.erase(pid);
  if (slot.role == Role::kCoordinator) coord_status_ = status;
  const Action action = supervisor_.OnExit(slot, pid, status, Facts());
  if (!action.log.empty()) Log(action.log);
  switch (action.kind) {
    case Action::Kind::kNone:
    case Action::Kind::kGoOnWithout:
      return true;
    case Action::Kind::kDrain:
      draining_ = true;
      drain_deadline_ = absl::Now() + action.delay;
      rejoins_.clear();
      StopUnregisteredRejoiners();
      return true;
    case Action::Kind::kRestart: {
      const pid_t now = Start(slot);
      if (now < 0) break;
      Log(supervisor_.StartedAgainLog(slot, pid, status, now, action.restart));
      return true;
    }
    case Action::Kind::kRejoinLater:
      rejoins_.push_back(
          {slot, pid, status, action.restart, absl::Now() + action.delay});
      return true;
    case Action::Kind::kFailJob:
      break;
  }
  Fail(slot, pid, status);
  return false;
}

void Job::Fail(Slot slot, pid_t pid, int status) {
  first_exit_ =
      absl::StrCat(slot.Name(), " (pid ", pid, ") exited with status ", status);
  if (slot.role != Role::kCoordinator && !coord_status_) {
    // Give the coordinator time to record the cause (the process's own
    // report, or its lease running out) before the others are stopped, so
    // summary.json names it.
    const int wait_s = supervisor_.plan().lease_s + 2;
    Log(absl::StrCat(first_exit_, "; waiting up to ", wait_s,
                     " s for the coordinator to record why"));
    const absl::Time until = absl::Now() + absl::Seconds(wait_s);
    while (absl::Now() < until && stop_signal_ == 0) {
      int st;
      if (waitpid(coord_pid_, &st, WNOHANG) == coord_pid_) {
        live_.erase(coord_pid_);
        coord_status_ = ShellStatus(st);
        break;
      }
      AwaitSignal(absl::Milliseconds(100));
    }
  }
  coord_wall_s_ = absl::ToDoubleSeconds(absl::Now() - coord_start_);
  if (slot.role == Role::kCoordinator) {
    coord_fate_ = CoordinatorExitCause(status);
  } else {
    coord_fate_ = CoordinatorFate(first_exit_,
                                  coord_status_ ? '\0' : ProcState(coord_pid_),
                                  coord_status_.value_or(-1));
  }
  Log(absl::StrCat(first_exit_, "; stopping the job"));
}

void Job::EndLostProcesses() {
  std::optional<std::string> notes = ReadFile(supervision_);
  if (!notes) return;
  std::vector<absl::string_view> lost;
  for (absl::string_view line : absl::StrSplit(*notes, '\n')) {
    if (absl::StartsWith(line, "lost ")) lost.push_back(line);
  }
  for (; lost_handled_ < lost.size(); ++lost_handled_) {
    Slot slot;
    if (!ParseLostLine(lost[lost_handled_], &slot)) continue;
    if (!supervisor_.OnLost(slot)) continue;
    auto it = current_.find(slot);
    if (it == current_.end() || live_.count(it->second) == 0) continue;
    const pid_t p = it->second;
    Log(absl::StrCat("the coordinator declared ", slot.Name(),
                     " lost (its lease ran out) but pid ", p,
                     " still runs (state ", std::string(1, ProcState(p)),
                     "): ending it (SIGKILL) so that it is started again"));
    kill(p, SIGKILL);
  }
}

// A worker started again to rejoin its rank that had not registered (the
// coordinator noted no "registered worker RANK" since it started) when the
// job ended is not part of it: it would wait for the coordinator until its
// start-up timeout. SIGTERM: it exits 0 within a second.
void Job::StopUnregisteredRejoiners() {
  const std::string notes = ReadFile(supervision_).value_or("");
  for (const auto& [pid, r] : rejoiners_) {
    if (live_.count(pid) == 0) continue;
    const Slot slot{Role::kWorker, r.rank};
    if (RegisteredSince(notes, r.notes_from, r.rank)) continue;
    Log(absl::StrCat(slot.Name(), " (pid ", pid,
                     "), started again to rejoin its rank, had not registered "
                     "when the job ended: stopping it"));
    kill(pid, SIGTERM);
  }
}

void Job::StartDueRejoins() {
  const absl::Time now = absl::Now();
  for (auto it = rejoins_.begin(); it != rejoins_.end();) {
    if (it->at > now) {
      ++it;
      continue;
    }
    const Rejoin r = *it;
    it = rejoins_.erase(it);
    // The job may have ended meanwhile: a late worker would exit 3.
    const JobFacts facts = Facts();
    if (!facts.coordinator_alive || facts.job_over) continue;
    const size_t from = CompleteLines(ReadFile(supervision_).value_or(""));
    const pid_t pid = Start(r.slot);
    if (pid < 0) continue;
    rejoiners_[pid] = Rejoiner{r.slot.index, from};
    Log(supervisor_.StartedAgainLog(r.slot, r.old_pid, r.status, pid,
                                    r.restart));
  }
}

void Job::StopAll() {
  for (const auto& [pid, slot] : live_) kill(pid, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  while (!live_.empty()) {
    for (auto it = live_.begin(); it != live_.end();) {
      int st;
      if (waitpid(it->first, &st, WNOHANG) == it->first) {
        if (it->first == coord_pid_) coord_status_ = ShellStatus(st);
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
    if (live_.empty() || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  for (const auto& [pid, slot] : live_) {
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);  // SIGKILL cannot be caught: bounded
  }
  live_.clear();
  // The coordinator's last lines, before ours.
  if (tee_done_) tee_done_->WaitForNotificationWithTimeout(absl::Seconds(2));
}

int Job::Run() {
  struct stat st;
  const std::string marker = logs_ + "/.launched";
  std::ofstream(marker).flush();
  if (stat(marker.c_str(), &st) == 0) launched_ = st.st_mtim;
  if (int rc = StartCoordinator(); rc != 0) {
    StopAll();
    return rc;
  }
  if (stop_signal_ == 0) {
    const LaunchPlan& plan = supervisor_.plan();
    Log(absl::StrCat(
        "coordinator at ", addr_, "; starting ", plan.servers, " servers and ",
        plan.workers, " workers (matrix products on ", o_.compute_threads,
        " of the ", o_.cores, " cores each; ",
        PlacementText(plan.servers, plan.workers), "); output in ", o_.out));
    // (Mode allreduce has no servers: nothing for the key to reach.)
    if (plan.servers > 0 && !plan.tcp_congestion_control.empty()) {
      Log(absl::StrCat("servers' connections on TCP congestion control ",
                       plan.tcp_congestion_control,
                       " (network.tcp_congestion_control)"));
    } else if (const std::string cc = TcpCongestionControl();
               plan.servers > 0 && PacesEveryConnection(cc)) {
      Log(absl::StrCat(
          "note: this host's TCP congestion control is ", cc,
          ", which paces loopback connections too; same-host jobs pulled "
          "1.2-1.4x faster with network.tcp_congestion_control: cubic "
          "(docs/performance-log.md, \"The servers' TCP congestion control, "
          "a job key\")"));
    }
    for (int i = 0; i < plan.servers; ++i) {
      std::ofstream(LogPath({Role::kServer, i}), std::ios::trunc).flush();
      Start({Role::kServer, i});
    }
    for (int i = 0; i < plan.workers; ++i) {
      std::ofstream(LogPath({Role::kWorker, i}), std::ios::trunc).flush();
      Start({Role::kWorker, i});
    }
  }
  End end = End::kAllExited;
  const bool watch_losses = supervisor_.WatchesLosses();
  while (!live_.empty() || !rejoins_.empty()) {
    if (stop_signal_ != 0) {
      end = End::kSignal;
      break;
    }
    int wait_status;
    const pid_t pid = waitpid(-1, &wait_status, WNOHANG);
    if (pid > 0) {
      if (live_.count(pid) == 0) continue;
      if (!OnExit(pid, ShellStatus(wait_status))) {
        end = End::kFailed;
        break;
      }
      continue;
    }
    if (stop_signal_ == 0 && watch_losses && !draining_ &&
        absl::Now() >= next_supervision_read_) {
      // The coordinator may declare lost a process that still runs (hung,
      // e.g. SIGSTOPped): its notes are read every second.
      next_supervision_read_ = absl::Now() + absl::Seconds(1);
      EndLostProcesses();
    }
    StartDueRejoins();
    if (draining_ && absl::Now() >= drain_deadline_ && !live_.empty()) {
      std::vector<std::string> pids;
      for (const auto& [p, slot] : live_) pids.push_back(absl::StrCat(p));
      Log(absl::StrCat("processes ", absl::StrJoin(pids, " "),
                       " did not exit after the job ended"));
      end = End::kFailed;
      break;
    }
    AwaitSignal(absl::Milliseconds(100));
  }
  if (end == End::kSignal) {
    Log(stop_signal_ == SIGINT ? "interrupted: stopping every process"
                               : "terminated: stopping every process");
  }
  StopAll();
  return Report(end);
}

int Job::Report(End end) {
  if (end == End::kSignal) return stop_signal_ == SIGINT ? 130 : 143;
  if (end == End::kAllExited) return 0;
  const std::string report = o_.bin + "/tools/report/ps_report";
  // The coordinator records the first failure's cause in summary.json; when
  // it died or hung first, what psctl saw of it is recorded.
  if (!coord_fate_.empty() && !JobOver()) {
    if (!RunTool({report, "record-failure", o_.out, "coordinator", coord_fate_,
                  "--wall-s", absl::StrFormat("%.3f", coord_wall_s_)},
                 absl::Seconds(30), /*quiet=*/false)) {
      Log(absl::StrCat("could not write ", o_.out, "/summary.json"));
    }
  }
  std::string why =
      RunTool({report, "failure", o_.out}, absl::Seconds(30), /*quiet=*/true)
          .value_or("");
  absl::StripTrailingAsciiWhitespace(&why);
  Log(absl::StrCat("first failure: ",
                   FirstFailure(why, first_exit_, o_.out + "/summary.json")));
  Log(absl::StrCat("job FAILED; logs in ", logs_));
  return 1;
}

}  // namespace

absl::StatusOr<std::map<std::string, NetSlot>> ReadNetTable(
    const std::string& path) {
  std::optional<std::string> text = ReadFile(path);
  if (!text) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::map<std::string, NetSlot> table;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++number;
    if (line.empty()) continue;
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() < 2 || f[0].empty() || f[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", number, ": want NAME<tab>ADDRESS<tab>PREFIX-ARG..."));
    }
    table[f[0]] = NetSlot{{f.begin() + 2, f.end()}, f[1]};
  }
  return table;
}

absl::Status CompleteLaunchOptions(const std::string& worker_argv_file,
                                   const std::string& net_table,
                                   LaunchOptions* o) {
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string&>{"run_dir", o->out},
        {"bin", o->bin},
        {"config", o->config},
        {"token", o->token_file}}) {
    if (value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ps_launch: --", flag, " is required"));
    }
  }
  if (o->compute_threads < 1) {
    return absl::InvalidArgumentError(
        "ps_launch: --compute_threads must be >= 1");
  }
  if (!worker_argv_file.empty()) {
    auto argv = ReadArgvFile(worker_argv_file);
    if (!argv.ok()) {
      return absl::Status(
          argv.status().code(),
          absl::StrCat("--worker_argv_file: ", argv.status().message()));
    }
    o->worker_argv = *std::move(argv);
  }
  if (!net_table.empty()) {
    auto table = ReadNetTable(net_table);
    if (!table.ok()) {
      return absl::Status(
          table.status().code(),
          absl::StrCat("--net_table: ", table.status().message()));
    }
    o->net = *std::move(table);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadArgvFile(const std::string& path) {
  std::optional<std::string> text = ReadFile(path);
  if (!text) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::vector<std::string> argv = absl::StrSplit(*text, '\0');
  if (!argv.empty() && argv.back().empty()) argv.pop_back();
  if (argv.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no command"));
  }
  return argv;
}

int RunJob(const LaunchOptions& options) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  const std::string plan_path = options.out + "/plan.env";
  std::optional<std::string> text = ReadFile(plan_path);
  if (!text) {
    Log(absl::StrCat("error: no plan: cannot read ", plan_path));
    return 2;
  }
  absl::StatusOr<LaunchPlan> plan = ParseLaunchPlan(*text, plan_path);
  if (!plan.ok()) {
    Log(absl::StrCat("error: ", plan.status().message()));
    return 2;
  }
  Job job(options, *plan);
  return job.Run();
}

}  // namespace pstrain::launch
