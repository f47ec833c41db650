// The entry point of libpstrain_cuda.so
// (worker/compute/cuda/cuda_plugin_api.h): the real CUDA backend and NCCL
// reducer, compiled into the shared object that ps_worker loads on demand. The
// linker script cuda_plugin.lds exports only pstrain_cuda_plugin_v1, so the
// object's own copies of the functions below (and of everything it links
// statically) never clash with ps_worker's forwarding definitions of the same
// names.
#include "worker/allreduce/nccl_allreducer.h"
#include "worker/compute/cuda/cuda_backend.h"
#include "worker/compute/cuda/cuda_plugin_api.h"

namespace pstrain {
namespace {

CudaPluginApi MakeApi() {
  CudaPluginApi api;
  api.cuda_available = &CudaAvailable;
  api.cuda_device_count = &CudaDeviceCount;
  api.create_cuda_backend = &CreateCudaBackend;
  api.cuda_placement_of = &CudaPlacementOf;
  api.built_with_nccl = &BuiltWithNccl;
  api.nccl_usable = &NcclUsable;
  api.new_nccl_unique_id = &NewNcclUniqueId;
  api.create_nccl_allreducer = &CreateNcclAllReducer;
  return api;
}

}  // namespace
}  // namespace pstrain

extern "C" __attribute__((visibility("default"))) const pstrain::CudaPluginApi*
pstrain_cuda_plugin_v1() {
  static const pstrain::CudaPluginApi api = pstrain::MakeApi();
  return &api;
}
