#include <cstdint>

#include "worker/cuda/kernels.h"

namespace pstrain {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// Blocks for a grid-stride loop over n elements.
int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65536 ? blocks : 65536);
}

__device__ int64_t GlobalIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t GridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__device__ float WarpMax(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(~0u, v, o));
  return v;
}
__device__ float WarpSum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(~0u, v, o);
  return v;
}

__global__ void BiasAddKernel(int64_t rows, int64_t cols, const float* bias,
                              float* z) {
  for (int64_t k = GlobalIndex(); k < rows * cols; k += GridStride()) {
    z[k] += bias[k % cols];
  }
}

__device__ float Activate(KernelActivation act, float z) {
  switch (act) {
    case KernelActivation::kRelu:
      return z > 0 ? z : 0;
    case KernelActivation::kTanh:
      return tanhf(z);
    case KernelActivation::kGelu:
      return 0.5f * z * (1 + tanhf(kGeluC * (z + kGeluA * z * z * z)));
    default:
      return z;
  }
}

__device__ float Derivative(KernelActivation act, float z, float a) {
  switch (act) {
    case KernelActivation::kRelu:
      return z > 0 ? 1 : 0;
    case KernelActivation::kTanh:
      return 1 - a * a;
    case KernelActivation::kGelu: {
      const float t = tanhf(kGeluC * (z + kGeluA * z * z * z));
      return 0.5f * (1 + t) +
             0.5f * z * (1 - t * t) * kGeluC * (1 + 3 * kGeluA * z * z);
    }
    default:
      return 1;
  }
}

__global__ void ActivationForwardKernel(KernelActivation act, int64_t n,
                                        const float* z, float* a) {
  for (int64_t k = GlobalIndex(); k < n; k += GridStride()) {
    a[k] = Activate(act, z[k]);
  }
}

__global__ void ActivationBackwardKernel(KernelActivation act, int64_t n,
                                         const float* z, const float* a,
                                         float* delta) {
  for (int64_t k = GlobalIndex(); k < n; k += GridStride()) {
    delta[k] *= Derivative(act, z[k], a[k]);
  }
}

// One warp per row: max, then the sum of exp(z - max), by warp shuffles.
__global__ void SoftmaxCrossEntropyKernel(int64_t rows, int64_t cols,
                                          const float* logits,
                                          const float* labels, float scale,
                                          float* losses, float* dlogits) {
  const int64_t row = GlobalIndex() / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* z = logits + row * cols;
  float max = -INFINITY;
  for (int64_t j = lane; j < cols; j += 32) max = fmaxf(max, z[j]);
  max = WarpMax(max);
  float sum = 0;
  for (int64_t j = lane; j < cols; j += 32) sum += expf(z[j] - max);
  sum = WarpSum(sum);
  const int64_t y = static_cast<int64_t>(labels[row]);
  if (lane == 0) losses[row] = logf(sum) + max - z[y];
  if (dlogits == nullptr) return;
  for (int64_t j = lane; j < cols; j += 32) {
    dlogits[row * cols + j] =
        scale * (expf(z[j] - max) / sum - (j == y ? 1.0f : 0.0f));
  }
}

// One thread per row (output widths are small).
__global__ void SquaredErrorKernel(int64_t rows, int64_t cols,
                                   const float* outputs, const float* labels,
                                   float scale, float* losses,
                                   float* doutputs) {
  for (int64_t i = GlobalIndex(); i < rows; i += GridStride()) {
    const float label = labels[i];
    double loss = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const float target =
          cols == 1 ? label : (j == static_cast<int64_t>(label) ? 1.0f : 0);
      const float d = outputs[i * cols + j] - target;
      loss += 0.5 * d * d;
      if (doutputs != nullptr) doutputs[i * cols + j] = scale * d;
    }
    losses[i] = static_cast<float>(loss);
  }
}

// Block (32, 8): 32 adjacent columns (coalesced reads), 8 row strides,
// combined in shared memory. Deterministic: no atomics.
__global__ void ColumnSumKernel(int64_t rows, int64_t cols, const float* x,
                                float* out) {
  __shared__ float partial[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float sum = 0;
  if (col < cols) {
    for (int64_t i = threadIdx.y; i < rows; i += 8) sum += x[i * cols + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    for (int r = 1; r < 8; ++r) sum += partial[r][threadIdx.x];
    out[col] = sum;
  }
}

// One block; the losses it sums are per-example (small n).
__global__ void SumKernel(int64_t n, const float* x, double* out) {
  __shared__ double partial[kThreads];
  double sum = 0;
  for (int64_t k = threadIdx.x; k < n; k += kThreads) sum += x[k];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0];
}

}  // namespace

cudaError_t LaunchBiasAdd(int64_t rows, int64_t cols, const float* bias,
                          float* z, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  BiasAddKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(rows, cols, bias,
                                                              z);
  return cudaGetLastError();
}

cudaError_t LaunchActivationForward(KernelActivation act, int64_t n,
                                    const float* z, float* a,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ActivationForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(act, n, z, a);
  return cudaGetLastError();
}

cudaError_t LaunchActivationBackward(KernelActivation act, int64_t n,
                                     const float* z, const float* a,
                                     float* delta, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ActivationBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(act, n, z, a,
                                                               delta);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxCrossEntropy(int64_t rows, int64_t cols,
                                      const float* logits, const float* labels,
                                      float grad_scale, float* losses,
                                      float* dlogits, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = (rows * 32 + kThreads - 1) / kThreads;
  SoftmaxCrossEntropyKernel<<<blocks, kThreads, 0, stream>>>(
      rows, cols, logits, labels, grad_scale, losses, dlogits);
  return cudaGetLastError();
}

cudaError_t LaunchSquaredError(int64_t rows, int64_t cols, const float* outputs,
                               const float* labels, float grad_scale,
                               float* losses, float* doutputs,
                               cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  SquaredErrorKernel<<<Blocks(rows), kThreads, 0, stream>>>(
      rows, cols, outputs, labels, grad_scale, losses, doutputs);
  return cudaGetLastError();
}

cudaError_t LaunchColumnSum(int64_t rows, int64_t cols, const float* x,
                            float* out, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  const int64_t blocks = (cols + 31) / 32;
  ColumnSumKernel<<<blocks, dim3(32, 8), 0, stream>>>(rows, cols, x, out);
  return cudaGetLastError();
}

cudaError_t LaunchSum(int64_t n, const float* x, double* out,
                      cudaStream_t stream) {
  SumKernel<<<1, kThreads, 0, stream>>>(n, x, out);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace pstrain
