#include "tools/bench/job_processes.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/cpu_placement.h"
#include "common/huge_pages.h"
#include "common/job_token.h"
#include "common/signals.h"
#include "tools/bench/stats.h"
#include "tools/bench/subprocess.h"

namespace pstrain::bench {

int WorkerComputeThreads(int workers) {
  const char* env = std::getenv("OPENBLAS_NUM_THREADS");
  if (int asked = 0;
      env != nullptr && absl::SimpleAtoi(env, &asked) && asked > 0) {
    return asked;
  }
  return std::max(1, HostCores() / std::max(1, workers));
}

namespace {

// The summed CPU ticks of `pids`, and whether any of them has exited.
struct TreeCpu {
  uint64_t ticks = 0;
  bool exited = false;
};
TreeCpu ReadTreeCpu(const std::vector<pid_t>& pids) {
  TreeCpu t;
  for (pid_t pid : pids) {
    const std::string path = absl::StrCat("/proc/", pid, "/stat");
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    absl::StatusOr<ProcStat> st = ParseProcStat(line, path);
    if (!st.ok() || st->state == 'Z' || st->state == 'X') t.exited = true;
    if (st.ok()) t.ticks += st->cpu_ticks;
  }
  return t;
}

// Watches `csv` (metrics.csv, appended and flushed a row per completed step)
// until the row of step `steps - 1` is in, one of `pids` exits, a stop
// signal (StopRequested) or `deadline`; see SteadyWindow. Polls the file's
// size every 2 ms and reads the processes' CPU when rows were added (and
// every 100 ms for an exit), so the watch itself costs next to nothing of
// the cores it measures.
SteadyWindow WatchSteadyWindow(const std::string& csv, int steps,
                               const std::vector<pid_t>& pids,
                               absl::Time deadline) {
  SteadyWindow w;
  if (steps < 3) return w;
  const double tick_s = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  off_t seen_size = -1;
  int first_rows = 0;  // rows when step 1's was first seen (0: not yet)
  absl::Time first_time;
  uint64_t first_ticks = 0;
  for (int poll = 1; absl::Now() < deadline && !StopRequested(); ++poll) {
    struct stat sb;
    if (stat(csv.c_str(), &sb) == 0 && sb.st_size != seen_size) {
      seen_size = sb.st_size;
      const absl::Time now = absl::Now();
      const TreeCpu cpu = ReadTreeCpu(pids);
      std::ifstream in(csv);
      std::stringstream text;
      text << in.rdbuf();
      const int rows = CsvDataRows(text.str());
      // Rows are steps 0, 1, ...: `rows` >= k + 1 once step k's is in.
      if (first_rows == 0 && rows >= 2) {
        first_rows = rows;
        first_time = now;
        first_ticks = cpu.ticks;
      } else if (first_rows > 0 && rows >= steps) {
        w.steps = rows - first_rows;
        w.wall_s = absl::ToDoubleSeconds(now - first_time);
        w.cpu_s = static_cast<double>(cpu.ticks - first_ticks) * tick_s;
        if (w.steps <= 0) w = SteadyWindow{};
        return w;
      }
      if (cpu.exited) return w;
    } else if (poll % 50 == 0 && ReadTreeCpu(pids).exited) {
      return w;  // checked every 100 ms between rows
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  return w;
}

}  // namespace

absl::StatusOr<JobRunResult> RunJobProcesses(const JobRunOptions& o) {
  const std::string& dir = o.work_dir;
  const std::string port_file = dir + "/coordinator.port";
  std::remove(port_file.c_str());
  // A fresh job token, as psctl run makes (processes refuse to start
  // without one).
  const std::string token_file = dir + "/job.token";
  {
    const mode_t old_mask = umask(077);
    std::ofstream token(token_file, std::ios::trunc);
    token << NewCoordinatorKey() << "\n";
    umask(old_mask);
    if (!token.flush()) {
      return absl::InternalError(
          absl::StrCat("cannot write the job token ", token_file));
    }
  }
  const std::string token_flag = "--token_file=" + token_file;
  const absl::Time end = absl::Now() + o.timeout;
  absl::StatusOr<Child> coordinator = Child::Start(
      {o.bin_dir + "/coordinator/ps_coordinator", "--config=" + o.config,
       "--port=0", "--port_file=" + port_file, "--out=" + dir,
       absl::StrCat("--workers=", o.workers),
       absl::StrCat("--servers=", o.servers), absl::StrCat("--steps=", o.steps),
       "--quiet", token_flag},
      false, "", dir + "/coordinator.log");
  if (!coordinator.ok()) return coordinator.status();
  std::string port;
  const absl::Time port_deadline =
      std::min(end, absl::Now() + absl::Seconds(60));
  while (port.empty() && absl::Now() < port_deadline) {
    std::ifstream in(port_file);
    std::getline(in, port);
    if (port.empty()) absl::SleepFor(absl::Milliseconds(50));
  }
  if (port.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the coordinator wrote no port (see ", dir, "/coordinator.log)"));
  }
  const std::string address = absl::StrCat("127.0.0.1:", port);
  std::vector<Child> servers, workers;
  const std::vector<int> allowed =
      o.pin_cores ? AllowedCpus() : std::vector<int>{};
  for (int k = 0; k < o.servers; ++k) {
    absl::StatusOr<Child> s =
        Child::Start({o.bin_dir + "/server/ps_server", "--config=" + o.config,
                      "--coordinator=" + address, "--port=0",
                      absl::StrCat("--shard=", k), token_flag},
                     false, "", absl::StrCat(dir, "/server-", k, ".log"),
                     ServerCpus(allowed, k));
    if (!s.ok()) return s.status();
    servers.push_back(std::move(*s));
  }
  // The workers' environment as psctl run gives it (ps_launch): their heaps
  // on transparent huge pages unless ours chose (common/huge_pages.h).
  const std::vector<std::string> worker_env = WorkerEnvironment(environ);
  int threads = WorkerComputeThreads(o.workers);
  for (const std::string& flag : o.worker_flags) {  // the last one counts
    absl::string_view value = flag;
    if (absl::ConsumePrefix(&value, "--compute_threads=")) {
      absl::SimpleAtoi(value, &threads);
    }
  }
  for (int r = 0; r < o.workers; ++r) {
    std::vector<std::string> argv = {
        o.bin_dir + "/worker/ps_worker", "--config=" + o.config,
        "--coordinator=" + address, absl::StrCat("--rank=", r), token_flag,
        absl::StrCat("--compute_threads=", threads),
        // Every step's record at once (not batched every 0.5 s), so that
        // metrics.csv grows step by step for WatchSteadyWindow.
        "--report_interval_s=0"};
    argv.insert(argv.end(), o.worker_flags.begin(), o.worker_flags.end());
    absl::StatusOr<Child> w =
        Child::Start(argv, false, "", absl::StrCat(dir, "/worker-", r, ".log"),
                     WorkerCpus(allowed, r, threads), &worker_env);
    if (!w.ok()) return w.status();
    workers.push_back(std::move(*w));
  }
  JobRunResult result;
  {
    std::vector<pid_t> pids = {coordinator->pid()};
    for (const Child& s : servers) pids.push_back(s.pid());
    for (const Child& w : workers) pids.push_back(w.pid());
    result.steady = WatchSteadyWindow(dir + "/metrics.csv", o.steps, pids, end);
  }
  if (StopRequested()) {
    // SIGINT/SIGTERM to ps_bench: the job's processes end within a second
    // of their own SIGTERM; the waits below reap them.
    coordinator->Signal(SIGTERM);
    for (Child& s : servers) s.Signal(SIGTERM);
    for (Child& w : workers) w.Signal(SIGTERM);
    const absl::Time reap = absl::Now() + absl::Seconds(5);
    for (Child& w : workers) (void)w.Wait(reap);
    (void)coordinator->Wait(reap);
    for (Child& s : servers) (void)s.Wait(reap);
    return absl::CancelledError("stopped by a signal");
  }
  std::string failed;
  for (int r = 0; r < o.workers; ++r) {
    absl::StatusOr<Finished> w = workers[r].Wait(end);
    if (!w.ok()) return w.status();
    if (w->exit_code != 0)
      absl::StrAppend(&failed, " worker ", r, " exit ", w->exit_code);
    result.worker_peak_rss_bytes =
        std::max(result.worker_peak_rss_bytes, w->max_rss_bytes);
  }
  absl::StatusOr<Finished> c = coordinator->Wait(end);
  for (Child& s : servers) (void)s.Wait(absl::Now() + absl::Seconds(20));
  if (!c.ok()) return c.status();
  if (c->exit_code != 0)
    absl::StrAppend(&failed, " coordinator exit ", c->exit_code);
  if (!failed.empty()) {
    return absl::InternalError(
        absl::StrCat("the job failed (", failed, "; logs in ", dir, ")"));
  }
  return result;
}

absl::StatusOr<int64_t> WorkerPeakRss(const std::string& bin_dir,
                                      const std::string& config,
                                      const std::string& work_dir, int steps) {
  JobRunOptions o;
  o.bin_dir = bin_dir;
  o.config = config;
  o.work_dir = work_dir;
  o.steps = steps;
  absl::StatusOr<JobRunResult> run = RunJobProcesses(o);
  if (!run.ok()) return run.status();
  return run->worker_peak_rss_bytes;
}

}  // namespace pstrain::bench
