// ps_launch: psctl run's launcher and supervisor (tools/launch/launcher.h).
// psctl calls it after its dry run; it is not meant to be run by hand.
//
//   ps_launch --run_dir=DIR --bin=BIN --config=FILE --token=FILE
//       [--compute_threads=N] [--cores=C] [--worker_argv_file=FILE]
//       [--net_table=FILE] [--peer_flags] [--pin_cores=false]
//       -- COORDINATOR-JOB-ARGS...
//
// Exit status: psctl run's (0, 1 the job failed, 2 it could not start,
// 130 / 143 SIGINT / SIGTERM).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "tools/launch/launcher.h"

// Not --out / --token_file: tests find a run's processes by those flags.
ABSL_FLAG(std::string, run_dir, "",
          "the run folder: plan.env and job.yaml from the dry run, logs/");
ABSL_FLAG(std::string, bin, "", "the folder of the built binaries");
ABSL_FLAG(std::string, config, "", "the job file servers and workers read");
ABSL_FLAG(std::string, token, "", "the job token file (--token_file)");
ABSL_FLAG(int, compute_threads, 1, "each ps_worker's --compute_threads");
ABSL_FLAG(int, cores, 1, "this host's cores (for the log line)");
ABSL_FLAG(std::string, worker_argv_file, "",
          "a NUL-separated worker command line run instead of ps_worker; "
          "{COORDINATOR} and {RANK} are replaced");
ABSL_FLAG(std::string, net_table, "",
          "shaped links: NAME<tab>ADDRESS<tab>PREFIX-ARG... lines");
ABSL_FLAG(bool, pin_cores, true,
          "pin each server and ps_worker to CPUs of its own "
          "(common/cpu_placement.h); false: the scheduler places them");
ABSL_FLAG(bool, peer_flags, false,
          "ps_worker takes --peer_bind (all-reduce ring peers)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "psctl run's launcher: ps_launch --run_dir=DIR --bin=BIN --config=FILE "
      "--token=FILE [...] -- COORDINATOR-JOB-ARGS...");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  pstrain::launch::LaunchOptions o;
  o.out = absl::GetFlag(FLAGS_run_dir);
  o.bin = absl::GetFlag(FLAGS_bin);
  o.config = absl::GetFlag(FLAGS_config);
  o.token_file = absl::GetFlag(FLAGS_token);
  o.compute_threads = absl::GetFlag(FLAGS_compute_threads);
  o.cores = absl::GetFlag(FLAGS_cores);
  o.peer_flags = absl::GetFlag(FLAGS_peer_flags);
  o.pin_cores = absl::GetFlag(FLAGS_pin_cores);
  o.coordinator_args.assign(rest.begin() + 1, rest.end());
  if (const absl::Status st = pstrain::launch::CompleteLaunchOptions(
          absl::GetFlag(FLAGS_worker_argv_file), absl::GetFlag(FLAGS_net_table),
          &o);
      !st.ok()) {
    std::fprintf(stderr, "psctl: error: %s\n",
                 std::string(st.message()).c_str());
    return 2;
  }
  return pstrain::launch::RunJob(o);
}
