// The boundary between ps_worker and libpstrain_cuda.so, the shared object
// that holds everything that links the CUDA libraries (the CUDA backend,
// cuBLAS, the kernels and NCCL). ps_worker never links them: it dlopens the
// object on demand (cuda_plugin_loader.h), so a worker on the CPU path never
// maps libcudart, libcublas(Lt) or libnccl and stays small.
//
// The object exports one C symbol, kCudaPluginSymbol, returning a table of
// the functions declared in cuda_backend.h and nccl_allreducer.h. Both sides
// are built from the same tree in the same build (the Bazel target
// //worker:libpstrain_cuda.so); the table's version and size guard against
// an object from another build. Objects made on one side (a backend, a
// reducer) are used through their virtual interfaces on the other; the
// object is never unloaded, so their code outlives them.
#ifndef PSTRAIN_WORKER_COMPUTE_CUDA_CUDA_PLUGIN_API_H_
#define PSTRAIN_WORKER_COMPUTE_CUDA_CUDA_PLUGIN_API_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/cuda/cuda_backend.h"

namespace pstrain {

class AllReducer;  // worker/allreduce/allreducer.h

// Bump whenever CudaPluginApi or an interface crossing it changes.
inline constexpr int kCudaPluginAbiVersion = 2;  // 2: embedding bags
inline constexpr char kCudaPluginFile[] = "libpstrain_cuda.so";
inline constexpr char kCudaPluginSymbol[] = "pstrain_cuda_plugin_v1";

struct CudaPluginApi {
  int abi_version = kCudaPluginAbiVersion;
  int api_size = sizeof(CudaPluginApi);
  // cuda_backend.h
  absl::Status (*cuda_available)() = nullptr;
  absl::StatusOr<int> (*cuda_device_count)() = nullptr;
  absl::StatusOr<std::unique_ptr<ComputeBackend>> (*create_cuda_backend)(
      int device) = nullptr;
  absl::StatusOr<CudaPlacement> (*cuda_placement_of)(
      const ComputeBackend& backend) = nullptr;
  // nccl_allreducer.h
  bool (*built_with_nccl)() = nullptr;
  absl::Status (*nccl_usable)(const ComputeBackend& backend) = nullptr;
  absl::StatusOr<std::string> (*new_nccl_unique_id)() = nullptr;
  absl::StatusOr<std::unique_ptr<AllReducer>> (*create_nccl_allreducer)(
      std::shared_ptr<ComputeBackend> backend, int rank, int size,
      const std::string& unique_id, absl::Duration timeout) = nullptr;
};

}  // namespace pstrain

// Exported by libpstrain_cuda.so (worker/cuda_plugin.cc); never null.
extern "C" const pstrain::CudaPluginApi* pstrain_cuda_plugin_v1();

#endif  // PSTRAIN_WORKER_COMPUTE_CUDA_CUDA_PLUGIN_API_H_
