#include "worker/compute/cpu_backend.h"

#include <cblas.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

// OpenBLAS functions not in cblas.h (driver/others: the variables it read
// from the environment, reading them again, ending its threads); weak, so
// that another BLAS links too.
extern "C" {
int openblas_thread_timeout(void) __attribute__((weak));
void openblas_read_env(void) __attribute__((weak));
int blas_thread_shutdown_(void) __attribute__((weak));
int blas_thread_init(void) __attribute__((weak));
}

namespace pstrain {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

float Activate(Activation act, float z) {
  switch (act) {
    case Activation::kRelu:
      return z > 0 ? z : 0;
    case Activation::kTanh:
      return std::tanh(z);
    case Activation::kGelu:
      return 0.5f * z * (1 + std::tanh(kGeluC * (z + kGeluA * z * z * z)));
    default:
      return z;
  }
}

// d act(z) / dz, given z and a = act(z).
float Derivative(Activation act, float z, float a) {
  switch (act) {
    case Activation::kRelu:
      return z > 0 ? 1 : 0;
    case Activation::kTanh:
      return 1 - a * a;
    case Activation::kGelu: {
      const float t = std::tanh(kGeluC * (z + kGeluA * z * z * z));
      return 0.5f * (1 + t) +
             0.5f * z * (1 - t * t) * kGeluC * (1 + 3 * kGeluA * z * z);
    }
    default:
      return 1;
  }
}

// The loops below take the activation as a template argument, so that the
// switches in Activate and Derivative fold away and the loops vectorise.
template <Activation kAct>
void ForwardLoop(int64_t n, const float* z, float* a) {
  for (int64_t k = 0; k < n; ++k) a[k] = Activate(kAct, z[k]);
}

template <Activation kAct>
void BackwardLoop(int64_t n, const float* z, const float* a, float* delta) {
  for (int64_t k = 0; k < n; ++k) delta[k] *= Derivative(kAct, z[k], a[k]);
}

class CpuBackend : public ComputeBackend {
 public:
  std::string name() const override {
    return absl::StrCat("cpu (OpenBLAS, ", openblas_get_num_threads(),
                        " threads)");
  }

  bool host_memory() const override { return true; }

  absl::Status CopyToDevice(const float* src, int64_t n,
                            DeviceBuffer* dst) override {
    PS_RETURN_IF_ERROR(CheckSize("CopyToDevice", "dst", *dst, n));
    if (n > 0) std::memcpy(dst->data(), src, n * sizeof(float));
    return absl::OkStatus();
  }

  absl::Status CopyToHost(const DeviceBuffer& src, int64_t n,
                          float* dst) override {
    PS_RETURN_IF_ERROR(CheckSize("CopyToHost", "src", src, n));
    if (n > 0) std::memcpy(dst, src.data(), n * sizeof(float));
    return absl::OkStatus();
  }

  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const DeviceBuffer& a, const DeviceBuffer& b,
                    float beta, DeviceBuffer* c) override {
    PS_RETURN_IF_ERROR(CheckGemm(m, n, k, a, b, *c));
    if (m == 0 || n == 0) return absl::OkStatus();
    // Leading dimensions must be >= 1 even when a matrix is empty.
    const int lda = std::max<int64_t>(1, trans_a ? m : k);
    const int ldb = std::max<int64_t>(1, trans_b ? k : n);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a.data(),
                lda, b.data(), ldb, beta, c->data(), n);
    return absl::OkStatus();
  }

  absl::Status BiasAdd(int64_t rows, int64_t cols, const DeviceBuffer& bias,
                       DeviceBuffer* z) override {
    PS_RETURN_IF_ERROR(CheckSize("BiasAdd", "bias", bias, cols));
    PS_RETURN_IF_ERROR(CheckMatrix("BiasAdd", "z", *z, rows, cols));
    float* out = z->data();
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] += bias.data()[j];
    }
    return absl::OkStatus();
  }

  absl::Status ActivationForward(Activation act, int64_t n,
                                 const DeviceBuffer& z,
                                 DeviceBuffer* a) override {
    PS_RETURN_IF_ERROR(CheckSize("ActivationForward", "z", z, n));
    PS_RETURN_IF_ERROR(CheckSize("ActivationForward", "a", *a, n));
    const float* in = z.data();
    float* out = a->data();
    switch (act) {
      case Activation::kRelu:
        ForwardLoop<Activation::kRelu>(n, in, out);
        break;
      case Activation::kTanh:
        ForwardLoop<Activation::kTanh>(n, in, out);
        break;
      case Activation::kGelu:
        ForwardLoop<Activation::kGelu>(n, in, out);
        break;
      default:
        ForwardLoop<Activation::kIdentity>(n, in, out);
    }
    return absl::OkStatus();
  }

  absl::Status ActivationBackward(Activation act, int64_t n,
                                  const DeviceBuffer& z, const DeviceBuffer& a,
                                  DeviceBuffer* delta) override {
    PS_RETURN_IF_ERROR(CheckSize("ActivationBackward", "z", z, n));
    PS_RETURN_IF_ERROR(CheckSize("ActivationBackward", "a", a, n));
    PS_RETURN_IF_ERROR(CheckSize("ActivationBackward", "delta", *delta, n));
    float* d = delta->data();
    switch (act) {
      case Activation::kRelu:
        BackwardLoop<Activation::kRelu>(n, z.data(), a.data(), d);
        break;
      case Activation::kTanh:
        BackwardLoop<Activation::kTanh>(n, z.data(), a.data(), d);
        break;
      case Activation::kGelu:
        BackwardLoop<Activation::kGelu>(n, z.data(), a.data(), d);
        break;
      default:
        break;  // identity: derivative 1
    }
    return absl::OkStatus();
  }

  absl::Status SoftmaxCrossEntropy(int64_t rows, int64_t cols,
                                   const DeviceBuffer& logits,
                                   const DeviceBuffer& labels, float grad_scale,
                                   DeviceBuffer* losses,
                                   DeviceBuffer* dlogits) override {
    PS_RETURN_IF_ERROR(CheckHead("SoftmaxCrossEntropy", rows, cols, logits,
                                 labels, *losses, dlogits));
    for (int64_t i = 0; i < rows; ++i) {
      const float* z = logits.data() + i * cols;
      const int64_t y = static_cast<int64_t>(labels.data()[i]);
      const float max = *std::max_element(z, z + cols);
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) sum += std::exp(double{z[j]} - max);
      losses->data()[i] = static_cast<float>(std::log(sum) + max - z[y]);
      if (dlogits == nullptr) continue;
      float* g = dlogits->data() + i * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const float p = static_cast<float>(std::exp(double{z[j]} - max) / sum);
        g[j] = grad_scale * (p - (j == y ? 1.0f : 0.0f));
      }
    }
    return absl::OkStatus();
  }

  absl::Status SquaredError(int64_t rows, int64_t cols,
                            const DeviceBuffer& outputs,
                            const DeviceBuffer& labels, float grad_scale,
                            DeviceBuffer* losses,
                            DeviceBuffer* doutputs) override {
    PS_RETURN_IF_ERROR(CheckHead("SquaredError", rows, cols, outputs, labels,
                                 *losses, doutputs));
    for (int64_t i = 0; i < rows; ++i) {
      const float label = labels.data()[i];
      double loss = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const float target =
            cols == 1 ? label : (j == static_cast<int64_t>(label) ? 1.0f : 0);
        const float d = outputs.data()[i * cols + j] - target;
        loss += 0.5 * double{d} * d;
        if (doutputs != nullptr)
          doutputs->data()[i * cols + j] = grad_scale * d;
      }
      losses->data()[i] = static_cast<float>(loss);
    }
    return absl::OkStatus();
  }

  absl::Status Add(int64_t n, const DeviceBuffer& x, DeviceBuffer* y) override {
    PS_RETURN_IF_ERROR(CheckSize("Add", "x", x, n));
    PS_RETURN_IF_ERROR(CheckSize("Add", "y", *y, n));
    const float* in = x.data();
    float* out = y->data();
    for (int64_t k = 0; k < n; ++k) out[k] += in[k];
    return absl::OkStatus();
  }

  absl::Status Scale(int64_t n, float alpha, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckSize("Scale", "x", *x, n));
    float* v = x->data();
    for (int64_t k = 0; k < n; ++k) v[k] *= alpha;
    return absl::OkStatus();
  }

  absl::Status ColumnSum(int64_t rows, int64_t cols, const DeviceBuffer& x,
                         DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(CheckMatrix("ColumnSum", "x", x, rows, cols));
    PS_RETURN_IF_ERROR(CheckSize("ColumnSum", "out", *out, cols));
    float* o = out->data();
    std::fill(o, o + cols, 0.0f);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) o[j] += x.data()[i * cols + j];
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> Sum(int64_t n, const DeviceBuffer& x) override {
    PS_RETURN_IF_ERROR(CheckSize("Sum", "x", x, n));
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) sum += x.data()[k];
    return sum;
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
    const float scale = PoolingScale(pooling, bag_size);
    for (int64_t b = 0; b < bags; ++b) {
      float* o = out->data() + b * dim;
      std::fill(o, o + dim, 0.0f);
      for (int64_t t = 0; t < bag_size; ++t) {
        const int64_t u = static_cast<int64_t>(index.data()[b * bag_size + t]);
        const float* r = rows.data() + u * dim;
        for (int64_t j = 0; j < dim; ++j) o[j] += r[j];
      }
      for (int64_t j = 0; j < dim; ++j) o[j] *= scale;
    }
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
    const float scale = PoolingScale(pooling, bag_size);
    for (int64_t u = 0; u < num_rows; ++u) {
      float* g = drows->data() + u * dim;
      std::fill(g, g + dim, 0.0f);
      const int64_t begin = static_cast<int64_t>(row_starts.data()[u]);
      const int64_t end = static_cast<int64_t>(row_starts.data()[u + 1]);
      for (int64_t e = begin; e < end; ++e) {
        const int64_t b = static_cast<int64_t>(entries.data()[e]) / bag_size;
        const float* d = dout.data() + b * dim;
        for (int64_t j = 0; j < dim; ++j) g[j] += d[j];
      }
      for (int64_t j = 0; j < dim; ++j) g[j] *= scale;
    }
    return absl::OkStatus();
  }

 protected:
  absl::StatusOr<float*> AllocateRaw(int64_t size) override {
    if (size == 0) return nullptr;
    float* data = new (std::nothrow) float[size];
    if (data == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", size, " floats of host memory"));
    }
    return data;
  }

  void Free(float* data) override { delete[] data; }
};

}  // namespace

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCpuBackend() {
  return std::unique_ptr<ComputeBackend>(new CpuBackend());
}

absl::StatusOr<int> ParseCpuMax(absl::string_view text) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  int64_t quota = 0, period = 0;
  if (fields.size() == 2 && absl::SimpleAtoi(fields[1], &period) &&
      period > 0) {
    if (fields[0] == "max") return 0;
    if (absl::SimpleAtoi(fields[0], &quota) && quota > 0) {
      return static_cast<int>((quota + period - 1) / period);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cgroup cpu.max '", absl::CEscape(text),
      "' is not 'max PERIOD' or 'QUOTA PERIOD' with positive integers"));
}

int UsableCpus() {
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cpus <= 0) cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  // cgroup v2: "0::/path" in /proc/self/cgroup; the quota of the path and of
  // every cgroup above it.
  std::ifstream self("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(self, line)) {
    if (absl::StartsWith(line, "0::")) path = line.substr(3);
  }
  if (path.empty()) return cpus;
  while (true) {
    std::ifstream f(absl::StrCat("/sys/fs/cgroup", path, "/cpu.max"));
    std::string text;
    if (f && std::getline(f, text)) {
      absl::StatusOr<int> quota = ParseCpuMax(text);
      if (quota.ok() && *quota > 0) cpus = std::min(cpus, *quota);
    }
    if (path.empty() || path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
  return std::max(1, cpus);
}

absl::StatusOr<int> LimitOpenBlasSpin(int exponent) {
  if (openblas_thread_timeout == nullptr || openblas_read_env == nullptr ||
      blas_thread_shutdown_ == nullptr || blas_thread_init == nullptr) {
    return absl::FailedPreconditionError(
        "the BLAS linked does not export openblas_thread_timeout, "
        "openblas_read_env, blas_thread_shutdown_ and blas_thread_init (not "
        "OpenBLAS's pthread build): its idle threads keep their own timeout");
  }
  if (openblas_get_parallel() != OPENBLAS_THREAD) {
    // Sequential, or OpenMP's threads, whose idle time OMP_WAIT_POLICY and
    // GOMP_SPINCOUNT set.
    return absl::FailedPreconditionError(absl::StrCat(
        "OpenBLAS is not its pthread build (openblas_get_parallel() = ",
        openblas_get_parallel(),
        "): OPENBLAS_THREAD_TIMEOUT does not apply, left alone"));
  }
  constexpr char kVar[] = "OPENBLAS_THREAD_TIMEOUT";
  if (exponent > 0) setenv(kVar, absl::StrCat(exponent).c_str(), 1);
  const char* env = std::getenv(kVar);
  int wanted = kOpenBlasThreadTimeout;
  if (env == nullptr) {
    setenv(kVar, absl::StrCat(kOpenBlasThreadTimeout).c_str(), 1);
  } else if (!absl::SimpleAtoi(env, &wanted)) {
    wanted = -1;  // OpenBLAS reads it with atoi: let it
  }
  if (openblas_thread_timeout() != wanted) {
    openblas_read_env();
    // Started again at once, as at load (blas_thread_init reads the
    // timeout), so that threads openblas_set_num_threads adds later get it
    // too.
    blas_thread_shutdown_();
    blas_thread_init();
  }
  // What blas_thread_init made of it: 0 (unset) keeps OpenBLAS's own.
  const int read = openblas_thread_timeout();
  return read <= 0 ? kOpenBlasOwnThreadTimeout : std::clamp(read, 4, 30);
}

int SetCpuComputeThreads(int threads) {
  int n = threads;
  if (n <= 0) {
    // OpenBLAS read its own variable at start-up: a deployment that sets it
    // (deploy/k8s: the pod's CPU limit) keeps it.
    int from_env = 0;
    const char* env = std::getenv("OPENBLAS_NUM_THREADS");
    if (env != nullptr && absl::SimpleAtoi(env, &from_env) && from_env > 0) {
      return openblas_get_num_threads();
    }
    n = UsableCpus();
  }
  openblas_set_num_threads(n);
  return openblas_get_num_threads();
}

}  // namespace pstrain
