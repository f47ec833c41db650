#include <cstdint>

#include "worker/compute/cuda/kernels.h"
#include "worker/compute/cuda/softmax_formula.h"

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

// Blocks for `threads` threads in blocks of kThreads, no grid-stride loop.
unsigned int BlocksFor(int64_t threads) {
  return static_cast<unsigned int>((threads + kThreads - 1) / kThreads);
}

// A failed cudaStreamQuery (cudaErrorNotReady) or another non-sticky error
// of an earlier call may still sit in this thread's last-error slot; the
// launch check below must only see the launch's own error. Sticky errors
// (a kernel fault) are not cleared by this and surface again.
void ClearStaleError() { (void)cudaGetLastError(); }

__device__ int64_t GlobalIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t GridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__device__ float WarpSum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(~0u, v, o);
  return v;
}

// z[k] += bias[k mod cols] for k < n. The column advances by the stride's
// remainder each iteration: two 64-bit divisions per thread, none per
// element.
__global__ void BiasAddKernel(int64_t n, int64_t cols, const float* bias,
                              float* z) {
  const int64_t stride = GridStride();
  const int64_t step = stride % cols;
  int64_t k = GlobalIndex();
  int64_t j = k % cols;
  for (; k < n; k += stride) {
    z[k] += bias[j];
    j += step;
    if (j >= cols) j -= cols;
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

// One rounding each, like the CPU twin's loops: bit-identical results.
__global__ void AddKernel(int64_t n, const float* x, float* y) {
  for (int64_t k = GlobalIndex(); k < n; k += GridStride()) {
    y[k] = __fadd_rn(y[k], x[k]);
  }
}

__global__ void ScaleKernel(int64_t n, float alpha, float* x) {
  for (int64_t k = GlobalIndex(); k < n; k += GridStride()) {
    x[k] = __fmul_rn(x[k], alpha);
  }
}

// One warp per row: the row's maximum and its first index by warp shuffles,
// then rest = sum of exp(z - max) over the other entries, then the loss and
// probabilities of softmax_formula.h.
__global__ void SoftmaxCrossEntropyKernel(int64_t rows, int64_t cols,
                                          const float* logits,
                                          const float* labels, float scale,
                                          float* losses, float* dlogits) {
  const int64_t row = GlobalIndex() / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // the whole warp: rows are per warp
  const float* z = logits + row * cols;
  constexpr long long kNone = 0x7fffffffffffffffLL;
  float max = -INFINITY;
  long long arg = kNone;
  for (int64_t j = lane; j < cols; j += 32) {
    if (arg == kNone || z[j] > max) {
      max = z[j];
      arg = j;
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    const float other_max = __shfl_xor_sync(~0u, max, o);
    const long long other_arg = __shfl_xor_sync(~0u, arg, o);
    if (other_max > max || (other_max == max && other_arg < arg)) {
      max = other_max;
      arg = other_arg;
    }
  }
  // With NaN logits the lanes may disagree: every lane takes lane 0's.
  max = __shfl_sync(~0u, max, 0);
  arg = __shfl_sync(~0u, arg, 0);
  float rest = 0;
  for (int64_t j = lane; j < cols; j += 32) {
    if (j != arg) rest += expf(z[j] - max);
  }
  rest = WarpSum(rest);
  const int64_t y = static_cast<int64_t>(labels[row]);
  if (lane == 0) losses[row] = SoftmaxCrossEntropyLoss(max, z[y], rest);
  if (dlogits == nullptr) return;
  for (int64_t j = lane; j < cols; j += 32) {
    dlogits[row * cols + j] =
        scale * (SoftmaxProbability(z[j], max, rest) - (j == y ? 1.0f : 0.0f));
  }
}

// `group` adjacent lanes (a power of two <= 32) per row, so that the lanes
// of a warp read adjacent addresses (coalesced) for any width; the group's
// partial losses (double, like the CPU twin) are combined by shuffles within
// the group. Every lane takes part in the shuffles, in range or not.
__global__ void SquaredErrorKernel(int64_t rows, int64_t cols, int group,
                                   const float* outputs, const float* labels,
                                   float scale, float* losses,
                                   float* doutputs) {
  const int64_t thread = GlobalIndex();
  const int64_t row = thread / group;
  const int lane = static_cast<int>(thread % group);
  const bool active = row < rows;
  double loss = 0;
  if (active) {
    const float label = labels[row];
    for (int64_t j = lane; j < cols; j += group) {
      const float target =
          cols == 1 ? label : (j == static_cast<int64_t>(label) ? 1.0f : 0);
      const float d = outputs[row * cols + j] - target;
      loss += 0.5 * d * d;
      if (doutputs != nullptr) doutputs[row * cols + j] = scale * d;
    }
  }
  for (int o = group / 2; o > 0; o /= 2) {
    loss += __shfl_xor_sync(~0u, loss, o);
  }
  if (active && lane == 0) losses[row] = static_cast<float>(loss);
}

// Block (32, 8): 32 adjacent columns (coalesced reads) of the rows
// [blockIdx.y * rows_per_chunk, + rows_per_chunk), threadIdx.y striding the
// rows; the 8 partial sums are combined in shared memory in a fixed order
// and written to out[blockIdx.y * cols + col]. Deterministic: the partition
// depends only on the sizes, no atomics.
__global__ void ColumnSumKernel(int64_t rows, int64_t cols,
                                int64_t rows_per_chunk, const float* x,
                                float* out) {
  __shared__ float partial[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end =
      rows - begin < rows_per_chunk ? rows : begin + rows_per_chunk;
  float sum = 0;
  if (col < cols) {
    for (int64_t i = begin + threadIdx.y; i < end; i += 8) {
      sum += x[i * cols + col];
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    for (int r = 1; r < 8; ++r) sum += partial[r][threadIdx.x];
    out[static_cast<int64_t>(blockIdx.y) * cols + col] = sum;
  }
}

// out[b, j]: thread k = b * dim + j.
__global__ void EmbeddingBagForwardKernel(int64_t n, int64_t bag_size,
                                          int64_t dim, float scale,
                                          const float* index, const float* rows,
                                          float* out) {
  for (int64_t k = GlobalIndex(); k < n; k += GridStride()) {
    const int64_t b = k / dim, j = k % dim;
    float sum = 0.0f;
    for (int64_t t = 0; t < bag_size; ++t) {
      const int64_t u = static_cast<int64_t>(index[b * bag_size + t]);
      sum = __fadd_rn(sum, rows[u * dim + j]);
    }
    out[k] = __fmul_rn(sum, scale);
  }
}

// drows[u, j]: thread k = u * dim + j gathers the entries of row u.
__global__ void EmbeddingBagBackwardKernel(int64_t n, int64_t bag_size,
                                           int64_t dim, float scale,
                                           const float* dout,
                                           const float* row_starts,
                                           const float* entries, float* drows) {
  for (int64_t k = GlobalIndex(); k < n; k += GridStride()) {
    const int64_t u = k / dim, j = k % dim;
    const int64_t begin = static_cast<int64_t>(row_starts[u]);
    const int64_t end = static_cast<int64_t>(row_starts[u + 1]);
    float sum = 0.0f;
    for (int64_t e = begin; e < end; ++e) {
      const int64_t b = static_cast<int64_t>(entries[e]) / bag_size;
      sum = __fadd_rn(sum, dout[b * dim + j]);
    }
    drows[k] = __fmul_rn(sum, scale);
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

// Column sums: rows per block of the first pass, and the most row chunks
// (about 1024 blocks in all: several per SM on the largest GPUs).
constexpr int64_t kColumnSumRowsPerChunk = 256;
constexpr int64_t kColumnSumMaxBlocks = 1024;

int64_t ColumnSumChunks(int64_t rows, int64_t cols) {
  const int64_t col_blocks = (cols + 31) / 32;
  int64_t chunks = (rows + kColumnSumRowsPerChunk - 1) / kColumnSumRowsPerChunk;
  int64_t most = kColumnSumMaxBlocks / (col_blocks > 0 ? col_blocks : 1);
  if (most > 65535) most = 65535;  // gridDim.y
  if (chunks > most) chunks = most;
  return chunks > 1 ? chunks : 1;
}

}  // namespace

cudaError_t LaunchBiasAdd(int64_t rows, int64_t cols, const float* bias,
                          float* z, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  ClearStaleError();
  BiasAddKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(rows * cols, cols,
                                                              bias, z);
  return cudaGetLastError();
}

cudaError_t LaunchActivationForward(KernelActivation act, int64_t n,
                                    const float* z, float* a,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ClearStaleError();
  ActivationForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(act, n, z, a);
  return cudaGetLastError();
}

cudaError_t LaunchActivationBackward(KernelActivation act, int64_t n,
                                     const float* z, const float* a,
                                     float* delta, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ClearStaleError();
  ActivationBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(act, n, z, a,
                                                               delta);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(int64_t n, const float* x, float* y,
                      cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ClearStaleError();
  AddKernel<<<Blocks(n), kThreads, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchScale(int64_t n, float alpha, float* x, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ClearStaleError();
  ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(n, alpha, x);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxCrossEntropy(int64_t rows, int64_t cols,
                                      const float* logits, const float* labels,
                                      float grad_scale, float* losses,
                                      float* dlogits, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  ClearStaleError();
  SoftmaxCrossEntropyKernel<<<BlocksFor(rows * 32), kThreads, 0, stream>>>(
      rows, cols, logits, labels, grad_scale, losses, dlogits);
  return cudaGetLastError();
}

cudaError_t LaunchSquaredError(int64_t rows, int64_t cols, const float* outputs,
                               const float* labels, float grad_scale,
                               float* losses, float* doutputs,
                               cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  int group = 1;
  while (group < 32 && group < cols) group *= 2;
  ClearStaleError();
  SquaredErrorKernel<<<BlocksFor(rows * group), kThreads, 0, stream>>>(
      rows, cols, group, outputs, labels, grad_scale, losses, doutputs);
  return cudaGetLastError();
}

int64_t ColumnSumScratchFloats(int64_t rows, int64_t cols) {
  const int64_t chunks = ColumnSumChunks(rows, cols);
  return chunks > 1 ? chunks * cols : 0;
}

cudaError_t LaunchColumnSum(int64_t rows, int64_t cols, const float* x,
                            float* out, float* scratch, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  const dim3 block(32, 8);
  const unsigned int col_blocks = static_cast<unsigned int>((cols + 31) / 32);
  const int64_t chunks = ColumnSumChunks(rows, cols);
  ClearStaleError();
  if (chunks == 1) {
    ColumnSumKernel<<<dim3(col_blocks, 1), block, 0, stream>>>(rows, cols, rows,
                                                               x, out);
    return cudaGetLastError();
  }
  const int64_t per_chunk = (rows + chunks - 1) / chunks;
  ColumnSumKernel<<<dim3(col_blocks, static_cast<unsigned int>(chunks)), block,
                    0, stream>>>(rows, cols, per_chunk, x, scratch);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  ColumnSumKernel<<<dim3(col_blocks, 1), block, 0, stream>>>(
      chunks, cols, chunks, scratch, out);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingBagForward(int64_t bags, int64_t bag_size,
                                      int64_t dim, float scale,
                                      const float* index, const float* rows,
                                      float* out, cudaStream_t stream) {
  const int64_t n = bags * dim;
  if (n == 0) return cudaSuccess;
  ClearStaleError();
  EmbeddingBagForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(
      n, bag_size, dim, scale, index, rows, out);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingBagBackward(int64_t bag_size, int64_t dim,
                                       float scale, const float* dout,
                                       const float* row_starts,
                                       const float* entries, int64_t num_rows,
                                       float* drows, cudaStream_t stream) {
  const int64_t n = num_rows * dim;
  if (n == 0) return cudaSuccess;
  ClearStaleError();
  EmbeddingBagBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(
      n, bag_size, dim, scale, dout, row_starts, entries, drows);
  return cudaGetLastError();
}

cudaError_t LaunchSum(int64_t n, const float* x, double* out,
                      cudaStream_t stream) {
  ClearStaleError();
  SumKernel<<<1, kThreads, 0, stream>>>(n, x, out);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace pstrain
