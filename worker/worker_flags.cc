#include "worker/worker_flags.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/node_flags.h"
#include "common/process.h"
#include "common/status_macros.h"

// Shared flags (--config, --coordinator, --metrics_port, --tls_*,
// --token_file, --rpc_timeout_s, --startup_timeout_s): common/node_flags.h.
ABSL_FLAG(int, rank, -1, "rank to claim; -1 lets the coordinator assign one");
ABSL_FLAG(
    std::string, rank_from_env, "",
    "take the rank from this environment variable (JOB_COMPLETION_INDEX)");
ABSL_FLAG(std::string, device, "", "auto, cpu or cuda; empty: the job's");
ABSL_FLAG(int, cuda_device, -1, "CUDA device; -1: local rank mod count");
ABSL_FLAG(std::string, cuda_library, "", "libpstrain_cuda.so; empty: beside");
ABSL_FLAG(int, local_rank, -1, "index among this host's workers; -1: rank");
ABSL_FLAG(std::string, metrics_bind, "127.0.0.1", "metrics endpoint address");
ABSL_FLAG(double, report_interval_s, 0.5, "seconds between metric reports");
ABSL_FLAG(std::string, peer_bind, "127.0.0.1", "allreduce: ring peer address");
ABSL_FLAG(int, peer_port, 0, "allreduce: ring peer port; 0 picks a free one");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "allreduce: host name the left neighbour dials (the pod's DNS name)");
ABSL_FLAG(std::string, check_config, "", "check job FILE (data, fit); exit");
ABSL_FLAG(bool, heap_reuse, true,
          "keep freed heap mapped for reuse, in one malloc arena "
          "(worker/allreduce/heap_reuse.h); "
          "false: glibc's defaults, for comparison (a ring's links still "
          "set it)");
ABSL_FLAG(int, compute_threads, 0,
          "threads of the CPU backend's matrix products; 0: "
          "OPENBLAS_NUM_THREADS if set, else the CPUs this process may use "
          "(affinity, capped by its cgroup's CPU quota); psctl run gives each "
          "of its workers max(1, cores / workers)");
ABSL_FLAG(int, openblas_thread_timeout, 0,
          "the CPU backend's idle OpenBLAS threads sleep after 2^N cycles, "
          "4..30; 0: OPENBLAS_THREAD_TIMEOUT if set, else 20 (OpenBLAS's own "
          "default, 28, spins about 0.1 s after every product)");

namespace pstrain {

absl::StatusOr<WorkerNodeOptions> WorkerOptionsFromFlags() {
  WorkerNodeOptions o;
  PS_ASSIGN_OR_RETURN(o.node, NodeOptionsFromFlags(NodeRole::kWorker));
  PS_ASSIGN_OR_RETURN(o.requested_rank,
                      RankFromFlags(absl::GetFlag(FLAGS_rank),
                                    absl::GetFlag(FLAGS_rank_from_env)));
  o.device = absl::GetFlag(FLAGS_device);
  o.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  o.local_rank = absl::GetFlag(FLAGS_local_rank);
  o.cuda_library = absl::GetFlag(FLAGS_cuda_library);
  o.cuda_visible_devices = std::getenv("CUDA_VISIBLE_DEVICES");
  o.report_interval = absl::Seconds(absl::GetFlag(FLAGS_report_interval_s));
  o.peer_bind = absl::GetFlag(FLAGS_peer_bind);
  o.peer_port = absl::GetFlag(FLAGS_peer_port);
  o.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  o.progress_line = isatty(STDERR_FILENO);
  return o;
}

std::string CheckConfigFlag() { return absl::GetFlag(FLAGS_check_config); }

std::string MetricsBindFlag() { return absl::GetFlag(FLAGS_metrics_bind); }

bool HeapReuseFlag() { return absl::GetFlag(FLAGS_heap_reuse); }

absl::StatusOr<int> ComputeThreadsFlag() {
  const int threads = absl::GetFlag(FLAGS_compute_threads);
  if (threads < 0 || threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--compute_threads: expected 0 (automatic) to 1024, got ", threads));
  }
  return threads;
}

absl::StatusOr<int> OpenBlasThreadTimeoutFlag() {
  const int n = absl::GetFlag(FLAGS_openblas_thread_timeout);
  if (n != 0 && (n < 4 || n > 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--openblas_thread_timeout: expected 0 (the environment's or 20) or "
        "4 to 30, got ",
        n));
  }
  return n;
}

}  // namespace pstrain
