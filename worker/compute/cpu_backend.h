// The host ComputeBackend: OpenBLAS (cblas_sgemm) for matrix products, plain
// loops for everything else. Buffers live in ordinary host memory and every
// operation completes before it returns.
#ifndef PSTRAIN_WORKER_COMPUTE_CPU_BACKEND_H_
#define PSTRAIN_WORKER_COMPUTE_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/compute/compute_backend.h"

namespace pstrain {

// Never fails today; StatusOr for symmetry with the other backends.
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCpuBackend();

// The quota of a cgroup v2 `cpu.max` file ("max 100000": none, 0;
// "150000 100000": 1.5 CPUs, rounded up to 2). INVALID_ARGUMENT naming the
// text otherwise.
absl::StatusOr<int> ParseCpuMax(absl::string_view text);

// The CPUs this process may use: its affinity mask, capped by the CPU quota
// of its cgroup and of every cgroup above it (cgroup v2 cpu.max, rounded
// up; a Kubernetes CPU limit) where one is set. At least 1.
int UsableCpus();

// Sets the threads of the CPU backend's matrix products for this process
// (OpenBLAS's pool is process-wide): `threads` > 0 as given; 0 keeps a
// positive OPENBLAS_NUM_THREADS from the environment (OpenBLAS applied it at
// start-up), else takes UsableCpus(). Several workers on one host's cores
// should split them (psctl run gives each max(1, cores / workers)): OpenBLAS's
// threads spin while they wait for work, taking the CPU from the other workers
// and the servers. Returns the number set.
int SetCpuComputeThreads(int threads);

// OpenBLAS's threads (Debian's pthread build) spin, calling sched_yield,
// for 2^OPENBLAS_THREAD_TIMEOUT TSC cycles after each product before they
// sleep: 2^28 (about 0.1 s) by default, longer than a step's pull and push,
// so one core spun through every step's communication and the gRPC threads
// (and, on one machine, the servers) ran on what was left: a real 64 MB
// job's pull + push took 0.73 of the time with 2^20 (docs/performance.md,
// "OpenBLAS threads that stop spinning"). 2^20 cycles (about 0.35 ms)
// still covers the gaps between one step's products.
inline constexpr int kOpenBlasThreadTimeout = 20;
// OpenBLAS's own, where nothing sets the variable.
inline constexpr int kOpenBlasOwnThreadTimeout = 28;

// Has OpenBLAS's idle threads sleep after 2^`exponent` cycles (> 0; the
// variable OPENBLAS_THREAD_TIMEOUT is set to it), else after
// 2^OPENBLAS_THREAD_TIMEOUT as the environment says now, else after
// 2^kOpenBlasThreadTimeout (the variable is set then). OpenBLAS reads its
// variables and starts its threads when it is loaded, before main; unless it
// read this value then, this has it read them again (openblas_read_env) and
// starts its threads again (blas_thread_shutdown_, as its own fork handler
// does, then blas_thread_init, which reads the timeout). Call before any
// product and before other threads use OpenBLAS. Returns the exponent OpenBLAS
// uses now (its own 28 for an unset or 0 variable, others clamped to 4..30 as
// it does); FAILED_PRECONDITION where the BLAS linked is not OpenBLAS's
// pthread build or does not export those functions (then nothing changed).
absl::StatusOr<int> LimitOpenBlasSpin(int exponent = 0);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_COMPUTE_CPU_BACKEND_H_
