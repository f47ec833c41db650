// GPU check (run by tests/gpu/check.sh, not by `bazel test`): whole models on
// the CUDA backend against the same models on the CPU backend, with odd
// shapes and one activation of more than 2^24 elements (so every grid-stride
// loop wraps: their grids are capped at 65536 blocks of 256 threads), the
// softmax cross-entropy kernel on large logits with a small loss, the
// device-resident gradient accumulation the trainers use, and copies into
// pinned host memory. Without a usable CUDA device every test FAILS:
// this binary is only run where a GPU must work.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <ostream>
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

std::unique_ptr<ComputeBackend> Backend(const std::string& device) {
  absl::StatusOr<std::unique_ptr<ComputeBackend>> b =
      CreateComputeBackend(device);
  EXPECT_TRUE(b.ok()) << device << ": " << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

// Relative L2 error within 1e-4, and each element within 1e-4 of the
// largest magnitude.
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
  int reported = 0;
  for (size_t k = 0; k < want.size() && reported < 5; ++k) {
    if (std::abs(double{got[k]} - want[k]) > 1e-4 * max) {
      ADD_FAILURE() << what << "[" << k << "]: " << got[k] << " vs " << want[k];
      ++reported;
    }
  }
}

struct Case {
  std::string name;
  ModelConfig::ModelType type;
  int64_t input;
  std::vector<int64_t> hidden;
  int64_t classes;
  bool classifier;
  ModelConfig::Activation activation;
  std::vector<int64_t> batches;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ModelParity : public ::testing::TestWithParam<Case> {};

TEST_P(ModelParity, CudaMatchesCpu) {
  std::unique_ptr<ComputeBackend> cuda = Backend("cuda");
  ASSERT_NE(cuda, nullptr) << "this check needs a CUDA device";
  std::unique_ptr<ComputeBackend> cpu = Backend("cpu");
  ASSERT_NE(cpu, nullptr);
  const Case& c = GetParam();
  ModelConfig config = DefaultJobConfig().model();
  config.set_type(c.type);
  config.set_input_dim(c.input);
  config.set_num_classes(c.classes);
  config.mutable_hidden()->Clear();
  config.mutable_hidden()->Add(c.hidden.begin(), c.hidden.end());
  config.set_activation(c.activation);
  config.set_classifier(c.classifier);
  config.set_seed(5);
  auto on_cpu = Model::Create(config, cpu.get());
  auto on_cuda = Model::Create(config, cuda.get());
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.status();

  std::mt19937 rng(17);
  std::normal_distribution<float> noise(0, 0.05f);
  std::normal_distribution<float> unit(0, 1);
  Params params;
  for (const auto& spec : (*on_cpu)->params()) {
    std::vector<float> v(NumElements(spec));
    InitialValues(spec, 0, v.size(), v.data());
    for (float& x : v) x += noise(rng);
    params.push_back(v);
  }
  std::vector<Batch> batches;
  for (const int64_t n : c.batches) {
    Batch batch;
    batch.n = n;
    batch.dim = c.input;
    batch.x.resize(n * c.input);
    for (float& x : batch.x) x = unit(rng);
    for (int64_t i = 0; i < n; ++i) {
      batch.y.push_back(c.classes >= 2 ? (i * 5 + 3) % c.classes : unit(rng));
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
    ASSERT_TRUE(e_cpu.ok()) << e_cpu.status();
    ASSERT_TRUE(e_cuda.ok()) << e_cuda.status();
    EXPECT_NEAR(e_cuda->loss_sum, e_cpu->loss_sum,
                1e-4 * std::abs(e_cpu->loss_sum))
        << at;
    EXPECT_NEAR(e_cuda->correct, e_cpu->correct, 1) << at;  // near-ties
    batches.push_back(std::move(batch));
  }
  // The device-resident path the trainers take: the weights once, every
  // batch's gradient accumulated on the backend (views of one flat
  // gradient, Add), then scaled (Scale).
  std::vector<std::vector<float>> flat;
  for (Model* model : {on_cpu->get(), on_cuda->get()}) {
    ASSERT_TRUE(model->SetParams(params).ok());
    for (size_t b = 0; b < batches.size(); ++b) {
      absl::StatusOr<double> loss = model->ComputeGradient(batches[b], b > 0);
      ASSERT_TRUE(loss.ok()) << loss.status();
    }
    const int64_t total = model->num_params();
    ASSERT_TRUE(model->backend()
                    ->Scale(total, 1.0f / batches.size(), model->gradient())
                    .ok());
    std::vector<float> g(total);
    ASSERT_TRUE(
        model->backend()->CopyToHost(*model->gradient(), total, g.data()).ok());
    flat.push_back(std::move(g));
  }
  ExpectClose(flat[1], flat[0], c.name + " accumulated on the device");
  std::printf("%s: %s matches the CPU\n", c.name.c_str(), cuda->name().c_str());
}

// Smooth activations only: a ReLU derivative may flip between backends for a
// pre-activation within rounding of 0 (worker/compute:backend_parity_test
// covers ReLU with seeds that avoid it).
INSTANTIATE_TEST_SUITE_P(
    Models, ModelParity,
    ::testing::Values(
        Case{"gelu_odd",
             ModelConfig::MLP,
             37,
             {129, 33},
             7,
             true,
             ModelConfig::GELU,
             {61, 1, 257}},
        Case{"tanh_regressor",
             ModelConfig::MLP,
             19,
             {45},
             1,
             false,
             ModelConfig::TANH,
             {3, 100}},
        Case{"tanh_onehot",
             ModelConfig::MLP,
             23,
             {31},
             5,
             false,
             ModelConfig::TANH,
             {77}},
        Case{"softmax_wide",
             ModelConfig::SOFTMAX,
             1000,
             {},
             3,
             true,
             ModelConfig::GELU,
             {33}},
        // 4100 x 4100 = 16,810,000 > 2^24 hidden activations: the bias,
        // activation and column-sum kernels wrap their grids.
        Case{"gelu_16_8M",
             ModelConfig::MLP,
             64,
             {4100},
             10,
             true,
             ModelConfig::GELU,
             {4100}}),
    [](const auto& info) { return info.param.name; });

TEST(SoftmaxKernel, LargeLogitsSmallLoss) {
  std::unique_ptr<ComputeBackend> cuda = Backend("cuda");
  ASSERT_NE(cuda, nullptr) << "this check needs a CUDA device";
  // Row i: 1e4 + i, then 40 logits 10..50 below; label 0 (small loss) or 3.
  const int64_t rows = 9, cols = 41;
  std::vector<float> z(rows * cols), y(rows);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      z[i * cols + j] = 1e4f + i - (j == 0 ? 0 : 9 + j);
    }
    y[i] = i % 2 == 0 ? 0 : 3;
  }
  auto dz = cuda->Allocate(z.size());
  auto dy = cuda->Allocate(rows);
  auto dl = cuda->Allocate(rows);
  ASSERT_TRUE(dz.ok() && dy.ok() && dl.ok());
  ASSERT_TRUE(cuda->CopyToDevice(z.data(), z.size(), &*dz).ok());
  ASSERT_TRUE(cuda->CopyToDevice(y.data(), rows, &*dy).ok());
  ASSERT_TRUE(
      cuda->SoftmaxCrossEntropy(rows, cols, *dz, *dy, 1, &*dl, nullptr).ok());
  std::vector<float> losses(rows);
  ASSERT_TRUE(cuda->CopyToHost(*dl, rows, losses.data()).ok());
  for (int64_t i = 0; i < rows; ++i) {
    const float* r = z.data() + i * cols;
    const double m = *std::max_element(r, r + cols);
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(double{r[j]} - m);
    const double want = std::log(sum) + (m - r[static_cast<int>(y[i])]);
    EXPECT_NEAR(losses[i], want, 1e-5 * want) << "row " << i;
  }
}

TEST(Copies, PinnedAndPageableHostMemory) {
  std::unique_ptr<ComputeBackend> cuda = Backend("cuda");
  ASSERT_NE(cuda, nullptr) << "this check needs a CUDA device";
  const int64_t n = (int64_t{3} << 20) + 7;  // several staging chunks
  std::vector<float> src(n);
  for (int64_t k = 0; k < n; ++k) src[k] = static_cast<float>(k % 1000) - 1;
  auto buffer = cuda->Allocate(n);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  ASSERT_TRUE(cuda->CopyToDevice(src.data(), n, &*buffer).ok());
  std::vector<float> pageable(n, 0);
  ASSERT_TRUE(cuda->CopyToHost(*buffer, n, pageable.data()).ok());
  EXPECT_EQ(pageable, src);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, n * sizeof(float)), cudaSuccess);
  std::fill(pinned, pinned + n, 0.0f);
  const absl::Status st = cuda->CopyToHost(*buffer, n, pinned);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(std::equal(src.begin(), src.end(), pinned));
  cudaFreeHost(pinned);
}

}  // namespace
}  // namespace pstrain
