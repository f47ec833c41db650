// Every ComputeBackend operation against naive float64 loops (on every
// backend available here: the CPU always, CUDA with a device), and whole
// models on CUDA against the same models on the CPU. Without a CUDA device
// the CUDA cases are skipped with the reason, never silently.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "worker/compute/compute_backend.h"
#include "worker/model/model.h"

namespace pstrain {
namespace {

using Params = std::vector<std::vector<float>>;

std::vector<float> RandomVector(int64_t n, std::mt19937* rng,
                                float scale = 1.0f) {
  std::normal_distribution<float> normal(0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(*rng);
  return v;
}

// Creates the backend for `device`; a missing CUDA device yields null and a
// printed reason in *skip.
std::unique_ptr<ComputeBackend> MakeBackend(const std::string& device,
                                            std::string* skip) {
  auto backend = CreateComputeBackend(device);
  if (backend.ok()) return std::move(*backend);
  if (device == "cuda" &&
      backend.status().code() == absl::StatusCode::kFailedPrecondition) {
    *skip = absl::StrCat("no CUDA device: ", backend.status().message());
  } else {
    ADD_FAILURE() << device << ": " << backend.status();
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Operations against naive loops.

class BackendOpsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string skip;
    backend_ = MakeBackend(GetParam(), &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_NE(backend_, nullptr);
  }

  DeviceBuffer Upload(const std::vector<float>& v) {
    auto buffer = backend_->Allocate(v.size());
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return DeviceBuffer();
    const absl::Status st =
        backend_->CopyToDevice(v.data(), v.size(), &*buffer);
    EXPECT_TRUE(st.ok()) << st;
    return std::move(*buffer);
  }

  std::vector<float> Download(const DeviceBuffer& buffer, int64_t n) {
    std::vector<float> v(n, std::numeric_limits<float>::quiet_NaN());
    const absl::Status st = backend_->CopyToHost(buffer, n, v.data());
    EXPECT_TRUE(st.ok()) << st;
    return v;
  }

  std::unique_ptr<ComputeBackend> backend_;
  std::mt19937 rng_{5};
};

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_NEAR(got[k], want[k], rel * std::max(1.0, std::abs(want[k])))
        << what << "[" << k << "]";
  }
}

TEST_P(BackendOpsTest, Name) {
  EXPECT_EQ(backend_->name().rfind(GetParam() + " (", 0), 0)
      << backend_->name();
}

TEST_P(BackendOpsTest, CopiesRoundTrip) {
  // Larger than the CUDA backend's staging chunks, and not a multiple.
  const std::vector<float> v = RandomVector(2500001, &rng_);
  const DeviceBuffer buffer = Upload(v);
  EXPECT_EQ(Download(buffer, v.size()), v);
  auto empty = backend_->Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(backend_->CopyToDevice(v.data(), 0, &*empty).ok());
  EXPECT_EQ(backend_->CopyToDevice(v.data(), 1, &*empty).code(),
            absl::StatusCode::kInvalidArgument);
}

// Add and Scale round once per element, like float host loops: exact
// equality on every backend (gradient accumulation stays bit-identical).
TEST_P(BackendOpsTest, AddAndScaleAreExactFloatOps) {
  const int64_t n = 70001;  // several blocks, not a multiple of any
  const std::vector<float> x = RandomVector(n, &rng_);
  const std::vector<float> y = RandomVector(n, &rng_, 3.0f);
  DeviceBuffer dx = Upload(x), dy = Upload(y);
  ASSERT_TRUE(backend_->Add(n, dx, &dy).ok());
  std::vector<float> want = y;
  for (int64_t k = 0; k < n; ++k) want[k] += x[k];
  EXPECT_EQ(Download(dy, n), want);
  const float alpha = 1.0f / 3.0f;
  ASSERT_TRUE(backend_->Scale(n - 1, alpha, &dy).ok());  // the last untouched
  for (int64_t k = 0; k + 1 < n; ++k) want[k] *= alpha;
  EXPECT_EQ(Download(dy, n), want);
  EXPECT_EQ(backend_->Add(n + 1, dx, &dy).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Scale(n + 1, 2.0f, &dy).code(),
            absl::StatusCode::kInvalidArgument);
}

// A view works on part of a buffer; one outside it is empty, so operations
// on it fail their size checks instead of touching memory.
TEST_P(BackendOpsTest, ViewsAddressPartOfABuffer) {
  const std::vector<float> v = RandomVector(100, &rng_);
  DeviceBuffer buffer = Upload(v);
  DeviceBuffer middle = buffer.View(10, 20);
  EXPECT_EQ(middle.size(), 20);
  ASSERT_TRUE(backend_->Scale(20, 2.0f, &middle).ok());
  std::vector<float> want = v;
  for (int k = 10; k < 30; ++k) want[k] *= 2.0f;
  EXPECT_EQ(Download(buffer, 100), want);
  EXPECT_EQ(Download(middle, 20),
            std::vector<float>(want.begin() + 10, want.begin() + 30));
  DeviceBuffer outside = buffer.View(90, 11);
  EXPECT_EQ(outside.size(), 0);
  EXPECT_EQ(backend_->Scale(11, 2.0f, &outside).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(buffer.View(-1, 1).size(), 0);
}

// HostBuffers (pinned on CUDA): copies to and from them, whole and in part.
TEST_P(BackendOpsTest, CopiesThroughHostBuffers) {
  const int64_t n = 2500001;  // larger than the CUDA staging chunks
  const std::vector<float> v = RandomVector(n, &rng_);
  auto host = backend_->AllocateHost(n);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_EQ(host->size(), n);
  std::copy(v.begin(), v.end(), host->data());
  auto buffer = backend_->Allocate(n);
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE(backend_->CopyToDevice(host->data(), n, &*buffer).ok());
  std::fill(host->data(), host->data() + n, 0.0f);
  // The source may be reused as soon as CopyToDevice returns.
  EXPECT_EQ(Download(*buffer, n), v);
  ASSERT_TRUE(backend_->CopyToHost(*buffer, n, host->data()).ok());
  EXPECT_TRUE(std::equal(v.begin(), v.end(), host->data()));
  ASSERT_TRUE(
      backend_->CopyToHost(buffer->View(7, 1000), 1000, host->data() + 5).ok());
  EXPECT_TRUE(std::equal(v.begin() + 7, v.begin() + 1007, host->data() + 5));
  EXPECT_EQ(backend_->AllocateHost(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = backend_->AllocateHost(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0);
}

TEST_P(BackendOpsTest, GemmAllTransposes) {
  struct Size {
    int64_t m, n, k;
  };
  for (const Size s : {Size{5, 7, 3}, Size{33, 17, 65}, Size{1, 40, 1}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const std::vector<float> a = RandomVector(s.m * s.k, &rng_);
      const std::vector<float> b = RandomVector(s.k * s.n, &rng_);
      const std::vector<float> c0 = RandomVector(s.m * s.n, &rng_);
      for (const float beta : {0.0f, 0.5f}) {
        std::vector<double> want(s.m * s.n);
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t j = 0; j < s.n; ++j) {
            double sum = 0;
            for (int64_t p = 0; p < s.k; ++p) {
              const double av = ta ? a[p * s.m + i] : a[i * s.k + p];
              const double bv = tb ? b[j * s.k + p] : b[p * s.n + j];
              sum += av * bv;
            }
            want[i * s.n + j] = 1.5 * sum + beta * c0[i * s.n + j];
          }
        }
        const DeviceBuffer da = Upload(a), db = Upload(b);
        // beta == 0 must ignore C, NaNs included.
        DeviceBuffer dc =
            Upload(beta == 0 ? std::vector<float>(c0.size(), NAN) : c0);
        ASSERT_TRUE(
            backend_->Gemm(ta, tb, s.m, s.n, s.k, 1.5f, da, db, beta, &dc)
                .ok());
        // Loose enough for any fp32 summation order, tight enough to catch
        // reduced precision (TF32 would be off by ~1e-3).
        ExpectNear(Download(dc, c0.size()), want, 3e-5,
                   absl::StrCat("gemm ta=", ta, " tb=", tb, " m=", s.m,
                                " beta=", beta));
      }
    }
  }
}

TEST_P(BackendOpsTest, GemmEdgeCases) {
  // k == 0: C = beta * C.
  const std::vector<float> c0 = {1, 2, 3, 4, 5, 6};
  DeviceBuffer empty = Upload({});
  DeviceBuffer c = Upload(c0);
  ASSERT_TRUE(
      backend_->Gemm(false, false, 2, 3, 0, 1, empty, empty, 2, &c).ok());
  ExpectNear(Download(c, 6), {2, 4, 6, 8, 10, 12}, 0, "k=0 beta=2");
  ASSERT_TRUE(backend_->Gemm(true, true, 2, 3, 0, 1, empty, empty, 0, &c).ok());
  ExpectNear(Download(c, 6), {0, 0, 0, 0, 0, 0}, 0, "k=0 beta=0");
  // Buffers that are too small, negative sizes.
  const DeviceBuffer a = Upload(RandomVector(6, &rng_));
  EXPECT_EQ(backend_->Gemm(false, false, 2, 3, 4, 1, a, a, 0, &c).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Gemm(false, false, -1, 3, 1, 1, a, a, 0, &c).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(BackendOpsTest, BiasAdd) {
  const int64_t rows = 9, cols = 37;
  const std::vector<float> z = RandomVector(rows * cols, &rng_);
  const std::vector<float> bias = RandomVector(cols, &rng_);
  std::vector<double> want(z.size());
  for (int64_t k = 0; k < rows * cols; ++k) want[k] = z[k] + bias[k % cols];
  DeviceBuffer dz = Upload(z);
  const DeviceBuffer db = Upload(bias);
  ASSERT_TRUE(backend_->BiasAdd(rows, cols, db, &dz).ok());
  ExpectNear(Download(dz, z.size()), want, 1e-6, "bias");
  EXPECT_EQ(backend_->BiasAdd(-1, -1, db, &dz).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->BiasAdd(rows + 1, cols, db, &dz).code(),
            absl::StatusCode::kInvalidArgument);
}

double RefActivate(Activation act, double z) {
  const double c = std::sqrt(2 / M_PI), a = 0.044715;
  switch (act) {
    case Activation::kRelu:
      return z > 0 ? z : 0;
    case Activation::kTanh:
      return std::tanh(z);
    case Activation::kGelu:
      return 0.5 * z * (1 + std::tanh(c * (z + a * z * z * z)));
    default:
      return z;
  }
}

double RefDerivative(Activation act, double z) {
  const double c = std::sqrt(2 / M_PI), a = 0.044715;
  switch (act) {
    case Activation::kRelu:
      return z > 0 ? 1 : 0;
    case Activation::kTanh:
      return 1 - std::tanh(z) * std::tanh(z);
    case Activation::kGelu: {
      const double t = std::tanh(c * (z + a * z * z * z));
      return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * c * (1 + 3 * a * z * z);
    }
    default:
      return 1;
  }
}

TEST_P(BackendOpsTest, ActivationsForwardAndBackward) {
  std::vector<float> z = RandomVector(1000, &rng_, 3);
  z[0] = 0;
  z[1] = 30;
  z[2] = -30;
  const std::vector<float> delta = RandomVector(z.size(), &rng_);
  for (const Activation act : {Activation::kIdentity, Activation::kRelu,
                               Activation::kTanh, Activation::kGelu}) {
    const std::string name = absl::StrCat("activation ", static_cast<int>(act));
    std::vector<double> want_a(z.size()), want_d(z.size());
    for (size_t k = 0; k < z.size(); ++k) {
      want_a[k] = RefActivate(act, z[k]);
      want_d[k] = delta[k] * RefDerivative(act, z[k]);
    }
    const DeviceBuffer dz = Upload(z);
    DeviceBuffer da = Upload(std::vector<float>(z.size()));
    ASSERT_TRUE(backend_->ActivationForward(act, z.size(), dz, &da).ok());
    ExpectNear(Download(da, z.size()), want_a, 1e-6, name);
    DeviceBuffer dd = Upload(delta);
    ASSERT_TRUE(backend_->ActivationBackward(act, z.size(), dz, da, &dd).ok());
    ExpectNear(Download(dd, z.size()), want_d, 1e-5, name + " backward");
    // In place: a == z.
    DeviceBuffer inplace = Upload(z);
    ASSERT_TRUE(
        backend_->ActivationForward(act, z.size(), inplace, &inplace).ok());
    ExpectNear(Download(inplace, z.size()), want_a, 1e-6, name + " in place");
  }
}

// 40 columns: more than one CUDA warp per row.
TEST_P(BackendOpsTest, SoftmaxCrossEntropy) {
  for (const int64_t cols : {5, 40}) {
    const int64_t rows = 7;
    std::vector<float> z = RandomVector(rows * cols, &rng_, 2);
    z[cols] = 1000;  // row 1: huge logits are stable
    z[cols + 1] = -1000;
    std::vector<float> labels;
    for (int64_t i = 0; i < rows; ++i) labels.push_back((i * 3 + 1) % cols);
    const float scale = 0.25f;
    std::vector<double> want_loss(rows), want_grad(rows * cols);
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = &z[i * cols];
      const double max = *std::max_element(row, row + cols);
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) sum += std::exp(row[j] - max);
      const int64_t y = labels[i];
      want_loss[i] = std::log(sum) + max - row[y];
      for (int64_t j = 0; j < cols; ++j) {
        want_grad[i * cols + j] =
            scale * (std::exp(row[j] - max) / sum - (j == y ? 1 : 0));
      }
    }
    const DeviceBuffer dz = Upload(z), dy = Upload(labels);
    DeviceBuffer losses = Upload(std::vector<float>(rows));
    DeviceBuffer grad = Upload(std::vector<float>(rows * cols));
    ASSERT_TRUE(
        backend_->SoftmaxCrossEntropy(rows, cols, dz, dy, scale, &losses, &grad)
            .ok());
    ExpectNear(Download(losses, rows), want_loss, 1e-6, "xent loss");
    ExpectNear(Download(grad, rows * cols), want_grad, 1e-6, "xent grad");
    DeviceBuffer losses2 = Upload(std::vector<float>(rows));
    ASSERT_TRUE(
        backend_
            ->SoftmaxCrossEntropy(rows, cols, dz, dy, scale, &losses2, nullptr)
            .ok());
    ExpectNear(Download(losses2, rows), want_loss, 1e-6, "xent loss only");
  }
}

TEST_P(BackendOpsTest, SquaredError) {
  for (const int64_t cols : {1, 3}) {
    const int64_t rows = 11;
    const std::vector<float> out = RandomVector(rows * cols, &rng_);
    std::vector<float> labels = RandomVector(rows, &rng_);
    if (cols > 1) {
      for (int64_t i = 0; i < rows; ++i) labels[i] = i % cols;
    }
    std::vector<double> want_loss(rows), want_grad(rows * cols);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const double t = cols == 1 ? labels[i] : (j == labels[i] ? 1 : 0);
        const double d = out[i * cols + j] - t;
        want_loss[i] += 0.5 * d * d;
        want_grad[i * cols + j] = 0.5 * d;
      }
    }
    const DeviceBuffer dout = Upload(out), dy = Upload(labels);
    DeviceBuffer losses = Upload(std::vector<float>(rows));
    DeviceBuffer grad = Upload(std::vector<float>(rows * cols));
    ASSERT_TRUE(
        backend_->SquaredError(rows, cols, dout, dy, 0.5f, &losses, &grad)
            .ok());
    ExpectNear(Download(losses, rows), want_loss, 1e-6, "mse loss");
    ExpectNear(Download(grad, rows * cols), want_grad, 1e-6, "mse grad");
    EXPECT_EQ(
        backend_->SquaredError(rows + 1, cols, dout, dy, 1, &losses, nullptr)
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
}

TEST_P(BackendOpsTest, ColumnSumAndSum) {
  const int64_t rows = 37, cols = 70;
  const std::vector<float> x = RandomVector(rows * cols, &rng_);
  std::vector<double> want(cols);
  double total = 0;
  for (int64_t k = 0; k < rows * cols; ++k) {
    want[k % cols] += x[k];
    total += x[k];
  }
  const DeviceBuffer dx = Upload(x);
  DeviceBuffer out = Upload(std::vector<float>(cols, NAN));
  ASSERT_TRUE(backend_->ColumnSum(rows, cols, dx, &out).ok());
  ExpectNear(Download(out, cols), want, 1e-5, "column sum");
  ASSERT_TRUE(backend_->ColumnSum(0, cols, dx, &out).ok());
  ExpectNear(Download(out, cols), std::vector<double>(cols), 0, "empty");

  auto sum = backend_->Sum(rows * cols, dx);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_NEAR(*sum, total, 1e-9 * rows * cols);
  sum = backend_->Sum(0, dx);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, 0);
}

// Embedding bags: the forward against a float loop in the contract's order
// (exact on every backend), and the backward's gather over the inverse index
// against a plain scatter-add (exact too: the scatter-add visits each row's
// positions in increasing order, as the inverse lists them). Rows repeat
// within and across bags; one row is taken by no bag; the batch spans
// several CUDA blocks.
TEST_P(BackendOpsTest, EmbeddingBagForwardAndBackward) {
  for (const Pooling pooling : {Pooling::kSum, Pooling::kMean}) {
    for (const int64_t bag_size : {1, 3}) {
      const int64_t bags = 700, dim = 13, num_rows = 97;
      const std::string at =
          absl::StrCat(pooling == Pooling::kSum ? "sum" : "mean",
                       " bag_size=", bag_size, " ");
      std::uniform_int_distribution<int64_t> pick(0, num_rows - 2);
      std::vector<float> index(bags * bag_size);
      for (float& u : index) u = static_cast<float>(pick(rng_));
      index[5] = index[4 % index.size()];  // a row twice, maybe in one bag
      const std::vector<float> rows = RandomVector(num_rows * dim, &rng_);
      const std::vector<float> dout = RandomVector(bags * dim, &rng_);
      const float scale =
          pooling == Pooling::kMean ? 1.0f / static_cast<float>(bag_size) : 1;

      std::vector<float> want_out(bags * dim, 0.0f);
      for (int64_t b = 0; b < bags; ++b) {
        for (int64_t j = 0; j < dim; ++j) {
          float sum = 0;
          for (int64_t t = 0; t < bag_size; ++t) {
            sum +=
                rows[static_cast<int64_t>(index[b * bag_size + t]) * dim + j];
          }
          want_out[b * dim + j] = sum * scale;
        }
      }
      std::vector<float> want_drows(num_rows * dim, 0.0f);
      std::vector<std::vector<int64_t>> positions(num_rows);
      for (int64_t p = 0; p < bags * bag_size; ++p) {
        const int64_t u = static_cast<int64_t>(index[p]);
        positions[u].push_back(p);
        for (int64_t j = 0; j < dim; ++j) {
          want_drows[u * dim + j] += dout[(p / bag_size) * dim + j];
        }
      }
      for (float& g : want_drows) g *= scale;
      std::vector<float> starts = {0}, entries;
      for (const auto& list : positions) {
        for (int64_t p : list) entries.push_back(static_cast<float>(p));
        starts.push_back(static_cast<float>(entries.size()));
      }

      const DeviceBuffer d_index = Upload(index), d_rows = Upload(rows);
      const DeviceBuffer d_dout = Upload(dout), d_starts = Upload(starts);
      const DeviceBuffer d_entries = Upload(entries);
      // NaN-filled outputs: every element must be written.
      DeviceBuffer d_out = Upload(std::vector<float>(bags * dim, NAN));
      DeviceBuffer d_drows = Upload(std::vector<float>(num_rows * dim, NAN));
      ASSERT_TRUE(backend_
                      ->EmbeddingBagForward(bags, bag_size, dim, pooling,
                                            d_index, d_rows, num_rows, &d_out)
                      .ok());
      EXPECT_EQ(Download(d_out, bags * dim), want_out) << at << "forward";
      ASSERT_TRUE(backend_
                      ->EmbeddingBagBackward(bags, bag_size, dim, pooling,
                                             d_dout, d_starts, d_entries,
                                             num_rows, &d_drows)
                      .ok());
      EXPECT_EQ(Download(d_drows, num_rows * dim), want_drows)
          << at << "backward";
      // The last row is taken by no bag: its gradient is 0, not NaN.
      EXPECT_EQ(Download(d_drows, num_rows * dim).back(), 0.0f) << at;
    }
  }
}

TEST_P(BackendOpsTest, EmbeddingBagSizeChecks) {
  const DeviceBuffer four = Upload({0, 1, 0, 1});
  DeviceBuffer out = Upload(std::vector<float>(8));
  // bag_size 0, dim 0, a rows matrix too small, an out matrix too small, and
  // more entries than floats can index exactly.
  EXPECT_EQ(
      backend_->EmbeddingBagForward(2, 0, 2, Pooling::kSum, four, four, 2, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      backend_->EmbeddingBagForward(2, 2, 0, Pooling::kSum, four, four, 2, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      backend_->EmbeddingBagForward(2, 2, 2, Pooling::kSum, four, four, 3, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      backend_->EmbeddingBagForward(5, 1, 2, Pooling::kSum, four, four, 2, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_
                ->EmbeddingBagForward(kMaxEmbeddingEntries, 2, 1, Pooling::kSum,
                                      four, four, 2, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_
                ->EmbeddingBagBackward(2, 2, 2, Pooling::kSum, four, four, four,
                                       4, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);  // row_starts needs 5
  EXPECT_TRUE(backend_
                  ->EmbeddingBagBackward(2, 2, 2, Pooling::kSum, four,
                                         Upload({0, 2, 4}), four, 2, &out)
                  .ok());
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOpsTest,
                         ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

TEST(CreateComputeBackendTest, Devices) {
  auto cpu = CreateComputeBackend("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->name().rfind("cpu (OpenBLAS, ", 0), 0) << (*cpu)->name();
  auto any = CreateComputeBackend("auto");
  ASSERT_TRUE(any.ok()) << any.status();
  auto cuda = CreateComputeBackend("cuda");
  if (cuda.ok()) {
    EXPECT_EQ((*any)->name(), (*cuda)->name());  // auto prefers CUDA
  } else {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(cuda.status().message().find("cuda"), std::string::npos);
    EXPECT_EQ((*any)->name(), (*cpu)->name());  // and falls back to the CPU
    std::printf("cuda unavailable here: %s\n",
                std::string(cuda.status().message()).c_str());
  }
  EXPECT_EQ(CreateComputeBackend("tpu").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Models: CUDA against CPU, loss and the gradient of every layer.

struct ModelCase {
  std::string name;
  ModelConfig::ModelType type;
  int64_t classes;
  bool classifier;
  ModelConfig::Activation activation;
};

class ModelParityTest : public ::testing::TestWithParam<ModelCase> {};

// Relative error of `got` against `want` in the L2 norm; also checks each
// element against the largest magnitude of `want`.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double diff2 = 0, norm2 = 0, max = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    diff2 += (double{got[k]} - want[k]) * (double{got[k]} - want[k]);
    norm2 += double{want[k]} * want[k];
    max = std::max(max, std::abs(double{want[k]}));
  }
  EXPECT_LE(std::sqrt(diff2), 1e-4 * std::sqrt(norm2)) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_NEAR(got[k], want[k], 1e-4 * max) << what << "[" << k << "]";
  }
}

TEST_P(ModelParityTest, CudaMatchesCpu) {
  std::string skip;
  std::unique_ptr<ComputeBackend> cuda = MakeBackend("cuda", &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_NE(cuda, nullptr);
  std::unique_ptr<ComputeBackend> cpu = MakeBackend("cpu", &skip);
  ASSERT_NE(cpu, nullptr);

  const ModelCase& c = GetParam();
  ModelConfig config = DefaultJobConfig().model();
  config.set_type(c.type);
  config.set_input_dim(64);
  config.set_num_classes(c.classes);
  SetList(config.mutable_hidden(), {128, 48});
  config.set_activation(c.activation);
  config.set_classifier(c.classifier);
  config.set_seed(9);
  auto on_cpu = Model::Create(config, cpu.get());
  auto on_cuda = Model::Create(config, cuda.get());
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.status();

  std::mt19937 rng(21);
  std::normal_distribution<float> noise(0, 0.05f);
  Params params;
  for (const auto& spec : (*on_cpu)->params()) {
    std::vector<float> v(NumElements(spec));
    InitialValues(spec, 0, v.size(), v.data());
    for (float& x : v) x += noise(rng);  // biases are not all zero
    params.push_back(v);
  }
  // A large batch, then a smaller one (scratch reuse), then a larger one.
  // With these seeds no hidden pre-activation lies within 2e-5 of the ReLU
  // kink, far beyond fp32 summation-order differences, so no ReLU derivative
  // can flip between the backends.
  for (const int64_t n : {96, 50, 130}) {
    Batch batch;
    batch.n = n;
    batch.dim = config.input_dim();
    batch.x = RandomVector(n * batch.dim, &rng);
    for (int64_t i = 0; i < n; ++i) {
      batch.y.push_back(c.classes >= 2 ? (i * 7) % c.classes : noise(rng));
    }
    const std::string at = absl::StrCat(c.name, " n=", n, " ");
    Params g_cpu, g_cuda;
    auto l_cpu = (*on_cpu)->LossAndGradient(params, batch, &g_cpu);
    auto l_cuda = (*on_cuda)->LossAndGradient(params, batch, &g_cuda);
    ASSERT_TRUE(l_cpu.ok()) << l_cpu.status();
    ASSERT_TRUE(l_cuda.ok()) << l_cuda.status();
    EXPECT_NEAR(*l_cuda, *l_cpu, 1e-4 * std::abs(*l_cpu)) << at << "loss";
    ASSERT_EQ(g_cuda.size(), g_cpu.size());
    for (size_t t = 0; t < g_cpu.size(); ++t) {
      ExpectClose(g_cuda[t], g_cpu[t], at + (*on_cpu)->params()[t].name());
    }
    auto e_cpu = (*on_cpu)->Evaluate(params, batch);
    auto e_cuda = (*on_cuda)->Evaluate(params, batch);
    ASSERT_TRUE(e_cpu.ok() && e_cuda.ok());
    EXPECT_NEAR(e_cuda->loss_sum, e_cpu->loss_sum, 1e-4 * e_cpu->loss_sum)
        << at;
    EXPECT_NEAR(e_cuda->correct, e_cpu->correct, 1) << at;  // near-ties
    EXPECT_EQ(e_cuda->total, n);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, ModelParityTest,
    ::testing::Values(
        ModelCase{"mlp_relu_cls", ModelConfig::MLP, 10, true,
                  ModelConfig::RELU},
        ModelCase{"mlp_tanh_cls", ModelConfig::MLP, 10, true,
                  ModelConfig::TANH},
        ModelCase{"mlp_gelu_cls", ModelConfig::MLP, 10, true,
                  ModelConfig::GELU},
        ModelCase{"mlp_relu_reg", ModelConfig::MLP, 1, false,
                  ModelConfig::RELU},
        ModelCase{"mlp_gelu_reg", ModelConfig::MLP, 1, false,
                  ModelConfig::GELU},
        ModelCase{"mlp_tanh_onehot", ModelConfig::MLP, 4, false,
                  ModelConfig::TANH},
        ModelCase{"softmax", ModelConfig::SOFTMAX, 10, true, ModelConfig::RELU},
        ModelCase{"linear", ModelConfig::LINEAR, 3, false, ModelConfig::RELU}),
    [](const auto& info) { return info.param.name; });

// The wide-and-deep model on CUDA against the CPU: loss, every dense
// tensor's gradient and the row-sparse gradient of the embedding table
// (sum and mean pooling, several hashes, rows shared across examples).
TEST(WideDeepParityTest, CudaMatchesCpu) {
  std::string skip;
  std::unique_ptr<ComputeBackend> cuda = MakeBackend("cuda", &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_NE(cuda, nullptr);
  std::unique_ptr<ComputeBackend> cpu = MakeBackend("cpu", &skip);
  ASSERT_NE(cpu, nullptr);
  for (const auto pooling : {ModelConfig::SUM, ModelConfig::MEAN}) {
    ModelConfig config = DefaultJobConfig().model();
    config.set_type(ModelConfig::WIDE_DEEP);
    config.set_input_dim(13);
    config.set_num_classes(4);
    config.set_activation(ModelConfig::TANH);
    config.set_sparse_columns(5);
    config.set_buckets(100003);
    config.set_embedding_dim(16);
    config.set_hashes(2);
    config.set_pooling(pooling);
    SetList(config.mutable_bottom_hidden(), {32});
    SetList(config.mutable_hidden(), {48, 24});
    auto on_cpu = Model::Create(config, cpu.get());
    auto on_cuda = Model::Create(config, cuda.get());
    ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
    ASSERT_TRUE(on_cuda.ok()) << on_cuda.status();
    std::mt19937 rng(17);
    Params params;
    for (const auto& spec : (*on_cpu)->params()) {
      std::vector<float> v;
      if (!spec.row_sparse()) {
        v.resize(NumElements(spec));
        InitialValues(spec, 0, v.size(), v.data());
      }
      params.push_back(v);
    }
    for (const int64_t n : {300, 77}) {
      Batch batch;
      batch.n = n;
      batch.dim = 13;
      batch.num_cat = 5;
      batch.x = RandomVector(n * 13, &rng);
      std::uniform_int_distribution<uint64_t> value(0, 40);
      for (int64_t k = 0; k < n * 5; ++k) batch.cat.push_back(value(rng));
      for (int64_t i = 0; i < n; ++i) batch.y.push_back(i % 4);
      const std::string at = absl::StrCat(ConfigName(pooling), " n=", n, " ");
      auto ids = (*on_cpu)->RowIds(0, batch);
      ASSERT_TRUE(ids.ok()) << ids.status();
      SparseRows rows;
      rows.ids = *ids;
      rows.values = RandomVector(ids->size() * 16, &rng, 0.5f);
      std::vector<float> dense[2];
      SparseRows row_grad[2];
      double loss[2];
      int b = 0;
      for (Model* m : {on_cpu->get(), on_cuda->get()}) {
        ASSERT_TRUE(m->SetRows(0, rows).ok());
        ASSERT_TRUE(m->SetParams(params).ok());
        auto l = m->ComputeGradient(batch, false);
        ASSERT_TRUE(l.ok()) << l.status();
        loss[b] = *l;
        dense[b].resize(m->num_dense_params());
        ASSERT_TRUE(
            m->backend()
                ->CopyToHost(*m->gradient(), dense[b].size(), dense[b].data())
                .ok());
        row_grad[b] = *m->row_gradient(0);
        ++b;
      }
      EXPECT_NEAR(loss[1], loss[0], 1e-4 * std::abs(loss[0])) << at;
      ExpectClose(dense[1], dense[0], at + "dense gradient");
      EXPECT_EQ(row_grad[1].ids, row_grad[0].ids) << at;
      ExpectClose(row_grad[1].values, row_grad[0].values, at + "row gradient");
    }
  }
}

}  // namespace
}  // namespace pstrain
