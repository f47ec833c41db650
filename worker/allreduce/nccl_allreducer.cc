#include "worker/allreduce/nccl_allreducer.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/allreduce/shared_backend_buffer.h"
#include "worker/compute/cuda/cuda_backend.h"

// Non-blocking communicators (ncclConfig_t) and ncclCommFinalize.
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "allreduce.backend nccl needs NCCL >= 2.14"
#endif

namespace pstrain {
namespace {

// `comm` may be null; when not, NCCL's last error message for it is added.
absl::Status NcclError(ncclResult_t res, absl::string_view call,
                       ncclComm_t comm) {
  const char* detail = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (res == ncclInvalidUsage) {
    code = absl::StatusCode::kFailedPrecondition;
  } else if (res == ncclInvalidArgument) {
    code = absl::StatusCode::kInvalidArgument;
  } else if (res == ncclRemoteError || res == ncclSystemError) {
    code = absl::StatusCode::kUnavailable;
  }
  return absl::Status(code, absl::StrCat(call, ": ", ncclGetErrorString(res),
                                         detail != nullptr && *detail != '\0'
                                             ? absl::StrCat(" (", detail, ")")
                                             : std::string()));
}

// Also clears the thread's last CUDA error, which a later kernel-launch
// check (cudaGetLastError) would otherwise report as its own.
absl::Status CudaError(cudaError_t err, absl::string_view call) {
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(err),
                                          " (", cudaGetErrorName(err), ")"));
}

// Waits until `comm` has no operation in progress (non-blocking
// communicators return ncclInProgress), aborting it at `deadline`.
absl::Status AwaitComm(ncclComm_t comm, absl::Time deadline,
                       absl::string_view what) {
  ncclResult_t state = ncclInProgress;
  while (true) {
    ncclResult_t res = ncclCommGetAsyncError(comm, &state);
    if (res != ncclSuccess) {
      return NcclError(res, "ncclCommGetAsyncError", comm);
    }
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
  NcclAllReducer(std::shared_ptr<ComputeBackend> backend,
                 CudaPlacement placement, ncclComm_t comm, int size,
                 absl::Duration timeout)
      : scratch_(std::move(backend)),
        device_(placement.device),
        stream_(placement.stream),
        comm_(comm),
        size_(size),
        timeout_(timeout) {}

  // The communicator goes first, then (members) the buffer, then this
  // reducer's share of the backend, whose stream NCCL used.
  ~NcclAllReducer() override {
    if (comm_ != nullptr) {
      Finalize(absl::Now() + std::min(timeout_, absl::Seconds(5)))
          .IgnoreError();
    }
  }

  std::string name() const override {
    return absl::StrCat("nccl over ", size_, " ranks (CUDA device ", device_,
                        ")");
  }

  bool sums_on_device() const override { return true; }

  // The training path: the all-reduce runs in place on the caller's device
  // buffer (the model's flat gradient), on the backend's stream behind the
  // work that computed it; the host only waits (polling, with the deadline)
  // for it to finish. Nothing crosses to or from the host.
  absl::Status SumInPlaceOnDevice(uint64_t step, DeviceBuffer* data,
                                  int64_t n) override {
    if (n < 0 || data == nullptr || data->size() < n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SumInPlaceOnDevice: ", n, " floats requested of a buffer of ",
          data == nullptr ? 0 : data->size()));
    }
    return Reduce(step, data->data(), n);
  }

  // For host memory: the copy in, the all-reduce and the copy out are queued
  // in order on the backend's stream, with no host wait between the first
  // two; the host waits (polling, with the deadline) only before the copy
  // out.
  absl::Status SumInPlace(uint64_t step, absl::Span<float> data) override {
    const int64_t n = data.size();
    if (n == 0) return Usable();
    PS_RETURN_IF_ERROR(Usable());
    PS_RETURN_IF_ERROR(scratch_.Reserve(n));
    DeviceBuffer& buffer = scratch_.buffer();
    PS_RETURN_IF_ERROR(
        scratch_.backend()->CopyToDevice(data.data(), n, &buffer));
    PS_RETURN_IF_ERROR(Reduce(step, buffer.data(), n));
    return scratch_.backend()->CopyToHost(buffer, n, data.data());
  }

  absl::Status Close() override {
    if (closed_) return absl::OkStatus();
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError("the NCCL communicator was aborted");
    }
    closed_ = true;
    return Finalize(absl::Now() + timeout_);
  }

  uint64_t bytes_sent() const override { return sent_.load(); }
  uint64_t bytes_received() const override { return received_.load(); }

 private:
  absl::Status Usable() const {
    if (comm_ != nullptr) return absl::OkStatus();
    return absl::FailedPreconditionError(
        closed_ ? "the NCCL reducer was closed"
                : "the NCCL communicator was aborted");
  }

  // ncclAllReduce of device floats [data, data + n) in place, on the
  // backend's stream; returns when it has finished on this rank.
  absl::Status Reduce(uint64_t step, float* data, int64_t n) {
    PS_RETURN_IF_ERROR(Usable());
    if (n == 0) return absl::OkStatus();
    // NCCL launches on the current device, which must be the communicator's.
    const cudaError_t set = cudaSetDevice(device_);
    if (set != cudaSuccess) return Abort(CudaError(set, "cudaSetDevice"));
    const absl::Time deadline = absl::Now() + timeout_;
    const ncclResult_t res =
        ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_, stream_);
    if (res != ncclSuccess && res != ncclInProgress) {
      return Abort(NcclError(res, "ncclAllReduce", comm_));
    }
    PS_RETURN_IF_ERROR(Check(AwaitComm(comm_, deadline, "ncclAllReduce")));
    PS_RETURN_IF_ERROR(AwaitStream(step, deadline));
    // What a ring moves per rank: 2 (N - 1) / N of the vector each way.
    const uint64_t bytes = 2ull * (size_ - 1) * n * sizeof(float) / size_;
    sent_ += bytes;
    received_ += bytes;
    return absl::OkStatus();
  }

  // Waits (polling, until `deadline`) for everything queued on the stream,
  // the all-reduce included. cudaStreamSynchronize could wait forever: a
  // missing rank leaves NCCL's kernel spinning.
  absl::Status AwaitStream(uint64_t step, absl::Time deadline) {
    while (true) {
      const cudaError_t err = cudaStreamQuery(stream_);
      if (err == cudaSuccess) return absl::OkStatus();
      if (err != cudaErrorNotReady) {
        return Abort(CudaError(err, "cudaStreamQuery"));
      }
      // Not an error, but the runtime may keep cudaErrorNotReady in this
      // thread's last-error slot, and the backend's next kernel-launch check
      // (cudaGetLastError) would take it for its own failure (PyTorch clears
      // it the same way).
      (void)cudaGetLastError();
      PS_RETURN_IF_ERROR(Check(AwaitComm(comm_, deadline, "ncclAllReduce")));
      if (absl::Now() > deadline) {
        return Abort(absl::DeadlineExceededError(absl::StrCat(
            "ncclAllReduce of step ", step, " did not finish within ",
            absl::FormatDuration(timeout_), " (a rank is missing?)")));
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }

  // ncclCommFinalize (this rank's last operations complete and its peers
  // are told), then ncclCommDestroy, on the communicator's device; aborts
  // the communicator when either fails or `deadline` passes.
  absl::Status Finalize(absl::Time deadline) {
    ncclComm_t comm = comm_;
    comm_ = nullptr;
    const cudaError_t set = cudaSetDevice(device_);
    if (set != cudaSuccess) {
      ncclCommAbort(comm);
      return CudaError(set, "cudaSetDevice");
    }
    const ncclResult_t res = ncclCommFinalize(comm);
    if (res != ncclSuccess && res != ncclInProgress) {
      const absl::Status st = NcclError(res, "ncclCommFinalize", comm);
      ncclCommAbort(comm);
      return st;
    }
    const absl::Status done = AwaitComm(comm, deadline, "ncclCommFinalize");
    if (done.code() == absl::StatusCode::kDeadlineExceeded) return done;
    if (!done.ok()) {
      ncclCommAbort(comm);
      return done;
    }
    const ncclResult_t destroyed = ncclCommDestroy(comm);
    if (destroyed != ncclSuccess) {
      return NcclError(destroyed, "ncclCommDestroy", nullptr);
    }
    return absl::OkStatus();
  }

  absl::Status Abort(absl::Status st) {
    if (comm_ != nullptr) {
      cudaSetDevice(device_);
      ncclCommAbort(comm_);
      cudaGetLastError();
    }
    comm_ = nullptr;
    return st;
  }
  // AwaitComm aborts on its own deadline.
  absl::Status Check(absl::Status st) {
    if (st.code() == absl::StatusCode::kDeadlineExceeded) comm_ = nullptr;
    return st.ok() ? st : Abort(st);
  }

  SharedBackendBuffer scratch_;  // first: destroyed last
  const int device_;
  CUstream_st* const stream_;  // the backend's
  ncclComm_t comm_;
  bool closed_ = false;
  const int size_;
  const absl::Duration timeout_;
  std::atomic<uint64_t> sent_{0}, received_{0};
};

}  // namespace

bool BuiltWithNccl() { return true; }

absl::Status NcclUsable(const ComputeBackend& backend) {
  absl::Status cuda = CudaAvailable();
  if (!cuda.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("allreduce.backend nccl needs a CUDA GPU on every "
                     "worker: ",
                     cuda.message(), "; use allreduce.backend grpc"));
  }
  if (!CudaPlacementOf(backend).ok()) {
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
    std::shared_ptr<ComputeBackend> backend, int rank, int size,
    const std::string& unique_id, absl::Duration timeout) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("CreateNcclAllReducer: null backend");
  }
  PS_RETURN_IF_ERROR(NcclUsable(*backend));
  PS_ASSIGN_OR_RETURN(const CudaPlacement placement, CudaPlacementOf(*backend));
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal) || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad NCCL rendezvous: rank ", rank, " of ", size, ", ",
                     unique_id.size(), "-byte unique id"));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  // The usual cause of a failed set-up on one host, said with every failure.
  auto with_hint = [&](const absl::Status& st) {
    return absl::Status(
        st.code(),
        absl::StrCat(st.message(), "; rank ", rank, " of ", size,
                     " is on CUDA device ", placement.device,
                     ": NCCL needs a distinct GPU per rank (on a host with "
                     "fewer GPUs than workers use allreduce.backend grpc)"));
  };
  // The communicator belongs to the current device: make it the backend's.
  const cudaError_t set = cudaSetDevice(placement.device);
  if (set != cudaSuccess) return CudaError(set, "cudaSetDevice");
  // Non-blocking, so that set-up waits on our deadline, not forever.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t res =
      ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (res != ncclSuccess && res != ncclInProgress) {
    const absl::Status st = NcclError(res, "ncclCommInitRankConfig", comm);
    if (comm != nullptr) ncclCommAbort(comm);
    return with_hint(st);
  }
  const absl::Status joined =
      AwaitComm(comm, absl::Now() + timeout, "ncclCommInitRankConfig");
  if (!joined.ok()) {  // AwaitComm aborted it on DEADLINE_EXCEEDED
    if (joined.code() != absl::StatusCode::kDeadlineExceeded) {
      ncclCommAbort(comm);
    }
    return with_hint(joined);
  }
  return std::unique_ptr<AllReducer>(
      new NcclAllReducer(std::move(backend), placement, comm, size, timeout));
}

}  // namespace pstrain
