// SharedBackendBuffer: a DeviceBuffer together with a share of the backend
// that allocated it, for objects that may outlive every other owner of the
// backend (the NCCL reducer outlives the worker's training scope, which
// owned the backend alone and freed it first: issue 12, defect 1).
#ifndef PSTRAIN_WORKER_ALLREDUCE_SHARED_BACKEND_BUFFER_H_
#define PSTRAIN_WORKER_ALLREDUCE_SHARED_BACKEND_BUFFER_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/compute/compute_backend.h"

namespace pstrain {

// The buffer is freed before the holder's share of the backend is released
// (member order, and explicitly in the destructor), so the backend is alive
// whenever the buffer's memory goes back to it. Neither copyable nor movable,
// so no assignment can release the backend before the buffer. Thread-
// compatible, like the backend.
class SharedBackendBuffer {
 public:
  // `backend` must not be null.
  explicit SharedBackendBuffer(std::shared_ptr<ComputeBackend> backend)
      : backend_(std::move(backend)) {}
  SharedBackendBuffer(const SharedBackendBuffer&) = delete;
  SharedBackendBuffer& operator=(const SharedBackendBuffer&) = delete;
  ~SharedBackendBuffer() { buffer_ = DeviceBuffer(); }

  // Makes buffer() hold at least `n` floats; the contents are not kept when
  // it grows (the old memory is freed first, to keep the peak low).
  absl::Status Reserve(int64_t n) {
    if (buffer_.size() >= n) return absl::OkStatus();
    buffer_ = DeviceBuffer();
    absl::StatusOr<DeviceBuffer> grown = backend_->Allocate(n);
    if (!grown.ok()) return grown.status();
    buffer_ = std::move(*grown);
    return absl::OkStatus();
  }

  ComputeBackend* backend() const { return backend_.get(); }
  DeviceBuffer& buffer() { return buffer_; }

 private:
  const std::shared_ptr<ComputeBackend> backend_;  // destroyed after buffer_
  DeviceBuffer buffer_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_SHARED_BACKEND_BUFFER_H_
