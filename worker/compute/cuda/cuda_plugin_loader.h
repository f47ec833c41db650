// Loads libpstrain_cuda.so (cuda_plugin_api.h) on demand, once per process.
// The functions of cuda_backend.h in ps_worker forward to it; nothing loads
// it on the CPU path (device cpu never asks, device auto asks only when the
// CUDA driver reports a device), so a CPU worker maps no CUDA library.
#ifndef PSTRAIN_WORKER_COMPUTE_CUDA_CUDA_PLUGIN_LOADER_H_
#define PSTRAIN_WORKER_COMPUTE_CUDA_CUDA_PLUGIN_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/compute/cuda/cuda_plugin_api.h"

namespace pstrain {

// Where LoadCudaPlugin("") looks, in order: next to the running binary
// (/proc/self/exe: bazel-bin/worker, /usr/local/bin in the image), then in
// its Bazel runfiles (<binary>.runfiles/pstrain/worker: tests, bazel run).
std::vector<std::string> DefaultCudaPluginPaths();

// The CUDA driver's view, without loading the plugin: dlopens libcuda.so.1
// (the driver, present only where a GPU driver is installed), calls cuInit
// and counts the devices. FAILED_PRECONDITION saying why when there is no
// driver or no device (the usual answer on a CPU machine).
absl::StatusOr<int> ProbeCudaDriver();

// The plugin's table. The first successful call loads the object (`path`, or
// the first of DefaultCudaPluginPaths() that exists when empty) and every
// later call returns the same table whatever its argument; a failed call
// loads nothing and may be retried. FAILED_PRECONDITION when the driver
// probe fails (checked first, so no CUDA library is mapped then), when no
// object is found (naming every place looked at and the --cuda_library
// flag), when dlopen or dlsym fails (with dlerror's text), or when the
// object is of another build (ABI version or table size). Thread-safe.
absl::StatusOr<const CudaPluginApi*> LoadCudaPlugin(const std::string& path);

// Whether this process loaded the plugin (and with it the CUDA libraries),
// and from where ("" when not).
bool CudaPluginLoaded();
std::string CudaPluginPath();

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_COMPUTE_CUDA_CUDA_PLUGIN_LOADER_H_
