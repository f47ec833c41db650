#include "tools/bench/job_processes.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tools/bench/subprocess.h"

namespace pstrain::bench {

int HostCores() {
  cpu_set_t cpus;
  return sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
}

int WorkerComputeThreads(int workers) {
  const char* env = std::getenv("OPENBLAS_NUM_THREADS");
  if (int asked = 0;
      env != nullptr && absl::SimpleAtoi(env, &asked) && asked > 0) {
    return asked;
  }
  return std::max(1, HostCores() / std::max(1, workers));
}

absl::StatusOr<JobRunResult> RunJobProcesses(const JobRunOptions& o) {
  const std::string& dir = o.work_dir;
  const std::string port_file = dir + "/coordinator.port";
  std::remove(port_file.c_str());
  const absl::Time end = absl::Now() + o.timeout;
  absl::StatusOr<Child> coordinator = Child::Start(
      {o.bin_dir + "/coordinator/ps_coordinator", "--config=" + o.config,
       "--port=0", "--port_file=" + port_file, "--out=" + dir,
       absl::StrCat("--workers=", o.workers),
       absl::StrCat("--servers=", o.servers), absl::StrCat("--steps=", o.steps),
       "--quiet"},
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
  for (int k = 0; k < o.servers; ++k) {
    absl::StatusOr<Child> s = Child::Start(
        {o.bin_dir + "/server/ps_server", "--config=" + o.config,
         "--coordinator=" + address, "--port=0", absl::StrCat("--shard=", k)},
        false, "", absl::StrCat(dir, "/server-", k, ".log"));
    if (!s.ok()) return s.status();
    servers.push_back(std::move(*s));
  }
  const int threads = WorkerComputeThreads(o.workers);
  for (int r = 0; r < o.workers; ++r) {
    std::vector<std::string> argv = {
        o.bin_dir + "/worker/ps_worker", "--config=" + o.config,
        "--coordinator=" + address, absl::StrCat("--rank=", r),
        absl::StrCat("--compute_threads=", threads)};
    argv.insert(argv.end(), o.worker_flags.begin(), o.worker_flags.end());
    absl::StatusOr<Child> w =
        Child::Start(argv, false, "", absl::StrCat(dir, "/worker-", r, ".log"));
    if (!w.ok()) return w.status();
    workers.push_back(std::move(*w));
  }
  JobRunResult result;
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
