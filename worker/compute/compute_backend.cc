// CreateComputeBackend: picks the implementation. The interface itself is
// header-only (compute_backend.h).
#include "worker/compute/compute_backend.h"

#include "absl/strings/str_cat.h"
#include "worker/compute/cpu_backend.h"
#include "worker/compute/cuda/cuda_backend.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateComputeBackend(
    const std::string& device, int cuda_device) {
  if (device == "cpu") return CreateCpuBackend();
  if (device == "auto") {
    return CudaAvailable().ok() ? CreateCudaBackend(cuda_device)
                                : CreateCpuBackend();
  }
  if (device == "cuda") {
    absl::StatusOr<std::unique_ptr<ComputeBackend>> backend =
        CreateCudaBackend(cuda_device);
    if (backend.status().code() == absl::StatusCode::kFailedPrecondition) {
      return absl::FailedPreconditionError(
          absl::StrCat("device 'cuda' requested, but CUDA is not usable: ",
                       backend.status().message()));
    }
    return backend;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown compute device '", device, "' (expected auto, cpu or cuda)"));
}

}  // namespace pstrain
