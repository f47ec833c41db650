// Builds without CUDA or without NCCL: NCCL's entry points answer
// FAILED_PRECONDITION, saying why NCCL is missing (PSTRAIN_NCCL_NOTE, written
// by third_party/cuda/cuda_configure.bzl when it looked for NCCL).
#include "absl/strings/str_cat.h"
#include "pstrain_nccl_note.h"
#include "worker/allreduce/nccl_allreducer.h"

namespace pstrain {
namespace {

absl::Status BuiltWithoutNccl() {
  return absl::FailedPreconditionError(absl::StrCat(
      "allreduce.backend nccl needs NCCL and a CUDA GPU on every worker, but "
      "this ps_worker was built without NCCL (--config=nocuda, or at build "
      "time: ",
      PSTRAIN_NCCL_NOTE, "); use allreduce.backend grpc"));
}

}  // namespace

bool BuiltWithNccl() { return false; }

absl::Status NcclUsable(const ComputeBackend&) { return BuiltWithoutNccl(); }

absl::StatusOr<std::string> NewNcclUniqueId() { return BuiltWithoutNccl(); }

absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(
    std::shared_ptr<ComputeBackend>, int, int, const std::string&,
    absl::Duration) {
  return BuiltWithoutNccl();
}

}  // namespace pstrain
