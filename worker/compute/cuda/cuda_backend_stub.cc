// CPU-only builds: the CUDA backend's entry points without CUDA.
#include "worker/compute/cuda/cuda_backend.h"
#include "worker/compute/cuda/cuda_plugin_loader.h"

namespace pstrain {
namespace {

absl::Status BuiltWithoutCuda() {
  return absl::FailedPreconditionError(
      "built without CUDA (--config=nocuda, or no CUDA toolkit at "
      "/usr/local/cuda when it was built)");
}

}  // namespace

absl::Status CudaAvailable() { return BuiltWithoutCuda(); }

absl::StatusOr<int> CudaDeviceCount() { return BuiltWithoutCuda(); }

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(int) {
  return BuiltWithoutCuda();
}

absl::StatusOr<CudaPlacement> CudaPlacementOf(const ComputeBackend&) {
  return BuiltWithoutCuda();
}

std::vector<std::string> DefaultCudaPluginPaths() { return {}; }

absl::StatusOr<int> ProbeCudaDriver() { return BuiltWithoutCuda(); }

absl::StatusOr<const CudaPluginApi*> LoadCudaPlugin(const std::string&) {
  return BuiltWithoutCuda();
}

bool CudaPluginLoaded() { return false; }

std::string CudaPluginPath() { return ""; }

}  // namespace pstrain
