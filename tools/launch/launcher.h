// `psctl run`'s processes (docs/failures-and-recovery.md, "Supervision by
// psctl run"): starts the coordinator, waits for its port file, starts the
// servers and workers, and carries out what the Supervisor
// (tools/launch/supervisor.h) decides when one exits or is declared lost,
// until every process has exited. psctl keeps the argument parsing, the dry
// run (plan.env, job.yaml), the job token and the shaped network's setup.
//
// Logs: the coordinator's stderr goes to DIR/logs/coordinator.log and to our
// stderr; a server's or worker's stderr is appended to
// DIR/logs/NAME.log (a --worker-cmd worker's stdout too). psctl's own lines
// go to stderr as "psctl: ...".
//
// Every wait is bounded. SIGINT/SIGTERM stop every process (SIGTERM, then
// SIGKILL 3 s later). Children get SIGKILL if the launcher itself dies.
#ifndef PSTRAIN_TOOLS_LAUNCH_LAUNCHER_H_
#define PSTRAIN_TOOLS_LAUNCH_LAUNCHER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain::launch {

// A process's place on a shaped network (deploy/netshape.sh): the command
// prefix that runs it in its namespace, and the address it binds.
struct NetSlot {
  std::vector<std::string> prefix;
  std::string address;
};

struct LaunchOptions {
  std::string out;          // the run folder (plan.env, job.yaml, logs/)
  std::string bin;          // BIN: coordinator/ps_coordinator, ...
  std::string config;       // the job file servers and workers read
  std::string token_file;   // --token_file of every process
  int compute_threads = 1;  // each ps_worker's --compute_threads
  int cores = 1;            // for the log line only
  // The coordinator's job arguments (--config, overrides, --resume, --out).
  std::vector<std::string> coordinator_args;
  // A --worker-cmd worker's argv; "{COORDINATOR}" and "{RANK}" in any
  // argument are replaced. Empty: ps_worker.
  std::vector<std::string> worker_argv;
  // By process name ("coordinator", "server-K", "worker-R"); empty: loopback.
  std::map<std::string, NetSlot> net;
  bool peer_flags = false;  // all-reduce workers take --peer_bind
  // Each server and ps_worker pinned to CPUs of its own where the host has
  // them (common/cpu_placement.h; the plan is in the log's first line).
  bool pin_cores = true;
};

// Reads a shaped-network table: one line per process, tab-separated
// "NAME ADDRESS PREFIX-ARG...". INVALID_ARGUMENT naming the file and line.
absl::StatusOr<std::map<std::string, NetSlot>> ReadNetTable(
    const std::string& path);

// Reads a NUL-separated argv file (printf '%s\0' "${ARGV[@]}").
absl::StatusOr<std::vector<std::string>> ReadArgvFile(const std::string& path);

// Checks `options` as ps_launch's flags filled them (run folder, binaries,
// job file and token required; compute_threads >= 1) and reads the optional
// worker argv file and shaped-network table into it (empty path: none).
// INVALID_ARGUMENT / NOT_FOUND naming the flag; `options` is then unusable.
absl::Status CompleteLaunchOptions(const std::string& worker_argv_file,
                                   const std::string& net_table,
                                   LaunchOptions* options);

// Runs the job to its end. Returns psctl run's exit status: 0 the job
// succeeded, 1 it failed (the first failure and "job FAILED" logged, a
// killed or hung coordinator's cause recorded in summary.json), 2 it could
// not start, 130 / 143 interrupted by SIGINT / SIGTERM. Call once, from the
// main thread, before any other thread starts (it blocks those signals).
int RunJob(const LaunchOptions& options);

}  // namespace pstrain::launch

#endif  // PSTRAIN_TOOLS_LAUNCH_LAUNCHER_H_
