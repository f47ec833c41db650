// The host ComputeBackend: OpenBLAS (cblas_sgemm) for matrix products, plain
// loops for everything else. Buffers live in ordinary host memory and every
// operation completes before it returns.
#ifndef PSTRAIN_WORKER_COMPUTE_CPU_BACKEND_H_
#define PSTRAIN_WORKER_COMPUTE_CPU_BACKEND_H_

#include <memory>

#include "worker/compute/compute_backend.h"

namespace pstrain {

// Never fails today; StatusOr for symmetry with the other backends.
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCpuBackend();

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_COMPUTE_CPU_BACKEND_H_
