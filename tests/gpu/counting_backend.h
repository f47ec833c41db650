// CountingBackend: a ComputeBackend that forwards every operation to another
// backend (CPU or CUDA) and counts the host<->backend copies: calls and
// floats each way, and how many of them touch memory that is not one of its
// HostBuffers (on CUDA such a copy goes through the staging halves: an extra
// host memcpy). Tests use it to check what crosses per training step
// (issue 12, item 8) on whatever backend they wrap.
#ifndef PSTRAIN_TESTS_GPU_COUNTING_BACKEND_H_
#define PSTRAIN_TESTS_GPU_COUNTING_BACKEND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/compute/compute_backend.h"

namespace pstrain {

// What crossed between host and backend; differences of two snapshots give
// the copies of what ran in between.
struct CopyCounts {
  int64_t uploads = 0;           // CopyToDevice calls
  int64_t uploaded = 0;          // floats
  int64_t staged_uploads = 0;    // from memory that is not a HostBuffer
  int64_t downloads = 0;         // CopyToHost calls
  int64_t downloaded = 0;        // floats
  int64_t staged_downloads = 0;  // into memory that is not a HostBuffer
  int64_t sums = 0;              // Sum calls (8 bytes out, a host wait each)

  CopyCounts operator-(const CopyCounts& o) const {
    return {uploads - o.uploads,
            uploaded - o.uploaded,
            staged_uploads - o.staged_uploads,
            downloads - o.downloads,
            downloaded - o.downloaded,
            staged_downloads - o.staged_downloads,
            sums - o.sums};
  }
  std::string ToString() const {
    return absl::StrCat(uploads, " uploads (", uploaded, " floats, ",
                        staged_uploads, " staged), ", downloads, " downloads (",
                        downloaded, " floats, ", staged_downloads, " staged), ",
                        sums, " sums");
  }
};

// Thread-compatible, like the backend it wraps (which must outlive it).
// Its buffers are the wrapped backend's, kept by raw pointer.
class CountingBackend : public ComputeBackend {
 public:
  explicit CountingBackend(ComputeBackend* inner) : inner_(inner) {}
  ~CountingBackend() override {
    // Buffers the wrapper still holds go back to `inner_` here.
    device_.clear();
    host_.clear();
  }

  const CopyCounts& counts() const { return counts_; }

  std::string name() const override {
    return absl::StrCat("counting ", inner_->name());
  }
  absl::Status CopyToDevice(const float* src, int64_t n,
                            DeviceBuffer* dst) override {
    ++counts_.uploads;
    counts_.uploaded += n;
    if (!InHostBuffer(src, n)) ++counts_.staged_uploads;
    return inner_->CopyToDevice(src, n, dst);
  }
  absl::Status CopyToHost(const DeviceBuffer& src, int64_t n,
                          float* dst) override {
    ++counts_.downloads;
    counts_.downloaded += n;
    if (!InHostBuffer(dst, n)) ++counts_.staged_downloads;
    return inner_->CopyToHost(src, n, dst);
  }
  absl::Status Synchronize() override { return inner_->Synchronize(); }
  absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const DeviceBuffer& a, const DeviceBuffer& b,
                    float beta, DeviceBuffer* c) override {
    return inner_->Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
  }
  absl::Status BiasAdd(int64_t rows, int64_t cols, const DeviceBuffer& bias,
                       DeviceBuffer* z) override {
    return inner_->BiasAdd(rows, cols, bias, z);
  }
  absl::Status ActivationForward(Activation act, int64_t n,
                                 const DeviceBuffer& z,
                                 DeviceBuffer* a) override {
    return inner_->ActivationForward(act, n, z, a);
  }
  absl::Status ActivationBackward(Activation act, int64_t n,
                                  const DeviceBuffer& z, const DeviceBuffer& a,
                                  DeviceBuffer* delta) override {
    return inner_->ActivationBackward(act, n, z, a, delta);
  }
  absl::Status SoftmaxCrossEntropy(int64_t rows, int64_t cols,
                                   const DeviceBuffer& logits,
                                   const DeviceBuffer& labels, float grad_scale,
                                   DeviceBuffer* losses,
                                   DeviceBuffer* dlogits) override {
    return inner_->SoftmaxCrossEntropy(rows, cols, logits, labels, grad_scale,
                                       losses, dlogits);
  }
  absl::Status SquaredError(int64_t rows, int64_t cols,
                            const DeviceBuffer& outputs,
                            const DeviceBuffer& labels, float grad_scale,
                            DeviceBuffer* losses,
                            DeviceBuffer* doutputs) override {
    return inner_->SquaredError(rows, cols, outputs, labels, grad_scale, losses,
                                doutputs);
  }
  absl::Status Add(int64_t n, const DeviceBuffer& x, DeviceBuffer* y) override {
    return inner_->Add(n, x, y);
  }
  absl::Status Scale(int64_t n, float alpha, DeviceBuffer* x) override {
    return inner_->Scale(n, alpha, x);
  }
  absl::Status ColumnSum(int64_t rows, int64_t cols, const DeviceBuffer& x,
                         DeviceBuffer* out) override {
    return inner_->ColumnSum(rows, cols, x, out);
  }
  absl::StatusOr<double> Sum(int64_t n, const DeviceBuffer& x) override {
    ++counts_.sums;
    return inner_->Sum(n, x);
  }
  absl::Status EmbeddingBagForward(int64_t bags, int64_t bag_size, int64_t dim,
                                   Pooling pooling, const DeviceBuffer& index,
                                   const DeviceBuffer& rows, int64_t num_rows,
                                   DeviceBuffer* out) override {
    return inner_->EmbeddingBagForward(bags, bag_size, dim, pooling, index,
                                       rows, num_rows, out);
  }
  absl::Status EmbeddingBagBackward(int64_t bags, int64_t bag_size, int64_t dim,
                                    Pooling pooling, const DeviceBuffer& dout,
                                    const DeviceBuffer& row_starts,
                                    const DeviceBuffer& entries,
                                    int64_t num_rows,
                                    DeviceBuffer* drows) override {
    return inner_->EmbeddingBagBackward(bags, bag_size, dim, pooling, dout,
                                        row_starts, entries, num_rows, drows);
  }

 protected:
  absl::StatusOr<float*> AllocateRaw(int64_t size) override {
    absl::StatusOr<DeviceBuffer> b = inner_->Allocate(size);
    if (!b.ok()) return b.status();
    float* data = b->data();
    if (data != nullptr) device_[data] = std::move(*b);
    return data;
  }
  void Free(float* data) override { device_.erase(data); }
  absl::StatusOr<float*> AllocateHostRaw(int64_t size) override {
    absl::StatusOr<HostBuffer> b = inner_->AllocateHost(size);
    if (!b.ok()) return b.status();
    float* data = b->data();
    if (data != nullptr) host_[data] = std::move(*b);
    return data;
  }
  void FreeHost(float* data) override { host_.erase(data); }

 private:
  // True when [p, p + n) lies inside one HostBuffer of this backend.
  bool InHostBuffer(const float* p, int64_t n) const {
    auto it = host_.upper_bound(const_cast<float*>(p));
    if (it == host_.begin()) return false;
    --it;
    return p >= it->first && p + n <= it->first + it->second.size();
  }

  ComputeBackend* const inner_;
  CopyCounts counts_;
  std::map<float*, DeviceBuffer> device_;
  std::map<float*, HostBuffer> host_;
};

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_GPU_COUNTING_BACKEND_H_
