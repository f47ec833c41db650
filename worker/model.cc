#include "worker/model.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

using Params = std::vector<std::vector<float>>;
using pstrain::v1::TensorSpec;

absl::Status CheckParams(const std::vector<TensorSpec>& specs,
                         const Params& params) {
  if (params.size() != specs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", specs.size(), " parameter tensors, got ", params.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t want = NumElements(specs[i]);
    if (static_cast<int64_t>(params[i].size()) != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", specs[i].name(), "' has ",
                       params[i].size(), " elements, expected ", want));
    }
  }
  return absl::OkStatus();
}

// Checks sizes, and labels: class ids in [0, num_classes) when
// num_classes >= 2, finite targets otherwise. dim < 0 accepts any dim.
absl::Status CheckBatch(const Batch& batch, int64_t dim, int64_t num_classes) {
  if (batch.n < 0 || batch.dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch has negative size: n=", batch.n, " dim=", batch.dim));
  }
  if (dim >= 0 && batch.dim != dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch has ", batch.dim, " features, the model expects ", dim));
  }
  if (batch.x.size() != static_cast<uint64_t>(batch.n) * batch.dim ||
      batch.y.size() != static_cast<uint64_t>(batch.n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch of ", batch.n, "x", batch.dim, " has ", batch.x.size(),
        " features and ", batch.y.size(), " labels"));
  }
  for (int64_t i = 0; i < batch.n; ++i) {
    const float y = batch.y[i];
    const bool ok = num_classes >= 2
                        ? (y >= 0 && y < num_classes && y == std::floor(y))
                        : std::isfinite(y);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label ", y, " of example ", i, " is invalid",
          num_classes >= 2 ? absl::StrCat(" (", num_classes, " classes)")
                           : std::string(" (not finite)")));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// "scalar": one weight w, per-example loss (w - y)^2.

class ScalarModel : public Model {
 public:
  explicit ScalarModel(std::vector<TensorSpec> specs)
      : specs_(std::move(specs)) {}

  const std::vector<TensorSpec>& params() const override { return specs_; }
  bool is_classifier() const override { return false; }

  absl::StatusOr<double> LossAndGradient(const Params& params,
                                         const Batch& batch,
                                         Params* grads) override {
    PS_ASSIGN_OR_RETURN(EvalResult r, Evaluate(params, batch));
    if (batch.n == 0) return absl::InvalidArgumentError("empty batch");
    double dw = 0;
    for (float y : batch.y) dw += 2.0 * (params[0][0] - y);
    grads->assign(1, {static_cast<float>(dw / batch.n)});
    return r.loss_sum / batch.n;
  }

  absl::StatusOr<EvalResult> Evaluate(const Params& params,
                                      const Batch& batch) override {
    PS_RETURN_IF_ERROR(CheckParams(specs_, params));
    PS_RETURN_IF_ERROR(CheckBatch(batch, /*dim=*/-1, /*num_classes=*/1));
    EvalResult r;
    for (float y : batch.y) {
      const double d = params[0][0] - y;
      r.loss_sum += d * d;
    }
    r.total = batch.n;
    return r;
  }

 private:
  std::vector<TensorSpec> specs_;
};

// ---------------------------------------------------------------------------
// "linear", "softmax" and "mlp": a stack of dense layers (weight [in, out] and
// bias [out]); every layer but the last is followed by the activation.

enum class Activation { kIdentity, kRelu, kTanh, kGelu };

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

// C[m x n] = op(A) * op(B) (+ C when accumulate), row-major.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a,
              trans_a ? m : k, b, trans_b ? k : n, 0.0f, c, n);
}

class DenseModel : public Model {
 public:
  DenseModel(std::vector<TensorSpec> specs, Activation act, bool softmax_head)
      : specs_(std::move(specs)), act_(act), softmax_head_(softmax_head) {
    widths_.push_back(specs_[0].shape(0));
    for (size_t l = 0; l < specs_.size(); l += 2) {
      widths_.push_back(specs_[l].shape(1));
    }
    z_.resize(num_layers());
    a_.resize(num_layers());
  }

  const std::vector<TensorSpec>& params() const override { return specs_; }
  bool is_classifier() const override { return num_outputs() >= 2; }

  absl::StatusOr<double> LossAndGradient(const Params& params,
                                         const Batch& batch,
                                         Params* grads) override {
    PS_RETURN_IF_ERROR(Check(params, batch));
    if (batch.n == 0) return absl::InvalidArgumentError("empty batch");
    const int64_t n = batch.n;
    Forward(params, batch);
    // delta = d(mean loss) / d(pre-activation) of the current layer.
    const int64_t out = num_outputs();
    delta_.resize(n * out);
    double loss = 0;
    for (int64_t i = 0; i < n; ++i) {
      loss += HeadLoss(&z_.back()[i * out], batch.y[i], &delta_[i * out]);
    }
    for (float& d : delta_) d /= n;

    grads->resize(specs_.size());
    for (int l = num_layers() - 1; l >= 0; --l) {
      const int64_t in = widths_[l], width = widths_[l + 1];
      const float* input = Input(batch, l);
      std::vector<float>& dw = (*grads)[2 * l];
      std::vector<float>& db = (*grads)[2 * l + 1];
      dw.resize(in * width);
      db.assign(width, 0.0f);
      Gemm(true, false, in, width, n, input, delta_.data(), dw.data());
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < width; ++j) db[j] += delta_[i * width + j];
      }
      if (l == 0) break;
      // Back through the weights, then through the previous activation.
      prev_delta_.resize(n * in);
      Gemm(false, true, n, in, width, delta_.data(), params[2 * l].data(),
           prev_delta_.data());
      const std::vector<float>& z = z_[l - 1];
      const std::vector<float>& a = a_[l - 1];
      for (int64_t k = 0; k < n * in; ++k) {
        prev_delta_[k] *= Derivative(act_, z[k], a[k]);
      }
      delta_.swap(prev_delta_);
    }
    return loss / n;
  }

  absl::StatusOr<EvalResult> Evaluate(const Params& params,
                                      const Batch& batch) override {
    PS_RETURN_IF_ERROR(Check(params, batch));
    EvalResult r;
    r.total = batch.n;
    if (batch.n == 0) return r;
    Forward(params, batch);
    const int64_t out = num_outputs();
    for (int64_t i = 0; i < batch.n; ++i) {
      const float* logits = &z_.back()[i * out];
      r.loss_sum += HeadLoss(logits, batch.y[i], nullptr);
      if (is_classifier() &&
          std::max_element(logits, logits + out) - logits == batch.y[i]) {
        ++r.correct;
      }
    }
    return r;
  }

 private:
  int num_layers() const { return static_cast<int>(specs_.size() / 2); }
  int64_t num_outputs() const { return widths_.back(); }
  const float* Input(const Batch& batch, int l) const {
    return l == 0 ? batch.x.data() : a_[l - 1].data();
  }

  absl::Status Check(const Params& params, const Batch& batch) const {
    PS_RETURN_IF_ERROR(CheckParams(specs_, params));
    return CheckBatch(batch, widths_[0], num_outputs());
  }

  // Fills z_[l] (pre-activations; z_.back() = outputs) and a_[l] (hidden
  // activations) for every layer.
  void Forward(const Params& params, const Batch& batch) {
    const int64_t n = batch.n;
    for (int l = 0; l < num_layers(); ++l) {
      const int64_t in = widths_[l], width = widths_[l + 1];
      std::vector<float>& z = z_[l];
      z.resize(n * width);
      Gemm(false, false, n, width, in, Input(batch, l), params[2 * l].data(),
           z.data());
      const std::vector<float>& bias = params[2 * l + 1];
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < width; ++j) z[i * width + j] += bias[j];
      }
      if (l + 1 < num_layers()) {
        a_[l].resize(z.size());
        for (size_t k = 0; k < z.size(); ++k) a_[l][k] = Activate(act_, z[k]);
      }
    }
  }

  // Loss of one example from its outputs; writes d loss / d outputs to `grad`
  // unless null. Softmax cross-entropy subtracts the max logit for stability.
  double HeadLoss(const float* z, float label, float* grad) const {
    const int64_t out = num_outputs();
    if (softmax_head_) {
      const int64_t y = static_cast<int64_t>(label);
      const float max = *std::max_element(z, z + out);
      double sum = 0;
      for (int64_t j = 0; j < out; ++j) sum += std::exp(double{z[j]} - max);
      if (grad != nullptr) {
        for (int64_t j = 0; j < out; ++j) {
          grad[j] = static_cast<float>(std::exp(double{z[j]} - max) / sum) -
                    (j == y ? 1.0f : 0.0f);
        }
      }
      return std::log(sum) + max - z[y];
    }
    double loss = 0;
    for (int64_t j = 0; j < out; ++j) {
      const float target =
          out == 1 ? label : (j == static_cast<int64_t>(label) ? 1.0f : 0.0f);
      const float d = z[j] - target;
      loss += 0.5 * double{d} * d;
      if (grad != nullptr) grad[j] = d;
    }
    return loss;
  }

  const std::vector<TensorSpec> specs_;  // weight, bias per layer
  const Activation act_;
  const bool softmax_head_;
  std::vector<int64_t> widths_;  // input, hidden..., outputs
  // Scratch, reused across calls.
  std::vector<std::vector<float>> z_, a_;
  std::vector<float> delta_, prev_delta_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    const ModelConfig& config) {
  PS_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs, ModelParamSpecs(config));
  if (config.type == "scalar") {
    return std::unique_ptr<Model>(new ScalarModel(std::move(specs)));
  }
  Activation act = Activation::kIdentity;
  if (config.type == "mlp") {
    act = config.activation == "relu"   ? Activation::kRelu
          : config.activation == "tanh" ? Activation::kTanh
                                        : Activation::kGelu;
  }
  const bool softmax_head =
      config.type == "softmax" || (config.type == "mlp" && config.classifier);
  return std::unique_ptr<Model>(
      new DenseModel(std::move(specs), act, softmax_head));
}

}  // namespace pstrain
