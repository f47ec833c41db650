// Real jobs for ps_bench: the coordinator, the servers and the workers as
// separate processes (the binaries users run) on loopback, for the worker's
// memory and the whole-job goals (whole_job.h).
#ifndef PSTRAIN_TOOLS_BENCH_JOB_PROCESSES_H_
#define PSTRAIN_TOOLS_BENCH_JOB_PROCESSES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pstrain::bench {

struct JobRunOptions {
  std::string bin_dir;   // coordinator/ps_coordinator, server/ps_server,
                         // worker/ps_worker below it
  std::string config;    // the job file
  std::string work_dir;  // logs, metrics.csv and summary.json go here
  int workers = 1;
  int servers = 1;
  int steps = 50;
  std::vector<std::string> worker_flags;  // extra ps_worker flags
  // Servers and workers on CPUs as psctl run places them
  // (common/cpu_placement.h), a worker's share from its effective
  // --compute_threads. Workers always get the environment psctl run gives
  // them (WorkerEnvironment, common/huge_pages.h).
  bool pin_cores = true;
  absl::Duration timeout = absl::Seconds(120);  // the whole job
};

// The job's steady state, watched while it trained: from the moment step
// 1's row appeared in metrics.csv (step 0 warms up the connections) to the
// moment the last training step's did, the steps completed in between, the
// wall time, and the CPU time all the job's processes (coordinator, servers,
// workers; /proc/PID/stat, all threads) used meanwhile. Start-up, the final
// evaluation and the shutdown fall outside. steps is 0 when the rows were
// not seen (a job that failed, or one of fewer than 3 steps). The workers
// report every step (ps_worker --report_interval_s=0) so that the rows
// appear as the steps end.
struct SteadyWindow {
  int steps = 0;
  double wall_s = 0;
  double cpu_s = 0;
};

struct JobRunResult {
  int64_t worker_peak_rss_bytes = 0;  // the largest worker's VmHWM
  SteadyWindow steady;
};

// The --compute_threads each of `workers` ps_worker processes on this host
// gets, as psctl run gives them: a positive OPENBLAS_NUM_THREADS, else
// max(1, HostCores() / workers) (HostCores: stats.h).
int WorkerComputeThreads(int workers);

// Runs the job to its end; INTERNAL naming the logs when a process fails,
// DEADLINE_EXCEEDED past options.timeout (every process is killed then),
// CANCELLED when ps_bench is asked to stop (StopRequested, common/signals.h)
// while the job trains (every process is sent SIGTERM and reaped first).
absl::StatusOr<JobRunResult> RunJobProcesses(const JobRunOptions& options);

// Runs `config` (its model; 1 worker, 1 server, `steps` steps) with the
// binaries in bin_dir and the worker's default device (the job's
// worker.device: auto in configs/default.yaml, so a CUDA build tries the GPU
// and falls back to the CPU) and returns the worker process's peak RSS.
// Logs and the job's output go to `work_dir`.
absl::StatusOr<int64_t> WorkerPeakRss(const std::string& bin_dir,
                                      const std::string& config,
                                      const std::string& work_dir, int steps);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_JOB_PROCESSES_H_
