#include "worker/compute/worker_device.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "worker/compute/cuda/cuda_backend.h"
#include "worker/compute/cuda/cuda_plugin_loader.h"

namespace pstrain {
namespace {

// " (CUDA_VISIBLE_DEVICES=4,5: physical 5)" or "" when unset; only names the
// entry when the list has one per visible device.
std::string PhysicalNote(const char* env, int visible, int ordinal) {
  if (env == nullptr) return "";
  const std::vector<std::string> entries =
      absl::StrSplit(env, ',', absl::SkipEmpty());
  if (static_cast<int>(entries.size()) != visible) {
    return absl::StrCat(" (CUDA_VISIBLE_DEVICES=", env, ")");
  }
  return absl::StrCat(" (CUDA_VISIBLE_DEVICES=", env, ": physical ",
                      entries[ordinal], ")");
}

}  // namespace

absl::StatusOr<CudaDeviceChoice> ChooseCudaDevice(
    const WorkerDeviceOptions& options, int rank, int visible) {
  const std::string env =
      options.cuda_visible_devices == nullptr
          ? std::string()
          : absl::StrCat(
                " (CUDA_VISIBLE_DEVICES=", options.cuda_visible_devices, ")");
  if (visible < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device visible", env));
  }
  CudaDeviceChoice choice;
  if (options.cuda_device < -1 || options.cuda_device >= visible) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cuda_device ", options.cuda_device, ": ", visible,
        " CUDA device(s) visible, so it must be -1 (choose) or 0..",
        visible - 1, env));
  }
  if (options.local_rank < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--local_rank ", options.local_rank, ": must be >= 0, or -1"));
  }
  if (options.cuda_device >= 0) {
    choice.ordinal = options.cuda_device;
    choice.reason = absl::StrCat("--cuda_device ", options.cuda_device);
  } else {
    const bool local = options.local_rank >= 0;
    const int index = local ? options.local_rank : rank;
    if (index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", index, ": cannot choose a CUDA device"));
    }
    choice.ordinal = index % visible;
    choice.reason = absl::StrCat(local ? "local rank " : "rank ", index,
                                 " mod ", visible, " visible device(s)");
    if (index >= visible) {
      absl::StrAppend(&choice.reason, ", shared with ",
                      local ? "local rank " : "rank ", choice.ordinal,
                      " (fine for compute; NCCL needs one device per rank)");
    }
  }
  absl::StrAppend(&choice.reason, PhysicalNote(options.cuda_visible_devices,
                                               visible, choice.ordinal));
  return choice;
}

absl::StatusOr<WorkerBackend> CreateWorkerBackend(
    const WorkerDeviceOptions& options, int rank) {
  WorkerBackend out;
  const std::string& device = options.device;
  if (device == "auto" || device == "cuda") {
    // The driver is asked first and the CUDA libraries load only then.
    absl::StatusOr<const CudaPluginApi*> plugin =
        LoadCudaPlugin(options.cuda_library);
    absl::StatusOr<int> visible =
        plugin.ok() ? CudaDeviceCount() : absl::StatusOr<int>(plugin.status());
    if (visible.ok()) {
      PS_ASSIGN_OR_RETURN(CudaDeviceChoice choice,
                          ChooseCudaDevice(options, rank, *visible));
      PS_ASSIGN_OR_RETURN(out.backend,
                          CreateComputeBackend("cuda", choice.ordinal));
      out.description = absl::StrCat(out.backend->name(), ": CUDA device ",
                                     choice.ordinal, " from ", choice.reason);
      return out;
    }
    if (device == "cuda") {
      return absl::FailedPreconditionError(
          absl::StrCat("device 'cuda' requested, but CUDA is not usable: ",
                       visible.status().message()));
    }
    PS_ASSIGN_OR_RETURN(out.backend, CreateComputeBackend("cpu"));
    out.description = absl::StrCat(out.backend->name(),
                                   " (auto: ", visible.status().message(), ")");
    return out;
  }
  PS_ASSIGN_OR_RETURN(out.backend, CreateComputeBackend(device));
  out.description = out.backend->name();
  return out;
}

}  // namespace pstrain
