// Builds without CUDA: NCCL's entry points answer FAILED_PRECONDITION.
#include "worker/allreduce/nccl_allreducer.h"

namespace pstrain {
namespace {

absl::Status BuiltWithoutNccl() {
  return absl::FailedPreconditionError(
      "allreduce.backend nccl needs a CUDA GPU on every worker, but this "
      "ps_worker was built without CUDA/NCCL (--config=nocuda, or no CUDA "
      "toolkit at build time); use allreduce.backend grpc");
}

}  // namespace

absl::Status NcclUsable(const ComputeBackend&) { return BuiltWithoutNccl(); }

absl::StatusOr<std::string> NewNcclUniqueId() { return BuiltWithoutNccl(); }

absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(
    ComputeBackend*, int, int, const std::string&, absl::Duration) {
  return BuiltWithoutNccl();
}

}  // namespace pstrain
