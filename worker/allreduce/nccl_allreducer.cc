#include "worker/allreduce/nccl_allreducer.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/cuda/cuda_backend.h"

namespace pstrain {
namespace {

absl::Status NcclError(ncclResult_t res, const char* call, ncclComm_t comm) {
  const char* detail = comm != nullptr ? ncclGetLastError(comm) : "";
  return absl::InternalError(absl::StrCat(
      call, ": ", ncclGetErrorString(res), detail && *detail ? " (" : "",
      detail ? detail : "", detail && *detail ? ")" : ""));
}

absl::Status CudaError(cudaError_t err, const char* call) {
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(err)));
}

// Waits until `comm` has no operation in progress (non-blocking
// communicators return ncclInProgress), aborting it at `deadline`.
absl::Status AwaitComm(ncclComm_t comm, absl::Time deadline, const char* what) {
  ncclResult_t state = ncclInProgress;
  while (true) {
    ncclResult_t res = ncclCommGetAsyncError(comm, &state);
    if (res != ncclSuccess)
      return NcclError(res, "ncclCommGetAsyncError", comm);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError(state, what, comm);
    if (absl::Now() > deadline) {
      ncclCommAbort(comm);
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not finish in time (a rank is missing?)"));
    }
    absl::SleepFor(absl::Microseconds(100));
  }
}

class NcclAllReducer : public AllReducer {
 public:
  NcclAllReducer(ComputeBackend* backend, ncclComm_t comm, cudaStream_t stream,
                 int size, absl::Duration timeout)
      : backend_(backend),
        comm_(comm),
        stream_(stream),
        size_(size),
        timeout_(timeout) {}
  ~NcclAllReducer() override {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override {
    return absl::StrCat("nccl over ", size_, " ranks");
  }

  absl::Status SumInPlace(uint64_t step, absl::Span<float> data) override {
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError("the NCCL communicator was aborted");
    }
    const int64_t n = data.size();
    if (buffer_.size() < n) {
      PS_ASSIGN_OR_RETURN(buffer_, backend_->Allocate(n));
    }
    PS_RETURN_IF_ERROR(backend_->CopyToDevice(data.data(), n, &buffer_));
    PS_RETURN_IF_ERROR(backend_->Synchronize());  // the copy is on its stream
    const absl::Time deadline = absl::Now() + timeout_;
    ncclResult_t res = ncclAllReduce(buffer_.data(), buffer_.data(), n,
                                     ncclFloat, ncclSum, comm_, stream_);
    if (res != ncclSuccess && res != ncclInProgress) {
      return Abort(NcclError(res, "ncclAllReduce", comm_));
    }
    PS_RETURN_IF_ERROR(Check(AwaitComm(comm_, deadline, "ncclAllReduce")));
    while (true) {  // the kernel runs on stream_: poll it with a deadline
      const cudaError_t err = cudaStreamQuery(stream_);
      if (err == cudaSuccess) break;
      if (err != cudaErrorNotReady) {
        return Abort(CudaError(err, "cudaStreamQuery"));
      }
      PS_RETURN_IF_ERROR(Check(AwaitComm(comm_, deadline, "ncclAllReduce")));
      if (absl::Now() > deadline) {
        return Abort(absl::DeadlineExceededError(absl::StrCat(
            "ncclAllReduce of step ", step, " did not finish within ",
            absl::FormatDuration(timeout_), " (a rank is missing?)")));
      }
      absl::SleepFor(absl::Microseconds(50));
    }
    PS_RETURN_IF_ERROR(backend_->CopyToHost(buffer_, n, data.data()));
    // What a ring moves per rank: 2 (N - 1) / N of the vector each way.
    const uint64_t bytes = 2ull * (size_ - 1) * n * sizeof(float) / size_;
    sent_ += bytes;
    received_ += bytes;
    return absl::OkStatus();
  }

  absl::Status Close() override { return absl::OkStatus(); }
  uint64_t bytes_sent() const override { return sent_.load(); }
  uint64_t bytes_received() const override { return received_.load(); }

 private:
  absl::Status Abort(absl::Status st) {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    return st;
  }
  // AwaitComm aborts on its own deadline.
  absl::Status Check(absl::Status st) {
    if (st.code() == absl::StatusCode::kDeadlineExceeded) comm_ = nullptr;
    return st.ok() ? st : Abort(st);
  }

  ComputeBackend* const backend_;
  ncclComm_t comm_;
  const cudaStream_t stream_;
  const int size_;
  const absl::Duration timeout_;
  DeviceBuffer buffer_;
  std::atomic<uint64_t> sent_{0}, received_{0};
};

}  // namespace

absl::Status NcclUsable(const ComputeBackend& backend) {
  absl::Status cuda = CudaAvailable();
  if (!cuda.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("allreduce.backend nccl needs a CUDA GPU on every "
                     "worker: ",
                     cuda.message(), "; use allreduce.backend grpc"));
  }
  if (!absl::StartsWith(backend.name(), "cuda")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "allreduce.backend nccl needs the CUDA compute backend, but this "
        "worker computes on ",
        backend.name(), " (--device / worker.device)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> NewNcclUniqueId() {
  PS_RETURN_IF_ERROR(CudaAvailable());
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res != ncclSuccess) return NcclError(res, "ncclGetUniqueId", nullptr);
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(
    ComputeBackend* backend, int rank, int size, const std::string& unique_id,
    absl::Duration timeout) {
  PS_RETURN_IF_ERROR(NcclUsable(*backend));
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal) || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad NCCL rendezvous: rank ", rank, " of ", size, ", ",
                     unique_id.size(), "-byte unique id"));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  // Non-blocking, so that set-up waits on our deadline, not forever.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t res = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (res != ncclSuccess && res != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    return NcclError(res, "ncclCommInitRankConfig", nullptr);
  }
  absl::Status joined =
      AwaitComm(comm, absl::Now() + timeout, "ncclCommInitRankConfig");
  if (!joined.ok()) {  // AwaitComm aborted it on DEADLINE_EXCEEDED
    if (joined.code() != absl::StatusCode::kDeadlineExceeded) {
      ncclCommAbort(comm);
    }
    return joined;
  }
  cudaStream_t stream;
  const cudaError_t err =
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    ncclCommAbort(comm);
    return CudaError(err, "cudaStreamCreateWithFlags");
  }
  return std::unique_ptr<AllReducer>(
      new NcclAllReducer(backend, comm, stream, size, timeout));
}

}  // namespace pstrain
