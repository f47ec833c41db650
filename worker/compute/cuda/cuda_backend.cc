#include "worker/compute/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "worker/compute/cuda/kernels.h"

namespace pstrain {
namespace {

// A failed CUDA runtime call as a Status naming the call and its site. Also
// clears the thread's last-error slot, so that a later launch check
// (cudaGetLastError) does not report this error again.
absl::Status CudaError(cudaError_t err, absl::string_view call,
                       const char* file, int line) {
  cudaGetLastError();
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (err == cudaErrorMemoryAllocation) {
    code = absl::StatusCode::kResourceExhausted;
  } else if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
             err == cudaErrorDevicesUnavailable) {
    code = absl::StatusCode::kFailedPrecondition;
  }
  return absl::Status(code, absl::StrCat(file, ":", line, ": ", call, ": ",
                                         cudaGetErrorString(err), " (",
                                         cudaGetErrorName(err), ")"));
}

absl::Status CublasError(cublasStatus_t st, absl::string_view call,
                         const char* file, int line) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (st == CUBLAS_STATUS_ALLOC_FAILED) {
    code = absl::StatusCode::kResourceExhausted;
  } else if (st == CUBLAS_STATUS_NOT_INITIALIZED) {
    code = absl::StatusCode::kFailedPrecondition;
  } else if (st == CUBLAS_STATUS_INVALID_VALUE) {
    code = absl::StatusCode::kInvalidArgument;
  }
  return absl::Status(code, absl::StrCat(file, ":", line, ": ", call, ": ",
                                         cublasGetStatusString(st), " (",
                                         cublasGetStatusName(st), ")"));
}

#define PS_CUDA_RETURN_IF_ERROR(expr)                            \
  do {                                                           \
    const cudaError_t ps_cuda_err_ = (expr);                     \
    if (ps_cuda_err_ != cudaSuccess) {                           \
      return CudaError(ps_cuda_err_, #expr, __FILE__, __LINE__); \
    }                                                            \
  } while (0)

#define PS_CUBLAS_RETURN_IF_ERROR(expr)                             \
  do {                                                              \
    const cublasStatus_t ps_cublas_st_ = (expr);                    \
    if (ps_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                   \
      return CublasError(ps_cublas_st_, #expr, __FILE__, __LINE__); \
    }                                                               \
  } while (0)

cuda::KernelActivation ToKernel(Activation act) {
  switch (act) {
    case Activation::kRelu:
      return cuda::KernelActivation::kRelu;
    case Activation::kTanh:
      return cuda::KernelActivation::kTanh;
    case Activation::kGelu:
      return cuda::KernelActivation::kGelu;
    default:
      return cuda::KernelActivation::kIdentity;
  }
}

class CudaBackend : public ComputeBackend {
 public:
  CudaBackend() = default;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // Releases what Init acquired (also after a failed Init), on the
  // backend's device: this thread's current device may be another. Errors
  // are ignored: there is no one left to tell.
  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    cudaFree(column_scratch_);
    cudaFree(sum_device_);
    cudaFreeHost(sum_host_);
    for (int h = 0; h < 2; ++h) {
      cudaFreeHost(staging_[h]);
      if (staging_free_[h] != nullptr) cudaEventDestroy(staging_free_[h]);
    }
    if (direct_done_ != nullptr) cudaEventDestroy(direct_done_);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    cudaGetLastError();
  }

  absl::Status Init(int device) {
    device_ = device;
    PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    cudaDeviceProp prop;
    PS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device_));
    name_ =
        absl::StrCat("cuda (", prop.name, ", device ", device_, ", cuBLAS)");
    PS_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PS_CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
    PS_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
    // Full fp32 whatever the defaults (see cuda_backend.h): pedantic math
    // prescribes fp32 compute in every phase, so neither TF32 nor an fp32
    // emulation switched on by the environment can change the products.
    PS_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(cublas_, CUBLAS_PEDANTIC_MATH));
    for (int h = 0; h < 2; ++h) {
      PS_CUDA_RETURN_IF_ERROR(
          cudaMallocHost(&staging_[h], kStagingFloats * sizeof(float)));
      PS_CUDA_RETURN_IF_ERROR(
          cudaEventCreateWithFlags(&staging_free_[h], cudaEventDisableTiming));
    }
    PS_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&direct_done_, cudaEventDisableTiming));
    PS_CUDA_RETURN_IF_ERROR(cudaMalloc(&sum_device_, sizeof(double)));
    PS_CUDA_RETURN_IF_ERROR(cudaMallocHost(&sum_host_, sizeof(double)));
    return absl::OkStatus();
  }

  std::string name() const override { return name_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // From pinned memory (a HostBuffer): one DMA straight from `src`, and a
  // wait for it, since the caller may reuse `src` when the call returns.
  // Otherwise chunks go through the two pinned halves in turn, so the host
  // copy into one half overlaps the DMA out of the other.
  absl::Status CopyToDevice(const float* src, int64_t n,
                            DeviceBuffer* dst) override {
    PS_RETURN_IF_ERROR(CheckSize("CopyToDevice", "dst", *dst, n));
    PS_RETURN_IF_ERROR(Enter());
    if (n > 0 && IsPinnedHost(src)) {
      PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->data(), src,
                                              n * sizeof(float),
                                              cudaMemcpyHostToDevice, stream_));
      PS_CUDA_RETURN_IF_ERROR(cudaEventRecord(direct_done_, stream_));
      PS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(direct_done_));
      return absl::OkStatus();
    }
    for (int64_t off = 0; off < n; off += kStagingFloats) {
      const int64_t len = std::min(kStagingFloats, n - off);
      const int h = next_half_;
      next_half_ ^= 1;
      // The half's previous DMA must have read it before we overwrite it.
      PS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staging_free_[h]));
      std::memcpy(staging_[h], src + off, len * sizeof(float));
      PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->data() + off, staging_[h],
                                              len * sizeof(float),
                                              cudaMemcpyHostToDevice, stream_));
      PS_CUDA_RETURN_IF_ERROR(cudaEventRecord(staging_free_[h], stream_));
    }
    return absl::OkStatus();
  }

  // Into pinned memory: one DMA straight to `dst`. Otherwise through the
  // staging halves: chunk c + 1 is in flight while the host copies chunk c
  // out.
  absl::Status CopyToHost(const DeviceBuffer& src, int64_t n,
                          float* dst) override {
    PS_RETURN_IF_ERROR(CheckSize("CopyToHost", "src", src, n));
    PS_RETURN_IF_ERROR(Enter());
    if (n == 0) return Synchronize();
    if (IsPinnedHost(dst)) {
      PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          dst, src.data(), n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
      PS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      return absl::OkStatus();
    }
    const int64_t chunks = (n + kStagingFloats - 1) / kStagingFloats;
    auto enqueue = [&](int64_t c) -> absl::Status {
      const int64_t off = c * kStagingFloats;
      const int64_t len = std::min(kStagingFloats, n - off);
      PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_[c % 2], src.data() + off,
                                              len * sizeof(float),
                                              cudaMemcpyDeviceToHost, stream_));
      PS_CUDA_RETURN_IF_ERROR(cudaEventRecord(staging_free_[c % 2], stream_));
      return absl::OkStatus();
    };
    PS_RETURN_IF_ERROR(enqueue(0));
    for (int64_t c = 0; c < chunks; ++c) {
      if (c + 1 < chunks) PS_RETURN_IF_ERROR(enqueue(c + 1));
      PS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staging_free_[c % 2]));
      const int64_t off = c * kStagingFloats;
      std::memcpy(dst + off, staging_[c % 2],
                  std::min(kStagingFloats, n - off) * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
  // gets B first and the sizes swapped; no data moves.
  absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const DeviceBuffer& a, const DeviceBuffer& b,
                    float beta, DeviceBuffer* c) override {
    PS_RETURN_IF_ERROR(CheckGemm(m, n, k, a, b, *c));
    if (m == 0 || n == 0) return absl::OkStatus();
    PS_RETURN_IF_ERROR(Enter());
    if (k == 0) {  // C = beta * C, without relying on cuBLAS for k == 0
      if (beta == 0) {
        PS_CUDA_RETURN_IF_ERROR(
            cudaMemsetAsync(c->data(), 0, m * n * sizeof(float), stream_));
      } else if (beta != 1) {
        PS_CUBLAS_RETURN_IF_ERROR(
            cublasSscal_64(cublas_, m * n, &beta, c->data(), 1));
      }
      return absl::OkStatus();
    }
    const int lda = trans_a ? m : k;
    const int ldb = trans_b ? k : n;
    PS_CUBLAS_RETURN_IF_ERROR(
        cublasSgemm(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                    b.data(), ldb, a.data(), lda, &beta, c->data(), n));
    return absl::OkStatus();
  }

  absl::Status BiasAdd(int64_t rows, int64_t cols, const DeviceBuffer& bias,
                       DeviceBuffer* z) override {
    PS_RETURN_IF_ERROR(CheckSize("BiasAdd", "bias", bias, cols));
    PS_RETURN_IF_ERROR(CheckMatrix("BiasAdd", "z", *z, rows, cols));
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(
        cuda::LaunchBiasAdd(rows, cols, bias.data(), z->data(), stream_));
    return absl::OkStatus();
  }

  absl::Status ActivationForward(Activation act, int64_t n,
                                 const DeviceBuffer& z,
                                 DeviceBuffer* a) override {
    PS_RETURN_IF_ERROR(CheckSize("ActivationForward", "z", z, n));
    PS_RETURN_IF_ERROR(CheckSize("ActivationForward", "a", *a, n));
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(cuda::LaunchActivationForward(
        ToKernel(act), n, z.data(), a->data(), stream_));
    return absl::OkStatus();
  }

  absl::Status ActivationBackward(Activation act, int64_t n,
                                  const DeviceBuffer& z, const DeviceBuffer& a,
                                  DeviceBuffer* delta) override {
    PS_RETURN_IF_ERROR(CheckSize("ActivationBackward", "z", z, n));
    PS_RETURN_IF_ERROR(CheckSize("ActivationBackward", "a", a, n));
    PS_RETURN_IF_ERROR(CheckSize("ActivationBackward", "delta", *delta, n));
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(cuda::LaunchActivationBackward(
        ToKernel(act), n, z.data(), a.data(), delta->data(), stream_));
    return absl::OkStatus();
  }

  absl::Status SoftmaxCrossEntropy(int64_t rows, int64_t cols,
                                   const DeviceBuffer& logits,
                                   const DeviceBuffer& labels, float grad_scale,
                                   DeviceBuffer* losses,
                                   DeviceBuffer* dlogits) override {
    PS_RETURN_IF_ERROR(CheckHead("SoftmaxCrossEntropy", rows, cols, logits,
                                 labels, *losses, dlogits));
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(cuda::LaunchSoftmaxCrossEntropy(
        rows, cols, logits.data(), labels.data(), grad_scale, losses->data(),
        dlogits == nullptr ? nullptr : dlogits->data(), stream_));
    return absl::OkStatus();
  }

  absl::Status SquaredError(int64_t rows, int64_t cols,
                            const DeviceBuffer& outputs,
                            const DeviceBuffer& labels, float grad_scale,
                            DeviceBuffer* losses,
                            DeviceBuffer* doutputs) override {
    PS_RETURN_IF_ERROR(CheckHead("SquaredError", rows, cols, outputs, labels,
                                 *losses, doutputs));
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(cuda::LaunchSquaredError(
        rows, cols, outputs.data(), labels.data(), grad_scale, losses->data(),
        doutputs == nullptr ? nullptr : doutputs->data(), stream_));
    return absl::OkStatus();
  }

  absl::Status Add(int64_t n, const DeviceBuffer& x, DeviceBuffer* y) override {
    PS_RETURN_IF_ERROR(CheckSize("Add", "x", x, n));
    PS_RETURN_IF_ERROR(CheckSize("Add", "y", *y, n));
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(cuda::LaunchAdd(n, x.data(), y->data(), stream_));
    return absl::OkStatus();
  }

  absl::Status Scale(int64_t n, float alpha, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckSize("Scale", "x", *x, n));
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(cuda::LaunchScale(n, alpha, x->data(), stream_));
    return absl::OkStatus();
  }

  absl::Status ColumnSum(int64_t rows, int64_t cols, const DeviceBuffer& x,
                         DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(CheckMatrix("ColumnSum", "x", x, rows, cols));
    PS_RETURN_IF_ERROR(CheckSize("ColumnSum", "out", *out, cols));
    PS_RETURN_IF_ERROR(Enter());
    PS_RETURN_IF_ERROR(
        ReserveColumnScratch(cuda::ColumnSumScratchFloats(rows, cols)));
    PS_CUDA_RETURN_IF_ERROR(cuda::LaunchColumnSum(
        rows, cols, x.data(), out->data(), column_scratch_, stream_));
    return absl::OkStatus();
  }

  absl::StatusOr<double> Sum(int64_t n, const DeviceBuffer& x) override {
    PS_RETURN_IF_ERROR(CheckSize("Sum", "x", x, n));
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(cuda::LaunchSum(n, x.data(), sum_device_, stream_));
    PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sum_host_, sum_device_,
                                            sizeof(double),
                                            cudaMemcpyDeviceToHost, stream_));
    PS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return *sum_host_;
  }

  absl::Status EmbeddingBagForward(int64_t bags, int64_t bag_size, int64_t dim,
                                   Pooling pooling, const DeviceBuffer& index,
                                   const DeviceBuffer& rows, int64_t num_rows,
                                   DeviceBuffer* out) override {
    constexpr char kOp[] = "EmbeddingBagForward";
    PS_RETURN_IF_ERROR(CheckEmbeddingBag(kOp, bags, bag_size, dim, num_rows));
    PS_RETURN_IF_ERROR(CheckSize(kOp, "index", index, bags * bag_size));
    PS_RETURN_IF_ERROR(CheckMatrix(kOp, "rows", rows, num_rows, dim));
    PS_RETURN_IF_ERROR(CheckMatrix(kOp, "out", *out, bags, dim));
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(cuda::LaunchEmbeddingBagForward(
        bags, bag_size, dim, PoolingScale(pooling, bag_size), index.data(),
        rows.data(), out->data(), stream_));
    return absl::OkStatus();
  }

  absl::Status EmbeddingBagBackward(int64_t bags, int64_t bag_size, int64_t dim,
                                    Pooling pooling, const DeviceBuffer& dout,
                                    const DeviceBuffer& row_starts,
                                    const DeviceBuffer& entries,
                                    int64_t num_rows,
                                    DeviceBuffer* drows) override {
    constexpr char kOp[] = "EmbeddingBagBackward";
    PS_RETURN_IF_ERROR(CheckEmbeddingBag(kOp, bags, bag_size, dim, num_rows));
    PS_RETURN_IF_ERROR(CheckMatrix(kOp, "dout", dout, bags, dim));
    PS_RETURN_IF_ERROR(CheckSize(kOp, "row_starts", row_starts, num_rows + 1));
    PS_RETURN_IF_ERROR(CheckSize(kOp, "entries", entries, bags * bag_size));
    PS_RETURN_IF_ERROR(CheckMatrix(kOp, "drows", *drows, num_rows, dim));
    PS_RETURN_IF_ERROR(Enter());
    PS_CUDA_RETURN_IF_ERROR(cuda::LaunchEmbeddingBagBackward(
        bag_size, dim, PoolingScale(pooling, bag_size), dout.data(),
        row_starts.data(), entries.data(), num_rows, drows->data(), stream_));
    return absl::OkStatus();
  }

 protected:
  absl::StatusOr<float*> AllocateRaw(int64_t size) override {
    if (size == 0) return nullptr;
    PS_RETURN_IF_ERROR(Enter());
    float* data = nullptr;
    const cudaError_t err = cudaMalloc(&data, size * sizeof(float));
    if (err != cudaSuccess) {
      return CudaError(err, absl::StrCat("cudaMalloc of ", size, " floats"),
                       __FILE__, __LINE__);
    }
    return data;
  }

  // Work still queued may use the memory: wait for it first.
  void Free(float* data) override {
    if (data == nullptr) return;
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaFree(data);
    cudaGetLastError();
  }

  // Pinned, so that copies to and from it are single DMAs (no staging).
  absl::StatusOr<float*> AllocateHostRaw(int64_t size) override {
    if (size == 0) return nullptr;
    PS_RETURN_IF_ERROR(Enter());
    float* data = nullptr;
    const cudaError_t err = cudaMallocHost(&data, size * sizeof(float));
    if (err != cudaSuccess) {
      return CudaError(err, absl::StrCat("cudaMallocHost of ", size, " floats"),
                       __FILE__, __LINE__);
    }
    return data;
  }

  // A copy still queued may use the memory: wait for it first.
  void FreeHost(float* data) override {
    if (data == nullptr) return;
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaFreeHost(data);
    cudaGetLastError();
  }

 private:
  static constexpr int64_t kStagingFloats = int64_t{1} << 20;  // 4 MiB a half

  // Makes the backend's device current on the calling thread (any thread may
  // call, one at a time).
  absl::Status Enter() {
    PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    return absl::OkStatus();
  }

  // True when `p` is page-locked host memory (cudaMallocHost,
  // cudaHostRegister) that the GPU can DMA to directly. Pageable memory is
  // cudaMemoryTypeUnregistered (CUDA 11+) or an error (older runtimes).
  static bool IsPinnedHost(const void* p) {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attr.type == cudaMemoryTypeHost;
  }

  // column_scratch_ holds at least `floats` floats (grown, never shrunk).
  // cudaFree waits for the queued work that may still read the old one.
  absl::Status ReserveColumnScratch(int64_t floats) {
    if (floats <= column_scratch_floats_) return absl::OkStatus();
    PS_CUDA_RETURN_IF_ERROR(cudaFree(column_scratch_));
    column_scratch_ = nullptr;
    column_scratch_floats_ = 0;
    PS_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&column_scratch_, floats * sizeof(float)));
    column_scratch_floats_ = floats;
    return absl::OkStatus();
  }

  int device_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  float* staging_[2] = {nullptr, nullptr};  // pinned host memory
  cudaEvent_t staging_free_[2] = {nullptr, nullptr};
  cudaEvent_t direct_done_ = nullptr;  // a direct copy from pinned memory
  int next_half_ = 0;
  double* sum_device_ = nullptr;
  double* sum_host_ = nullptr;       // pinned
  float* column_scratch_ = nullptr;  // ColumnSum's partial rows
  int64_t column_scratch_floats_ = 0;
};

}  // namespace

absl::Status CudaAvailable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(err), " (",
                     cudaGetErrorName(err), ")"));
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no CUDA device visible (cudaGetDeviceCount returned 0)");
  }
  return absl::OkStatus();
}

absl::StatusOr<int> CudaDeviceCount() {
  PS_RETURN_IF_ERROR(CudaAvailable());
  int count = 0;
  PS_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  return count;
}

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(int device) {
  PS_ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " requested, but ", count,
                     " device(s) are visible (ordinals 0..", count - 1,
                     ", after CUDA_VISIBLE_DEVICES)"));
  }
  auto backend = std::make_unique<CudaBackend>();
  PS_RETURN_IF_ERROR(backend->Init(device));
  return std::unique_ptr<ComputeBackend>(std::move(backend));
}

absl::StatusOr<CudaPlacement> CudaPlacementOf(const ComputeBackend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("not a CUDA backend: ", backend.name()));
  }
  return CudaPlacement{cuda->device(), cuda->stream()};
}

}  // namespace pstrain
