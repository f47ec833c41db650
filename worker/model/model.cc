#include "worker/model/model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "worker/compute/cpu_backend.h"
#include "worker/model/wide_deep_model.h"

namespace pstrain {
namespace {

using Params = std::vector<std::vector<float>>;
using pstrain::v1::TensorSpec;

absl::Status CheckParams(const std::vector<TensorSpec>& specs,
                         const TensorViews& params) {
  return CheckParamViews(specs, params);
}

absl::Status NotRowSparse(const std::vector<TensorSpec>& specs, int tensor) {
  if (tensor < 0 || tensor >= static_cast<int>(specs.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no parameter tensor ", tensor, " (the model has ", specs.size(), ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("parameter '", specs[tensor].name(), "' is not row-sparse"));
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
  if (batch.num_cat != 0 || !batch.cat.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch has ", batch.num_cat,
                     " categorical columns; only model.type wide_deep reads "
                     "them"));
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
// "scalar": one weight w, per-example loss (w - y)^2. The loss is computed on
// the host; only the gradient lives on the backend (like every model's).

class ScalarModel : public Model {
 public:
  ScalarModel(std::vector<TensorSpec> specs, ComputeBackend* backend,
              std::unique_ptr<ComputeBackend> owned)
      : owned_backend_(std::move(owned)),
        backend_(backend),
        specs_(std::move(specs)) {}

  const std::vector<TensorSpec>& params() const override { return specs_; }
  bool is_classifier() const override { return false; }
  ComputeBackend* backend() const override { return backend_; }

  using Model::SetParams;
  absl::Status SetParams(const TensorViews& params) override {
    PS_RETURN_IF_ERROR(CheckParams(specs_, params));
    w_ = params[0][0];
    has_params_ = true;
    return absl::OkStatus();
  }

  absl::StatusOr<double> ComputeGradient(const Batch& batch,
                                         bool accumulate) override {
    PS_ASSIGN_OR_RETURN(EvalResult r, EvaluateResident(batch));
    if (batch.n == 0) return absl::InvalidArgumentError("empty batch");
    double dw = 0;
    for (float y : batch.y) dw += 2.0 * (w_ - y);
    const float g = static_cast<float>(dw / batch.n);
    if (grad_.size() == 0) {
      PS_ASSIGN_OR_RETURN(grad_, backend_->Allocate(2));
      PS_ASSIGN_OR_RETURN(micro_, backend_->Allocate(1));
    }
    if (accumulate) {
      PS_RETURN_IF_ERROR(backend_->CopyToDevice(&g, 1, &micro_));
      PS_RETURN_IF_ERROR(backend_->Add(1, micro_, &grad_));
    } else {
      PS_RETURN_IF_ERROR(backend_->CopyToDevice(&g, 1, &grad_));
    }
    return r.loss_sum / batch.n;
  }

  absl::StatusOr<EvalResult> EvaluateResident(const Batch& batch) override {
    PS_RETURN_IF_ERROR(CheckBatch(batch, /*dim=*/-1, /*num_classes=*/1));
    if (!has_params_) return NoParams();
    EvalResult r;
    for (float y : batch.y) {
      const double d = w_ - y;
      r.loss_sum += d * d;
    }
    r.total = batch.n;
    return r;
  }

  DeviceBuffer* gradient() override {
    return grad_.size() == 0 ? nullptr : &grad_;
  }

 private:
  static absl::Status NoParams() {
    return absl::FailedPreconditionError("the model has no parameters yet");
  }

  // Declared first so that it is destroyed after the buffers below.
  const std::unique_ptr<ComputeBackend> owned_backend_;  // may be null
  ComputeBackend* const backend_;
  const std::vector<TensorSpec> specs_;
  float w_ = 0;
  bool has_params_ = false;
  DeviceBuffer grad_, micro_;  // on the backend
};

// ---------------------------------------------------------------------------
// "linear", "softmax" and "mlp": a stack of dense layers (weight [in, out] and
// bias [out]); every layer but the last is followed by the activation. All
// arithmetic runs on the backend; the host only moves parameters in, the
// batch in, and counts correct predictions.

class DenseModel : public ResidentParamsModel {
 public:
  DenseModel(std::vector<TensorSpec> specs, Activation act, bool softmax_head,
             ComputeBackend* backend, std::unique_ptr<ComputeBackend> owned)
      : owned_backend_(std::move(owned)),
        backend_(backend),
        specs_(std::move(specs)),
        act_(act),
        softmax_head_(softmax_head) {
    widths_.push_back(specs_[0].shape(0));
    for (size_t l = 0; l < specs_.size(); l += 2) {
      widths_.push_back(specs_[l].shape(1));
    }
    int64_t offset = 0;
    for (const TensorSpec& spec : specs_) {
      offsets_.push_back(offset);
      offset += NumElements(spec);
    }
    total_ = offset;
    z_.resize(num_layers());
    a_.resize(num_layers());
  }

  const std::vector<TensorSpec>& params() const override { return specs_; }
  bool is_classifier() const override { return num_outputs() >= 2; }
  ComputeBackend* backend() const override { return backend_; }

  absl::StatusOr<double> ComputeGradient(const Batch& batch,
                                         bool accumulate) override {
    PS_RETURN_IF_ERROR(CheckBatch(batch, widths_[0], num_outputs()));
    if (!params_.has()) return NoParams();
    if (batch.n == 0) return absl::InvalidArgumentError("empty batch");
    if (accumulate && grad_.size() == 0) {
      return absl::FailedPreconditionError(
          "ComputeGradient: nothing to accumulate into yet");
    }
    const int64_t n = batch.n;
    PS_RETURN_IF_ERROR(Reserve(&grad_, total_ + 1));
    // Accumulation computes into micro_ and adds it; otherwise the gradient
    // is computed in place.
    DeviceBuffer* out = &grad_;
    if (accumulate) {
      PS_RETURN_IF_ERROR(Reserve(&micro_, total_));
      out = &micro_;
    }
    PS_RETURN_IF_ERROR(Forward(batch));
    // delta = d(mean loss) / d(pre-activation) of the current layer.
    PS_RETURN_IF_ERROR(Reserve(&delta_, n * num_outputs()));
    PS_RETURN_IF_ERROR(Head(n, 1.0f / n, &delta_));
    for (int l = num_layers() - 1; l >= 0; --l) {
      const int64_t in = widths_[l], width = widths_[l + 1];
      DeviceBuffer dw = out->View(offsets_[2 * l], in * width);
      DeviceBuffer db = out->View(offsets_[2 * l + 1], width);
      PS_RETURN_IF_ERROR(backend_->Gemm(true, false, in, width, n, 1.0f,
                                        Input(l), delta_, 0.0f, &dw));
      PS_RETURN_IF_ERROR(backend_->ColumnSum(n, width, delta_, &db));
      if (l == 0) break;
      // Back through the weights, then through the previous activation.
      PS_RETURN_IF_ERROR(Reserve(&prev_delta_, n * in));
      PS_RETURN_IF_ERROR(backend_->Gemm(false, true, n, in, width, 1.0f, delta_,
                                        params_[2 * l], 0.0f, &prev_delta_));
      PS_RETURN_IF_ERROR(backend_->ActivationBackward(act_, n * in, z_[l - 1],
                                                      a_[l - 1], &prev_delta_));
      std::swap(delta_, prev_delta_);
    }
    if (accumulate) PS_RETURN_IF_ERROR(backend_->Add(total_, micro_, &grad_));
    PS_ASSIGN_OR_RETURN(const double loss_sum, backend_->Sum(n, losses_));
    return loss_sum / n;
  }

  absl::StatusOr<EvalResult> EvaluateResident(const Batch& batch) override {
    PS_RETURN_IF_ERROR(CheckBatch(batch, widths_[0], num_outputs()));
    if (!params_.has()) return NoParams();
    EvalResult r;
    r.total = batch.n;
    if (batch.n == 0) return r;
    PS_RETURN_IF_ERROR(Forward(batch));
    PS_RETURN_IF_ERROR(Head(batch.n, 0.0f, nullptr));
    PS_ASSIGN_OR_RETURN(r.loss_sum, backend_->Sum(batch.n, losses_));
    if (is_classifier()) {
      const int64_t out = num_outputs();
      logits_.resize(batch.n * out);
      PS_RETURN_IF_ERROR(
          backend_->CopyToHost(z_.back(), logits_.size(), logits_.data()));
      r.correct = CountCorrect(logits_, out, batch.y);
    }
    return r;
  }

  DeviceBuffer* gradient() override {
    return grad_.size() == 0 ? nullptr : &grad_;
  }

 private:
  int num_layers() const { return static_cast<int>(specs_.size() / 2); }
  int64_t num_outputs() const { return widths_.back(); }
  const DeviceBuffer& Input(int l) const { return l == 0 ? x_ : a_[l - 1]; }

  static absl::Status NoParams() {
    return absl::FailedPreconditionError("the model has no parameters yet");
  }

  ResidentParams& resident_params() override { return params_; }

  // Scratch grows to the largest batch seen and is then reused.
  absl::Status Reserve(DeviceBuffer* buffer, int64_t n) {
    return ReserveBuffer(backend_, n, buffer);
  }

  absl::Status Upload(const std::vector<float>& host, DeviceBuffer* buffer) {
    PS_RETURN_IF_ERROR(Reserve(buffer, host.size()));
    return backend_->CopyToDevice(host.data(), host.size(), buffer);
  }

  // Uploads the batch, then fills z_[l] (pre-activations; z_.back() =
  // outputs) and a_[l] (hidden activations) for every layer from the
  // resident parameters.
  absl::Status Forward(const Batch& batch) {
    PS_RETURN_IF_ERROR(Upload(batch.x, &x_));
    PS_RETURN_IF_ERROR(Upload(batch.y, &labels_));
    const int64_t n = batch.n;
    for (int l = 0; l < num_layers(); ++l) {
      const int64_t in = widths_[l], width = widths_[l + 1];
      PS_RETURN_IF_ERROR(Reserve(&z_[l], n * width));
      PS_RETURN_IF_ERROR(backend_->Gemm(false, false, n, width, in, 1.0f,
                                        Input(l), params_[2 * l], 0.0f,
                                        &z_[l]));
      PS_RETURN_IF_ERROR(
          backend_->BiasAdd(n, width, params_[2 * l + 1], &z_[l]));
      if (l + 1 < num_layers()) {
        PS_RETURN_IF_ERROR(Reserve(&a_[l], n * width));
        PS_RETURN_IF_ERROR(
            backend_->ActivationForward(act_, n * width, z_[l], &a_[l]));
      }
    }
    return absl::OkStatus();
  }

  // Per-example losses of the outputs into losses_; unless `grad` is null,
  // grad_scale * d loss / d outputs into it.
  absl::Status Head(int64_t n, float grad_scale, DeviceBuffer* grad) {
    PS_RETURN_IF_ERROR(Reserve(&losses_, n));
    if (softmax_head_) {
      return backend_->SoftmaxCrossEntropy(n, num_outputs(), z_.back(), labels_,
                                           grad_scale, &losses_, grad);
    }
    return backend_->SquaredError(n, num_outputs(), z_.back(), labels_,
                                  grad_scale, &losses_, grad);
  }

  // Declared first so that it is destroyed after the buffers below.
  const std::unique_ptr<ComputeBackend> owned_backend_;  // may be null
  ComputeBackend* const backend_;
  const std::vector<TensorSpec> specs_;  // weight, bias per layer
  const Activation act_;
  const bool softmax_head_;
  std::vector<int64_t> widths_;   // input, hidden..., outputs
  std::vector<int64_t> offsets_;  // of each tensor in the flat gradient
  int64_t total_ = 0;             // floats in all tensors
  // On the backend, reused across calls: the resident parameters (or views
  // of the caller's, ShareParams) and gradient (total_ + 1 floats, see
  // Model::gradient), the micro-batch gradient being accumulated, the batch,
  // per-layer pre-activations and activations, deltas, per-example losses.
  ResidentParams params_;
  std::vector<DeviceBuffer> z_, a_;
  DeviceBuffer grad_, micro_, x_, labels_, delta_, prev_delta_, losses_;
  std::vector<float> logits_;  // host copy for Evaluate's argmax
};

// Model::Create; `owned`, if not null, is `backend` and the model keeps it.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(
    const ModelConfig& config, ComputeBackend* backend,
    std::unique_ptr<ComputeBackend> owned) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("Model::Create: null compute backend");
  }
  if (config.type() == ModelConfig::EXTERNAL) {
    return absl::FailedPreconditionError(
        "model.type external is defined by its workers: train it with Python "
        "workers (psctl run --worker-cmd, docs/python.md), not ps_worker");
  }
  PS_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs, ModelParamSpecs(config));
  if (config.type() == ModelConfig::SCALAR) {
    return std::unique_ptr<Model>(
        new ScalarModel(std::move(specs), backend, std::move(owned)));
  }
  if (config.type() == ModelConfig::WIDE_DEEP) {
    return CreateWideDeepModel(config, std::move(specs), backend,
                               std::move(owned));
  }
  Activation act = Activation::kIdentity;
  if (config.type() == ModelConfig::MLP) {
    act = config.activation() == ModelConfig::RELU   ? Activation::kRelu
          : config.activation() == ModelConfig::TANH ? Activation::kTanh
                                                     : Activation::kGelu;
  }
  const bool softmax_head =
      config.type() == ModelConfig::SOFTMAX ||
      (config.type() == ModelConfig::MLP && config.classifier());
  return std::unique_ptr<Model>(new DenseModel(
      std::move(specs), act, softmax_head, backend, std::move(owned)));
}

}  // namespace

absl::Status CheckParamViews(const std::vector<TensorSpec>& specs,
                             const TensorViews& params) {
  if (params.size() != specs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", specs.size(), " parameter tensors, got ", params.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t want = specs[i].row_sparse() ? 0 : NumElements(specs[i]);
    if (static_cast<int64_t>(params[i].size()) != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", specs[i].name(), "' has ", params[i].size(),
          " elements, expected ", want,
          specs[i].row_sparse() ? " (row-sparse: rows come through SetRows)"
                                : ""));
    }
  }
  return absl::OkStatus();
}

absl::Status ReserveBuffer(ComputeBackend* backend, int64_t n,
                           DeviceBuffer* buffer) {
  if (buffer->size() >= n) return absl::OkStatus();
  *buffer = DeviceBuffer();  // free first: lower peak memory
  PS_ASSIGN_OR_RETURN(*buffer, backend->Allocate(n));
  return absl::OkStatus();
}

absl::Status ResidentParams::Set(ComputeBackend* backend,
                                 const std::vector<TensorSpec>& specs,
                                 const TensorViews& params, bool share) {
  PS_RETURN_IF_ERROR(CheckParamViews(specs, params));
  has_ = false;  // until every tensor is there
  buffers_.resize(specs.size());
  share = share && backend->host_memory();
  ReleaseShared();  // a view is never copied into
  for (size_t t = 0; t < specs.size(); ++t) {
    if (specs[t].row_sparse()) continue;
    DeviceBuffer& b = buffers_[t];
    const int64_t n = static_cast<int64_t>(params[t].size());
    if (share) {
      b = backend->ViewOfHost(params[t].data(), n);
      continue;
    }
    PS_RETURN_IF_ERROR(ReserveBuffer(backend, n, &b));
    PS_RETURN_IF_ERROR(backend->CopyToDevice(params[t].data(), n, &b));
  }
  shared_ = share;
  has_ = true;
  return absl::OkStatus();
}

void ResidentParams::ReleaseShared() {
  if (!shared_) return;
  for (DeviceBuffer& b : buffers_) b = DeviceBuffer();
  shared_ = false;
  has_ = false;
}

absl::StatusOr<std::vector<int64_t>> Model::RowIds(int tensor,
                                                   const Batch&) const {
  return NotRowSparse(params(), tensor);
}

absl::Status Model::SetRows(int tensor, SparseRows) {
  return NotRowSparse(params(), tensor);
}

SparseRows* Model::row_gradient(int) { return nullptr; }

int64_t Model::num_dense_params() const {
  int64_t total = 0;
  for (const TensorSpec& spec : params()) {
    if (!spec.row_sparse()) total += NumElements(spec);
  }
  return total;
}

absl::Status Model::SetParams(const Params& params) {
  return SetParams(TensorViews(params.begin(), params.end()));
}

int64_t Model::num_params() const {
  int64_t total = 0;
  for (const TensorSpec& spec : params()) total += NumElements(spec);
  return total;
}

absl::StatusOr<double> Model::LossAndGradient(const Params& params,
                                              const Batch& batch,
                                              Params* grads) {
  PS_RETURN_IF_ERROR(SetParams(params));
  PS_ASSIGN_OR_RETURN(const double loss,
                      ComputeGradient(batch, /*accumulate=*/false));
  DeviceBuffer* flat = gradient();
  grads->resize(params.size());
  int64_t offset = 0;
  for (size_t t = 0; t < params.size(); ++t) {
    const int64_t n = static_cast<int64_t>(params[t].size());
    (*grads)[t].resize(n);
    PS_RETURN_IF_ERROR(
        backend()->CopyToHost(flat->View(offset, n), n, (*grads)[t].data()));
    offset += n;
  }
  return loss;
}

absl::StatusOr<EvalResult> Model::Evaluate(const Params& params,
                                           const Batch& batch) {
  PS_RETURN_IF_ERROR(SetParams(params));
  return EvaluateResident(batch);
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    const ModelConfig& config) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ComputeBackend> cpu, CreateCpuBackend());
  ComputeBackend* backend = cpu.get();
  return CreateModel(config, backend, std::move(cpu));
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config,
                                                     ComputeBackend* backend) {
  return CreateModel(config, backend, nullptr);
}

int64_t CountCorrect(absl::Span<const float> logits, int64_t out,
                     absl::Span<const float> y) {
  int64_t correct = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const float* z = logits.data() + i * out;
    if (std::max_element(z, z + out) - z == y[i]) ++correct;
  }
  return correct;
}

}  // namespace pstrain
