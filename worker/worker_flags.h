// ps_worker's flags and their parsed form. Only worker_main.cc calls these
// (the flags are part of the binary, not of any library).
#ifndef PSTRAIN_WORKER_WORKER_FLAGS_H_
#define PSTRAIN_WORKER_WORKER_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/worker_node.h"

namespace pstrain {

// The node's flags: the shared ones (common/node_flags.h), the rank
// (--rank or --rank_from_env), the device, the report interval and the
// all-reduce peer address; CUDA_VISIBLE_DEVICES from the environment and a
// progress line when stderr is a terminal. `metrics` is left null. Errors
// start with the offending flag.
absl::StatusOr<WorkerNodeOptions> WorkerOptionsFromFlags();

// --check_config FILE: check the job file and exit; empty when not given.
std::string CheckConfigFlag();

// --metrics_bind: the address of the metrics endpoint.
std::string MetricsBindFlag();

// --heap_reuse: whether ps_worker keeps freed heap mapped (default true).
bool HeapReuseFlag();

// --compute_threads (SetCpuComputeThreads' argument); an error naming the
// flag outside [0, 1024].
absl::StatusOr<int> ComputeThreadsFlag();

// --openblas_thread_timeout (LimitOpenBlasSpin's argument); an error naming
// the flag unless 0 or in [4, 30].
absl::StatusOr<int> OpenBlasThreadTimeoutFlag();

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WORKER_FLAGS_H_
