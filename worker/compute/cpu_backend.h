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

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_COMPUTE_CPU_BACKEND_H_
