// Which compute backend a worker gets, and on which GPU: several workers on
// one host (psctl run, a multi-GPU node) must not all land on GPU 0, and NCCL
// refuses two ranks on one device.
#ifndef PSTRAIN_WORKER_COMPUTE_WORKER_DEVICE_H_
#define PSTRAIN_WORKER_COMPUTE_WORKER_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/compute/compute_backend.h"

namespace pstrain {

// Parsed in main from the flags, the job and the environment.
struct WorkerDeviceOptions {
  std::string device = "auto";  // auto | cpu | cuda (flag, else worker.device)
  int cuda_device = -1;         // --cuda_device: this ordinal; -1 chooses
  int local_rank = -1;  // --local_rank: index among this host's workers; -1
                        // takes the worker's rank (one host, as psctl run)
  // The CUDA_VISIBLE_DEVICES the process was started with (null when
  // unset), only to name the physical device in the log: the CUDA runtime
  // itself applies it, and ordinals count the visible devices only.
  const char* cuda_visible_devices = nullptr;
  // libpstrain_cuda.so for auto and cuda (--cuda_library); empty: the
  // default places (cuda_plugin_loader.h). Never loaded for cpu.
  std::string cuda_library;
};

struct CudaDeviceChoice {
  int ordinal = 0;     // among the visible devices
  std::string reason;  // for the log, e.g. "local rank 3 mod 2 visible ..."
};

// The CUDA device for a worker of rank `rank` when `visible` devices are
// visible (pure: no CUDA call). An explicit cuda_device wins (INVALID_ARGUMENT
// naming --cuda_device when it is not below `visible`, or < -1); otherwise
// the local rank (or, when -1, the rank) modulo `visible`, and the reason
// says when workers share a device. FAILED_PRECONDITION when visible < 1.
absl::StatusOr<CudaDeviceChoice> ChooseCudaDevice(
    const WorkerDeviceOptions& options, int rank, int visible);

struct WorkerBackend {
  // Shared: the model borrows it and a NCCL reducer keeps a share, so the
  // backend lives until the last of them is gone.
  std::shared_ptr<ComputeBackend> backend;
  std::string description;  // for the log: the backend and why this device
};

// The backend for `options.device` (see CreateComputeBackend), on the device
// ChooseCudaDevice picks for rank `rank`. "cpu" never loads a CUDA library.
// "auto" and "cuda" first ask the CUDA driver for a device and only then load
// libpstrain_cuda.so (LoadCudaPlugin); "auto" without a usable CUDA device
// (no driver, no device, no libpstrain_cuda.so) is the CPU, and the
// description says why; "cuda" then fails with FAILED_PRECONDITION and the
// reason.
absl::StatusOr<WorkerBackend> CreateWorkerBackend(
    const WorkerDeviceOptions& options, int rank);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_COMPUTE_WORKER_DEVICE_H_
