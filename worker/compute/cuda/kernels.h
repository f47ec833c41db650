// The CUDA kernels of the CUDA backend (kernels.cu, built by nvcc). Each
// function enqueues its kernel on `stream` and returns the launch error
// (cudaGetLastError, after clearing any stale error a previous call left in
// the thread's last-error slot, e.g. cudaErrorNotReady from a stream query);
// failures while the kernel runs surface at a later synchronising call.
// Pointers are device pointers; sizes are unchecked here (CudaBackend checks
// them). Semantics are those of ComputeBackend's methods of the same names.
// Every kernel is deterministic (fixed reduction orders, no atomics).
#ifndef PSTRAIN_WORKER_COMPUTE_CUDA_KERNELS_H_
#define PSTRAIN_WORKER_COMPUTE_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pstrain {
namespace cuda {

// Mirrors pstrain::Activation (kept apart so nvcc needs no Abseil headers).
enum class KernelActivation : int { kIdentity, kRelu, kTanh, kGelu };

cudaError_t LaunchBiasAdd(int64_t rows, int64_t cols, const float* bias,
                          float* z, cudaStream_t stream);
cudaError_t LaunchActivationForward(KernelActivation act, int64_t n,
                                    const float* z, float* a,
                                    cudaStream_t stream);
cudaError_t LaunchActivationBackward(KernelActivation act, int64_t n,
                                     const float* z, const float* a,
                                     float* delta, cudaStream_t stream);
// y[k] += x[k] and x[k] *= alpha for k < n (gradient accumulation).
cudaError_t LaunchAdd(int64_t n, const float* x, float* y, cudaStream_t stream);
cudaError_t LaunchScale(int64_t n, float alpha, float* x, cudaStream_t stream);
// `dlogits` / `doutputs` may be null.
cudaError_t LaunchSoftmaxCrossEntropy(int64_t rows, int64_t cols,
                                      const float* logits, const float* labels,
                                      float grad_scale, float* losses,
                                      float* dlogits, cudaStream_t stream);
cudaError_t LaunchSquaredError(int64_t rows, int64_t cols, const float* outputs,
                               const float* labels, float grad_scale,
                               float* losses, float* doutputs,
                               cudaStream_t stream);
// Floats of device scratch that LaunchColumnSum needs for a rows x cols
// matrix (0 when one pass suffices).
int64_t ColumnSumScratchFloats(int64_t rows, int64_t cols);
// Column sums in two passes when the matrix is tall: blocks sum fixed row
// ranges into `scratch` (ColumnSumScratchFloats floats; may be null when
// that is 0), then one pass sums the partial rows in order.
cudaError_t LaunchColumnSum(int64_t rows, int64_t cols, const float* x,
                            float* out, float* scratch, cudaStream_t stream);
// Embedding bags (ComputeBackend::EmbeddingBagForward / Backward): one
// thread per output element, summing in the contract's order with one
// rounding per operation (__fadd_rn, __fmul_rn), so the results are the CPU
// twin's bit for bit. `scale` is 1 (sum) or 1.0f / bag_size (mean); index,
// row_starts and entries are floats holding integers.
cudaError_t LaunchEmbeddingBagForward(int64_t bags, int64_t bag_size,
                                      int64_t dim, float scale,
                                      const float* index, const float* rows,
                                      float* out, cudaStream_t stream);
cudaError_t LaunchEmbeddingBagBackward(int64_t bag_size, int64_t dim,
                                       float scale, const float* dout,
                                       const float* row_starts,
                                       const float* entries, int64_t num_rows,
                                       float* drows, cudaStream_t stream);
// *out = sum of x[0, n) in double.
cudaError_t LaunchSum(int64_t n, const float* x, double* out,
                      cudaStream_t stream);

}  // namespace cuda
}  // namespace pstrain

#endif  // PSTRAIN_WORKER_COMPUTE_CUDA_KERNELS_H_
