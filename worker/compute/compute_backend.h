// ComputeBackend: the few fp32 operations the models need (matrix products,
// bias, activations, loss heads, reductions, embedding bags), on the CPU
// (OpenBLAS)
// or on a CUDA GPU (cuBLAS plus a few kernels). Both implement the same
// contracts below, so a model computes the same numbers on either, up to
// floating-point summation order.
#ifndef PSTRAIN_WORKER_COMPUTE_COMPUTE_BACKEND_H_
#define PSTRAIN_WORKER_COMPUTE_COMPUTE_BACKEND_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace pstrain {

class ComputeBackend;

// Hidden-layer activations. The GELU is the tanh approximation
// 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
enum class Activation { kIdentity, kRelu, kTanh, kGelu };

// How an embedding bag combines its rows: their sum, or their mean.
enum class Pooling { kSum, kMean };

// Embedding-bag indices travel as floats holding integers (like labels), so
// they are exact only below 2^24: bags * bag_size and num_rows are at most
// this.
inline constexpr int64_t kMaxEmbeddingEntries = int64_t{1} << 24;

// How the two handles below give their memory back (defined after
// ComputeBackend: its Free and FreeHost).
inline void FreeDeviceFloats(ComputeBackend* owner, float* data);
inline void FreeHostFloats(ComputeBackend* owner, float* data);

// The move-only ownership DeviceBuffer and HostBuffer share: `size()` floats
// of the backend `owner` that `Release(owner, data)` frees when the handle is
// destroyed or assigned over. A handle without an owner (a view, or an empty
// handle) frees nothing.
template <void (*Release)(ComputeBackend*, float*)>
class BackendFloats {
 public:
  BackendFloats() = default;
  BackendFloats(BackendFloats&& other) noexcept { *this = std::move(other); }
  BackendFloats& operator=(BackendFloats&& other) noexcept {
    if (this != &other) {
      Reset();
      std::swap(owner_, other.owner_);
      std::swap(data_, other.data_);
      std::swap(size_, other.size_);
    }
    return *this;
  }
  BackendFloats(const BackendFloats&) = delete;
  BackendFloats& operator=(const BackendFloats&) = delete;
  ~BackendFloats() { Reset(); }

  float* data() { return data_; }
  const float* data() const { return data_; }
  int64_t size() const { return size_; }  // in floats

 protected:
  BackendFloats(ComputeBackend* owner, float* data, int64_t size)
      : owner_(owner), data_(data), size_(size) {}

 private:
  void Reset() {
    if (owner_ != nullptr) Release(owner_, data_);
    owner_ = nullptr;
    data_ = nullptr;
    size_ = 0;
  }

  ComputeBackend* owner_ = nullptr;
  float* data_ = nullptr;
  int64_t size_ = 0;
};

// A move-only handle to `size()` floats in a backend's memory (host memory
// for the CPU backend, device memory for CUDA). The handle frees the memory
// when destroyed, so it must not outlive the backend that allocated it. The
// pointer is only meaningful to that backend: never dereference it on the
// host unless the backend is the CPU one.
class DeviceBuffer : public BackendFloats<&FreeDeviceFloats> {
 public:
  DeviceBuffer() = default;

  // A non-owning handle to floats [offset, offset + size) of this buffer, so
  // that operations can work on a part of it (one tensor of a flat
  // gradient). It must not outlive this buffer; destroying it frees nothing.
  // A range outside the buffer gives an empty view (operations on it then
  // fail their size checks).
  DeviceBuffer View(int64_t offset, int64_t size) {
    if (offset < 0 || size < 0 || offset > this->size() ||
        size > this->size() - offset) {
      return DeviceBuffer(nullptr, nullptr, 0);
    }
    return DeviceBuffer(nullptr, data() + offset, size);
  }

 private:
  friend class ComputeBackend;
  DeviceBuffer(ComputeBackend* owner, float* data, int64_t size)
      : BackendFloats(owner, data, size) {}
};

// A move-only handle to `size()` floats of host memory that the backend
// copies to and from without staging: page-locked (pinned) memory for CUDA,
// so CopyToHost into it is one DMA; ordinary memory for the CPU backend. The
// handle frees the memory when destroyed, so it must not outlive the backend
// that allocated it. Unlike a DeviceBuffer, the host may read and write it.
class HostBuffer : public BackendFloats<&FreeHostFloats> {
 public:
  HostBuffer() = default;

 private:
  friend class ComputeBackend;
  HostBuffer(ComputeBackend* owner, float* data, int64_t size)
      : BackendFloats(owner, data, size) {}
};

// All matrices are row-major and dense. Every operation takes explicit sizes
// and checks that its buffers hold at least that many floats
// (INVALID_ARGUMENT otherwise); buffers may be larger (reused scratch). Every
// buffer passed must come from this backend's Allocate. Unless stated,
// outputs must not alias inputs.
//
// Operations may run asynchronously (CUDA: enqueued in order on the
// backend's one stream); results are visible to later operations of the same
// backend, and to the host after CopyToHost, Sum or Synchronize. Errors of an
// asynchronous operation may surface at a later call.
//
// Thread-compatible: one thread at a time may use a backend and its buffers
// (the CPU backend's products may use OpenBLAS threads internally).
class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;

  // E.g. "cpu (OpenBLAS, 8 threads)" or "cuda (NVIDIA H200, cuBLAS)".
  virtual std::string name() const = 0;

  // True when the backend's buffers are ordinary host memory (the CPU
  // backend): a buffer may then be a view of host memory the caller owns
  // (ViewOfHost), so that a model computes on parameters where they are.
  virtual bool host_memory() const { return false; }

  // A non-owning buffer over the `n` floats at `data`, on a backend whose
  // memory is the host's; empty on any other (operations on it then fail
  // their size checks). Only for operands that operations read (a Gemm's a
  // and b, a bias): nothing may write through it. It must not outlive the
  // memory it views.
  DeviceBuffer ViewOfHost(const float* data, int64_t n) {
    if (!host_memory() || n < 0 || (data == nullptr && n > 0)) {
      return DeviceBuffer(nullptr, nullptr, 0);
    }
    return DeviceBuffer(nullptr, const_cast<float*>(data), n);
  }

  // A buffer of `size` >= 0 uninitialised floats. RESOURCE_EXHAUSTED when
  // the memory is not available.
  absl::StatusOr<DeviceBuffer> Allocate(int64_t size) {
    if (size < 0) return absl::InvalidArgumentError("negative buffer size");
    absl::StatusOr<float*> data = AllocateRaw(size);
    if (!data.ok()) return data.status();
    return DeviceBuffer(this, *data, size);
  }

  // `size` >= 0 uninitialised floats of host memory for CopyToHost and
  // CopyToDevice without staging (see HostBuffer). RESOURCE_EXHAUSTED when
  // the memory is not available.
  absl::StatusOr<HostBuffer> AllocateHost(int64_t size) {
    if (size < 0) return absl::InvalidArgumentError("negative buffer size");
    absl::StatusOr<float*> data = AllocateHostRaw(size);
    if (!data.ok()) return data.status();
    return HostBuffer(this, *data, size);
  }

  // dst[0, n) = src[0, n). `src` may be reused as soon as the call returns.
  // From a HostBuffer's memory the copy needs no staging.
  virtual absl::Status CopyToDevice(const float* src, int64_t n,
                                    DeviceBuffer* dst) = 0;
  // dst[0, n) = src[0, n); waits for every earlier operation to finish.
  // Into a HostBuffer's memory the copy needs no staging.
  virtual absl::Status CopyToHost(const DeviceBuffer& src, int64_t n,
                                  float* dst) = 0;
  // Waits until every operation enqueued so far has finished.
  virtual absl::Status Synchronize() = 0;

  // C[m x n] = alpha * op(A) op(B) + beta * C, where op(A) is m x k (A is
  // stored k x m when trans_a) and op(B) is k x n (B stored n x k when
  // trans_b). With beta == 0, C's old contents are ignored.
  virtual absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const DeviceBuffer& a,
                            const DeviceBuffer& b, float beta,
                            DeviceBuffer* c) = 0;

  // z[i, j] += bias[j] for a rows x cols matrix z.
  virtual absl::Status BiasAdd(int64_t rows, int64_t cols,
                               const DeviceBuffer& bias, DeviceBuffer* z) = 0;

  // a[k] = act(z[k]) for k < n. `a` may be `z` (in place).
  virtual absl::Status ActivationForward(Activation act, int64_t n,
                                         const DeviceBuffer& z,
                                         DeviceBuffer* a) = 0;
  // delta[k] *= act'(z[k]) for k < n, where a = act(z) as computed by
  // ActivationForward (tanh reads `a`, relu and gelu read `z`).
  virtual absl::Status ActivationBackward(Activation act, int64_t n,
                                          const DeviceBuffer& z,
                                          const DeviceBuffer& a,
                                          DeviceBuffer* delta) = 0;

  // Softmax cross-entropy of each row of rows x cols `logits` against the
  // class ids in `labels` (floats holding integers in [0, cols), unchecked):
  //   losses[i] = log(sum_j exp(z_ij - max_i)) + max_i - z_i,label
  // (stable for huge logits). Unless `dlogits` is null,
  //   dlogits[i, j] = grad_scale * (softmax(z_i)_j - [j == label_i]).
  virtual absl::Status SoftmaxCrossEntropy(int64_t rows, int64_t cols,
                                           const DeviceBuffer& logits,
                                           const DeviceBuffer& labels,
                                           float grad_scale,
                                           DeviceBuffer* losses,
                                           DeviceBuffer* dlogits) = 0;

  // Half squared error of each row of rows x cols `outputs`:
  //   losses[i] = 0.5 * sum_j (o_ij - t_ij)^2,
  // where t_ij = labels[i] when cols == 1 and the one-hot encoding of the
  // class id labels[i] otherwise. Unless `doutputs` is null,
  //   doutputs[i, j] = grad_scale * (o_ij - t_ij).
  virtual absl::Status SquaredError(int64_t rows, int64_t cols,
                                    const DeviceBuffer& outputs,
                                    const DeviceBuffer& labels,
                                    float grad_scale, DeviceBuffer* losses,
                                    DeviceBuffer* doutputs) = 0;

  // y[k] += x[k] for k < n (gradient accumulation). `x` must not be `y`.
  virtual absl::Status Add(int64_t n, const DeviceBuffer& x,
                           DeviceBuffer* y) = 0;
  // x[k] *= alpha for k < n.
  virtual absl::Status Scale(int64_t n, float alpha, DeviceBuffer* x) = 0;

  // out[j] = sum_i x[i, j] for a rows x cols matrix x (bias gradients).
  virtual absl::Status ColumnSum(int64_t rows, int64_t cols,
                                 const DeviceBuffer& x, DeviceBuffer* out) = 0;

  // sum_k x[k] for k < n, accumulated in double; waits for the result.
  virtual absl::StatusOr<double> Sum(int64_t n, const DeviceBuffer& x) = 0;

  // Embedding bags over `rows`, a compact num_rows x dim matrix: the rows of
  // an embedding table that a batch touches (the table itself is never on
  // the backend). `index` holds bags * bag_size floats holding integers in
  // [0, num_rows) (unchecked, like labels): bag b takes the rows
  // index[b * bag_size + t], t < bag_size, and
  //   out[b, j] = scale * (sum over t, in order, of rows[index[..t], j])
  // with scale 1 (kSum) or 1.0f / bag_size (kMean); out is bags x dim.
  // Sizes: bag_size >= 1, dim >= 1, bags * bag_size and num_rows at most
  // kMaxEmbeddingEntries (INVALID_ARGUMENT otherwise). Every backend sums in
  // the same order with one rounding per operation: bit-identical results.
  virtual absl::Status EmbeddingBagForward(int64_t bags, int64_t bag_size,
                                           int64_t dim, Pooling pooling,
                                           const DeviceBuffer& index,
                                           const DeviceBuffer& rows,
                                           int64_t num_rows,
                                           DeviceBuffer* out) = 0;

  // The gradient of EmbeddingBagForward with respect to `rows` (the
  // scatter-add of dout into the rows), computed as a gather so that it is
  // deterministic without atomics: the caller passes the inverse of `index`
  // grouped by row. `row_starts` holds num_rows + 1 non-decreasing floats
  // holding integers (row_starts[0] = 0, row_starts[num_rows] = bags *
  // bag_size) and `entries` the bags * bag_size positions p = b * bag_size +
  // t, those where index[p] == u at [row_starts[u], row_starts[u + 1]), in
  // increasing order (both unchecked). Then
  //   drows[u, j] = scale * (sum over those p, in order, of dout[p / bag_size,
  //   j])
  // with the forward's scale; every row of drows (num_rows x dim) is
  // written, 0 for a row no bag takes. dout is bags x dim. Same size checks
  // and bit-identical results as the forward.
  virtual absl::Status EmbeddingBagBackward(
      int64_t bags, int64_t bag_size, int64_t dim, Pooling pooling,
      const DeviceBuffer& dout, const DeviceBuffer& row_starts,
      const DeviceBuffer& entries, int64_t num_rows, DeviceBuffer* drows) = 0;

 protected:
  // Memory management for Allocate and ~DeviceBuffer. Free(nullptr) is a
  // no-op; Free cannot report errors (it runs in destructors).
  virtual absl::StatusOr<float*> AllocateRaw(int64_t size) = 0;
  virtual void Free(float* data) = 0;
  // The same for AllocateHost and ~HostBuffer; by default ordinary host
  // memory (new[] / delete[]).
  virtual absl::StatusOr<float*> AllocateHostRaw(int64_t size) {
    if (size == 0) return nullptr;
    float* data = new (std::nothrow) float[size];
    if (data == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", size, " floats of host memory"));
    }
    return data;
  }
  virtual void FreeHost(float* data) { delete[] data; }

  // Argument checks shared by the implementations: INVALID_ARGUMENT unless
  // `buffer` holds n floats (a rows x cols matrix); unless the Gemm operands
  // fit (sizes in [0, INT_MAX], the BLAS index type); unless a loss head's
  // sizes are valid.
  static absl::Status CheckSize(const char* op, const char* what,
                                const DeviceBuffer& buffer, int64_t n) {
    if (n >= 0 && buffer.size() >= n) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", what, " holds ", buffer.size(), " floats, needs ", n));
  }
  static absl::Status CheckMatrix(const char* op, const char* what,
                                  const DeviceBuffer& buffer, int64_t rows,
                                  int64_t cols) {
    if (rows < 0 || cols < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": bad sizes rows=", rows, " cols=", cols));
    }
    return CheckSize(op, what, buffer, rows * cols);
  }
  static absl::Status CheckGemm(int64_t m, int64_t n, int64_t k,
                                const DeviceBuffer& a, const DeviceBuffer& b,
                                const DeviceBuffer& c) {
    constexpr int64_t kMax = std::numeric_limits<int>::max();
    if (m < 0 || n < 0 || k < 0 || m > kMax || n > kMax || k > kMax) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm: bad sizes m=", m, " n=", n, " k=", k));
    }
    absl::Status s = CheckSize("Gemm", "A", a, m * k);
    if (s.ok()) s = CheckSize("Gemm", "B", b, k * n);
    if (s.ok()) s = CheckSize("Gemm", "C", c, m * n);
    return s;
  }
  static absl::Status CheckEmbeddingBag(const char* op, int64_t bags,
                                        int64_t bag_size, int64_t dim,
                                        int64_t num_rows) {
    if (bags < 0 || bag_size < 1 || dim < 1 || num_rows < 0 ||
        bags > kMaxEmbeddingEntries / bag_size ||
        num_rows > kMaxEmbeddingEntries) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": bad sizes bags=", bags, " bag_size=", bag_size, " dim=", dim,
          " num_rows=", num_rows, " (bags * bag_size and num_rows at most ",
          kMaxEmbeddingEntries, ")"));
    }
    return absl::OkStatus();
  }
  // The scale of a pooled bag (see EmbeddingBagForward).
  static float PoolingScale(Pooling pooling, int64_t bag_size) {
    return pooling == Pooling::kMean ? 1.0f / static_cast<float>(bag_size)
                                     : 1.0f;
  }
  static absl::Status CheckHead(const char* op, int64_t rows, int64_t cols,
                                const DeviceBuffer& outputs,
                                const DeviceBuffer& labels,
                                const DeviceBuffer& losses,
                                const DeviceBuffer* grads) {
    if (rows < 0 || cols < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": bad sizes rows=", rows, " cols=", cols));
    }
    absl::Status s = CheckSize(op, "outputs", outputs, rows * cols);
    if (s.ok()) s = CheckSize(op, "labels", labels, rows);
    if (s.ok()) s = CheckSize(op, "losses", losses, rows);
    if (s.ok() && grads != nullptr) {
      s = CheckSize(op, "gradient", *grads, rows * cols);
    }
    return s;
  }

 private:
  friend void FreeDeviceFloats(ComputeBackend* owner, float* data);
  friend void FreeHostFloats(ComputeBackend* owner, float* data);
};

void FreeDeviceFloats(ComputeBackend* owner, float* data) { owner->Free(data); }
void FreeHostFloats(ComputeBackend* owner, float* data) {
  owner->FreeHost(data);
}

// Creates the backend for `device`:
//   "cpu":  OpenBLAS on the host.
//   "cuda": CUDA device `cuda_device` (an ordinal among the visible devices;
//           worker/compute/worker_device.h chooses it for workers);
//           FAILED_PRECONDITION when none is visible or the binary was built
//           without CUDA, with the reason; INVALID_ARGUMENT when `cuda_device`
//           is not a visible device.
//   "auto": "cuda" when a CUDA device is visible, else "cpu".
// Anything else is INVALID_ARGUMENT.
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateComputeBackend(
    const std::string& device, int cuda_device = 0);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_COMPUTE_COMPUTE_BACKEND_H_
