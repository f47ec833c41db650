// ps_worker: one worker (worker/worker_node.h): flags -> options
// (worker_flags.cc) -> Run. Exit 0: its share of the job is done; 1: failure
// (the coordinator is told why); 2: bad flags or a job that cannot run; 3:
// job already over.
#include <string>

#include "absl/flags/parse.h"
#include "common/huge_pages.h"
#include "common/logging.h"
#include "common/mutex_mode.h"
#include "common/process.h"
#include "common/signals.h"
#include "worker/allreduce/heap_reuse.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/data_check.h"
#include "worker/worker_flags.h"
#include "worker/worker_node.h"

namespace pstrain {
namespace {

int Main() {
  // First: SIGTERM during start-up is a clean stop too.
  InstallStopSignalHandlers();
  const std::string check = CheckConfigFlag();
  if (!check.empty()) return CheckJobFileMain(check);
  MetricsRegistry metrics;
  absl::StatusOr<WorkerNodeOptions> options = WorkerOptionsFromFlags();
  if (!options.ok()) return FailStartup("ps_worker", options.status());
  const absl::StatusOr<int> threads = ComputeThreadsFlag();
  if (!threads.ok()) return FailStartup("ps_worker", threads.status());
  const absl::StatusOr<int> blas_timeout = OpenBlasThreadTimeoutFlag();
  if (!blas_timeout.ok()) {
    return FailStartup("ps_worker", blas_timeout.status());
  }
  // Before any backend is created: OpenBLAS's idle threads sleep soon
  // after a step's last product instead of spinning through its pull and
  // push (cpu_backend.h).
  const absl::StatusOr<int> timeout = LimitOpenBlasSpin(*blas_timeout);
  const int blas_threads = SetCpuComputeThreads(*threads);
  if (timeout.ok()) {
    PS_LOG_INFO(
        "OpenBLAS: %d threads; idle ones sleep after 2^%d cycles "
        "(OPENBLAS_THREAD_TIMEOUT)",
        blas_threads, *timeout);
  } else {
    PS_LOG_WARN("%s", timeout.status().ToString());
  }
  // Every step moves the model through gRPC's buffers both ways: reuse
  // freed heap rather than fresh pages (heap_reuse.h; the ring did so
  // already). Measured with 4 workers on 2 cores: about 5 % off the step.
  if (HeapReuseFlag()) {
    if (absl::Status st = KeepFreedHeapForReuse(); !st.ok()) {
      PS_LOG_WARN("%s (freed buffers go back to the kernel)", st.ToString());
    }
  }
  PS_LOG_INFO("heap: %s", HeapPagesText());  // common/huge_pages.h
  options->metrics = &metrics;
  absl::StatusOr<std::unique_ptr<WorkerNode>> worker =
      WorkerNode::Create(*std::move(options));
  if (!worker.ok()) return FailStartup("ps_worker", worker.status());
  SetLogRole("worker");
  auto http = MaybeServeMetrics(&metrics, MetricsBindFlag(),
                                (*worker)->options().node.metrics_port);
  absl::Status st = http.ok() ? (*worker)->Run(StopRequested) : http.status();
  if (!st.ok()) PS_LOG_ERROR("%s", st.message());
  ExitNow(ExitCodeFor(st));  // not gRPC's shutdown (common/process.h)
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::SetMutexChecksForThisBuild();  // first: before any thread
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
