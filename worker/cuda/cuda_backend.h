// The CUDA ComputeBackend: cuBLAS for every matrix product, small kernels
// (kernels.cu) for the rest, all on one CUDA stream per backend, with host
// copies staged through pinned memory. In builds without CUDA
// (--config=nocuda, or no toolkit at build time) both functions answer
// FAILED_PRECONDITION "built without CUDA".
//
// Products run in full fp32 (cuBLAS's default math mode, no TF32), so results
// match the CPU backend up to summation order.
#ifndef PSTRAIN_WORKER_CUDA_CUDA_BACKEND_H_
#define PSTRAIN_WORKER_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/compute_backend.h"

namespace pstrain {

// OK when at least one CUDA device is visible; otherwise FAILED_PRECONDITION
// saying why (no device, no driver, built without CUDA).
absl::Status CudaAvailable();

// A backend on the first visible CUDA device. FAILED_PRECONDITION when
// CudaAvailable() is not OK; other CUDA or cuBLAS failures map to their codes
// (RESOURCE_EXHAUSTED for out of memory, INTERNAL otherwise) with the file,
// line and the library's error string.
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend();

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_CUDA_CUDA_BACKEND_H_
