// The CUDA ComputeBackend: cuBLAS for every matrix product, small kernels
// (kernels.cu) for the rest, all on one CUDA stream per backend, on one
// device chosen at creation. Copies to and from pinned host memory
// (AllocateHost's HostBuffers, or any cudaMallocHost / cudaHostRegister
// memory) are single DMAs; copies to and from pageable memory go through two
// pinned staging halves (one extra host memcpy per chunk).
// In builds without CUDA (--config=nocuda, or no toolkit at build time) every
// function answers FAILED_PRECONDITION "built without CUDA".
//
// Products run in full fp32: the cuBLAS handle is pinned to
// CUBLAS_PEDANTIC_MATH, which uses the prescribed fp32 compute precision in
// every phase whatever the library's default or the environment
// (NVIDIA_TF32_OVERRIDE, cuBLAS's fp32 emulation switches) say, so no TF32 or
// reduced-precision split-K: results match the CPU backend up to summation
// order.
#ifndef PSTRAIN_WORKER_COMPUTE_CUDA_CUDA_BACKEND_H_
#define PSTRAIN_WORKER_COMPUTE_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/compute/compute_backend.h"

// The CUDA runtime's stream type (cudaStream_t is CUstream_st*), declared
// here so that this header needs no CUDA headers.
struct CUstream_st;

namespace pstrain {

// OK when at least one CUDA device is visible; otherwise FAILED_PRECONDITION
// saying why (no device, no driver, built without CUDA).
absl::Status CudaAvailable();

// The number of CUDA devices this process sees (CUDA_VISIBLE_DEVICES already
// applied by the runtime: ordinals 0..count-1 are the visible ones).
// FAILED_PRECONDITION as CudaAvailable() when there is none.
absl::StatusOr<int> CudaDeviceCount();

// A backend on CUDA device `device`, an ordinal among the visible devices.
// FAILED_PRECONDITION when CudaAvailable() is not OK; INVALID_ARGUMENT when
// `device` is not in [0, CudaDeviceCount()); other CUDA or cuBLAS failures
// map to their codes (RESOURCE_EXHAUSTED for out of memory, INTERNAL
// otherwise) with the file, line and the library's error string.
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(int device);

// Where a CUDA backend computes, for code that enqueues its own work next to
// the backend's (NCCL): the device ordinal and the backend's stream. Work
// enqueued on `stream` runs in order with the backend's operations; the
// stream belongs to the backend and lives as long as it.
struct CudaPlacement {
  int device = 0;
  CUstream_st* stream = nullptr;
};
// FAILED_PRECONDITION unless `backend` is a CUDA backend.
absl::StatusOr<CudaPlacement> CudaPlacementOf(const ComputeBackend& backend);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_COMPUTE_CUDA_CUDA_BACKEND_H_
