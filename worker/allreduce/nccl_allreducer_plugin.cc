// Builds with CUDA and NCCL: ps_worker does not link NCCL; these forward to
// the NCCL reducer inside libpstrain_cuda.so, loaded on demand
// (worker/compute/cuda/cuda_plugin_loader.h).
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/allreduce/nccl_allreducer.h"
#include "worker/compute/cuda/cuda_plugin_loader.h"

namespace pstrain {
namespace {

absl::StatusOr<const CudaPluginApi*> Plugin() {
  absl::StatusOr<const CudaPluginApi*> api = LoadCudaPlugin("");
  if (!api.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("allreduce.backend nccl needs a CUDA GPU on every "
                     "worker: ",
                     api.status().message(), "; use allreduce.backend grpc"));
  }
  return api;
}

}  // namespace

bool BuiltWithNccl() { return true; }

absl::Status NcclUsable(const ComputeBackend& backend) {
  PS_ASSIGN_OR_RETURN(const CudaPluginApi* api, Plugin());
  return api->nccl_usable(backend);
}

absl::StatusOr<std::string> NewNcclUniqueId() {
  PS_ASSIGN_OR_RETURN(const CudaPluginApi* api, Plugin());
  return api->new_nccl_unique_id();
}

absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(
    std::shared_ptr<ComputeBackend> backend, int rank, int size,
    const std::string& unique_id, absl::Duration timeout) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("CreateNcclAllReducer: null backend");
  }
  PS_ASSIGN_OR_RETURN(const CudaPluginApi* api, Plugin());
  return api->create_nccl_allreducer(std::move(backend), rank, size, unique_id,
                                     timeout);
}

}  // namespace pstrain
