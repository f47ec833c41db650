// ps_worker's side of libpstrain_cuda.so: the loader and the functions of
// cuda_backend.h, forwarded to the plugin's table.
#include "worker/compute/cuda/cuda_plugin_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/compute/cuda/cuda_backend.h"

namespace pstrain {
namespace {

ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);
const CudaPluginApi* g_api ABSL_GUARDED_BY(g_mu) = nullptr;
std::string* g_path ABSL_GUARDED_BY(g_mu) = nullptr;  // never freed

std::string SelfExe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, n);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string DlError() {
  const char* e = dlerror();
  return e == nullptr ? "unknown dlerror" : e;
}

// The table behind `path`, checked. The handle stays open for the life of
// the process: backends and reducers made by the object run its code.
absl::StatusOr<const CudaPluginApi*> Open(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the CUDA backend ", path, ": ", DlError()));
  }
  using Entry = const CudaPluginApi* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kCudaPluginSymbol));
  if (entry == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " has no ", kCudaPluginSymbol, ": ", DlError()));
  }
  const CudaPluginApi* api = entry();
  if (api == nullptr || api->abi_version != kCudaPluginAbiVersion ||
      api->api_size != static_cast<int>(sizeof(CudaPluginApi))) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is from another build of pstrain (plugin ABI ",
                     api == nullptr ? -1 : api->abi_version, ", expected ",
                     kCudaPluginAbiVersion,
                     "): use the libpstrain_cuda.so built with this "
                     "ps_worker"));
  }
  return api;
}

}  // namespace

std::vector<std::string> DefaultCudaPluginPaths() {
  const std::string exe = SelfExe();
  if (exe.empty()) return {};
  const std::string dir = exe.substr(0, exe.rfind('/') + 1);
  return {absl::StrCat(dir, kCudaPluginFile),
          absl::StrCat(exe, ".runfiles/pstrain/worker/", kCudaPluginFile)};
}

absl::StatusOr<int> ProbeCudaDriver() {
  // Only the driver API's entry points, by name, so no CUDA header is needed
  // and nothing links against the driver.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA driver (libcuda.so.1: ", DlError(), ")"));
  }
  using InitFn = int (*)(unsigned int);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(dlsym(driver, "cuInit"));
  auto count_fn = reinterpret_cast<CountFn>(dlsym(driver, "cuDeviceGetCount"));
  if (init == nullptr || count_fn == nullptr) {
    return absl::FailedPreconditionError(
        "libcuda.so.1 lacks cuInit or cuDeviceGetCount");
  }
  const int init_result = init(0);
  if (init_result != 0) {
    // 100 is CUDA_ERROR_NO_DEVICE; others (no kernel module, driver too old)
    // keep their number for the reader of the log.
    return absl::FailedPreconditionError(
        init_result == 100
            ? std::string("no CUDA device visible (cuInit: no device)")
            : absl::StrCat("the CUDA driver did not start (cuInit error ",
                           init_result, ")"));
  }
  int count = 0;
  const int count_result = count_fn(&count);
  if (count_result != 0 || count < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device visible (cuDeviceGetCount: error ",
                     count_result, ", ", count, " devices)"));
  }
  return count;
}

absl::StatusOr<const CudaPluginApi*> LoadCudaPlugin(const std::string& path) {
  absl::MutexLock lock(&g_mu);
  if (g_api != nullptr) return g_api;
  std::vector<std::string> candidates =
      path.empty() ? DefaultCudaPluginPaths() : std::vector<std::string>{path};
  std::string found;
  for (const std::string& c : candidates) {
    if (IsFile(c)) {
      found = c;
      break;
    }
  }
  if (found.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA backend ", kCudaPluginFile, " was not found (looked at ",
        candidates.empty() ? "nothing: /proc/self/exe unreadable"
                           : absl::StrJoin(candidates, ", "),
        "); put it next to ps_worker or name it with --cuda_library"));
  }
  // No CUDA library is mapped before the driver says there is a device.
  PS_RETURN_IF_ERROR(ProbeCudaDriver().status());
  PS_ASSIGN_OR_RETURN(g_api, Open(found));
  g_path = new std::string(found);
  return g_api;
}

bool CudaPluginLoaded() {
  absl::MutexLock lock(&g_mu);
  return g_api != nullptr;
}

std::string CudaPluginPath() {
  absl::MutexLock lock(&g_mu);
  return g_path == nullptr ? std::string() : *g_path;
}

// cuda_backend.h, through the plugin.

absl::Status CudaAvailable() {
  PS_ASSIGN_OR_RETURN(const CudaPluginApi* api, LoadCudaPlugin(""));
  return api->cuda_available();
}

absl::StatusOr<int> CudaDeviceCount() {
  PS_ASSIGN_OR_RETURN(const CudaPluginApi* api, LoadCudaPlugin(""));
  return api->cuda_device_count();
}

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(int device) {
  PS_ASSIGN_OR_RETURN(const CudaPluginApi* api, LoadCudaPlugin(""));
  return api->create_cuda_backend(device);
}

absl::StatusOr<CudaPlacement> CudaPlacementOf(const ComputeBackend& backend) {
  if (!CudaPluginLoaded()) {  // then no CUDA backend exists in this process
    return absl::FailedPreconditionError(absl::StrCat(
        "not a CUDA backend: ", backend.name(), " (CUDA not loaded)"));
  }
  PS_ASSIGN_OR_RETURN(const CudaPluginApi* api, LoadCudaPlugin(""));
  return api->cuda_placement_of(backend);
}

}  // namespace pstrain
