// The worker's memory in a real job: the coordinator, one server and one
// worker as separate processes (the binaries users run) on loopback.
#ifndef PSTRAIN_TOOLS_BENCH_JOB_PROCESSES_H_
#define PSTRAIN_TOOLS_BENCH_JOB_PROCESSES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace pstrain::bench {

// Runs `config` (its model; 1 worker, 1 server, `steps` steps) with the
// binaries in bin_dir (coordinator/ps_coordinator, server/ps_server,
// worker/ps_worker) and returns the worker process's peak RSS. Logs and the
// job's output go to `work_dir`.
absl::StatusOr<int64_t> WorkerPeakRss(const std::string& bin_dir,
                                      const std::string& config,
                                      const std::string& work_dir, int steps);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_JOB_PROCESSES_H_
