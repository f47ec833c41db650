#include "worker/model/wide_deep_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

using pstrain::v1::TensorSpec;

constexpr int kTable = 0;  // params()[0] is the embedding table

uint64_t Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Activation ToActivation(ModelConfig::Activation act) {
  return act == ModelConfig::RELU   ? Activation::kRelu
         : act == ModelConfig::TANH ? Activation::kTanh
                                    : Activation::kGelu;
}

class WideDeepModel : public ResidentParamsModel {
 public:
  WideDeepModel(const ModelConfig& config, std::vector<TensorSpec> specs,
                ComputeBackend* backend, std::unique_ptr<ComputeBackend> owned)
      : owned_backend_(std::move(owned)),
        backend_(backend),
        specs_(std::move(specs)),
        act_(ToActivation(config.activation())),
        pooling_(config.pooling() == ModelConfig::MEAN ? Pooling::kMean
                                                       : Pooling::kSum),
        columns_(config.sparse_columns()),
        hashes_(config.hashes()),
        dim_(config.embedding_dim()),
        buckets_(config.buckets()),
        bottom_layers_(config.bottom_hidden_size()),
        top_layers_(config.hidden_size() + 1) {
    bottom_widths_.push_back(config.input_dim());
    for (int64_t w : config.bottom_hidden()) bottom_widths_.push_back(w);
    top_widths_.push_back(bottom_widths_.back() + columns_ * dim_);
    for (int64_t w : config.hidden()) top_widths_.push_back(w);
    top_widths_.push_back(config.num_classes());
    int64_t offset = 0;
    for (const TensorSpec& spec : specs_) {
      offsets_.push_back(offset);
      if (!spec.row_sparse()) offset += NumElements(spec);
    }
    total_ = offset;
    bottom_z_.resize(bottom_layers_);
    bottom_a_.resize(bottom_layers_);
    top_z_.resize(top_layers_);
    top_a_.resize(top_layers_);
  }

  const std::vector<TensorSpec>& params() const override { return specs_; }
  bool is_classifier() const override { return true; }
  ComputeBackend* backend() const override { return backend_; }

  absl::StatusOr<std::vector<int64_t>> RowIds(
      int tensor, const Batch& batch) const override {
    PS_RETURN_IF_ERROR(CheckTable(tensor));
    PS_RETURN_IF_ERROR(CheckBatch(batch));
    std::vector<int64_t> ids = HashBatch(batch);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
  }

  absl::Status SetRows(int tensor, SparseRows rows) override {
    PS_RETURN_IF_ERROR(CheckTable(tensor));
    const std::string& name = specs_[kTable].name();
    if (rows.values.size() != rows.ids.size() * dim_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SetRows '", name, "': ", rows.ids.size(), " ids need ",
          rows.ids.size() * dim_, " values, got ", rows.values.size()));
    }
    for (size_t k = 0; k < rows.ids.size(); ++k) {
      const int64_t id = rows.ids[k];
      if (id < 0 || id >= buckets_ || (k > 0 && id <= rows.ids[k - 1])) {
        return absl::InvalidArgumentError(
            absl::StrCat("SetRows '", name, "': id ", id, " at position ", k,
                         " is outside [0, ", buckets_,
                         ") or not above the one before "
                         "(ids must be sorted and unique)"));
      }
    }
    rows_ = std::move(rows);
    return absl::OkStatus();
  }

  SparseRows* row_gradient(int tensor) override {
    if (tensor != kTable || !has_row_gradient_) return nullptr;
    return &row_grad_;
  }

  absl::StatusOr<double> ComputeGradient(const Batch& batch,
                                         bool accumulate) override {
    PS_RETURN_IF_ERROR(CheckBatch(batch));
    if (!params_.has()) return NoParams();
    if (batch.n == 0) return absl::InvalidArgumentError("empty batch");
    if (accumulate && grad_.size() == 0) {
      return absl::FailedPreconditionError(
          "ComputeGradient: nothing to accumulate into yet");
    }
    PS_RETURN_IF_ERROR(Prepare(batch, /*backward=*/true));
    const int64_t n = batch.n;
    PS_RETURN_IF_ERROR(Reserve(&grad_, total_ + 1));
    DeviceBuffer* out = &grad_;
    if (accumulate) {
      PS_RETURN_IF_ERROR(Reserve(&micro_, total_));
      out = &micro_;
    }
    PS_RETURN_IF_ERROR(Forward(n));
    PS_RETURN_IF_ERROR(Reserve(&delta_, n * num_outputs()));
    PS_RETURN_IF_ERROR(Head(n, 1.0f / n, &delta_));

    // Top MLP, last layer first.
    for (int l = top_layers_ - 1; l > 0; --l) {
      const int64_t in = top_widths_[l], width = top_widths_[l + 1];
      DeviceBuffer dw = out->View(offsets_[TopWeight(l)], in * width);
      DeviceBuffer db = out->View(offsets_[TopWeight(l) + 1], width);
      PS_RETURN_IF_ERROR(backend_->Gemm(true, false, in, width, n, 1.0f,
                                        top_a_[l - 1], delta_, 0.0f, &dw));
      PS_RETURN_IF_ERROR(backend_->ColumnSum(n, width, delta_, &db));
      PS_RETURN_IF_ERROR(Reserve(&prev_delta_, n * in));
      PS_RETURN_IF_ERROR(backend_->Gemm(false, true, n, in, width, 1.0f, delta_,
                                        params_[TopWeight(l)], 0.0f,
                                        &prev_delta_));
      PS_RETURN_IF_ERROR(backend_->ActivationBackward(
          act_, n * in, top_z_[l - 1], top_a_[l - 1], &prev_delta_));
      std::swap(delta_, prev_delta_);
    }
    // The first top layer, over [bottom output | embeddings].
    const int64_t b_width = bottom_widths_.back(), e_width = columns_ * dim_;
    const int64_t h = top_widths_[1];
    {
      const int w0 = TopWeight(0);
      DeviceBuffer dw_b = out->View(offsets_[w0], b_width * h);
      DeviceBuffer dw_e = out->View(offsets_[w0] + b_width * h, e_width * h);
      DeviceBuffer db = out->View(offsets_[w0 + 1], h);
      PS_RETURN_IF_ERROR(backend_->Gemm(true, false, b_width, h, n, 1.0f,
                                        BottomOutput(), delta_, 0.0f, &dw_b));
      PS_RETURN_IF_ERROR(backend_->Gemm(true, false, e_width, h, n, 1.0f, emb_,
                                        delta_, 0.0f, &dw_e));
      PS_RETURN_IF_ERROR(backend_->ColumnSum(n, h, delta_, &db));
      DeviceBuffer w_e = params_[w0].View(b_width * h, e_width * h);
      PS_RETURN_IF_ERROR(Reserve(&d_emb_, n * e_width));
      PS_RETURN_IF_ERROR(backend_->Gemm(false, true, n, e_width, h, 1.0f,
                                        delta_, w_e, 0.0f, &d_emb_));
      if (bottom_layers_ > 0) {
        DeviceBuffer w_b = params_[w0].View(0, b_width * h);
        PS_RETURN_IF_ERROR(Reserve(&prev_delta_, n * b_width));
        PS_RETURN_IF_ERROR(backend_->Gemm(false, true, n, b_width, h, 1.0f,
                                          delta_, w_b, 0.0f, &prev_delta_));
        std::swap(delta_, prev_delta_);
      }
    }
    // Bottom MLP: delta_ holds d(loss)/d(bottom output).
    for (int l = bottom_layers_ - 1; l >= 0; --l) {
      const int64_t in = bottom_widths_[l], width = bottom_widths_[l + 1];
      PS_RETURN_IF_ERROR(backend_->ActivationBackward(
          act_, n * width, bottom_z_[l], bottom_a_[l], &delta_));
      DeviceBuffer dw = out->View(offsets_[BottomWeight(l)], in * width);
      DeviceBuffer db = out->View(offsets_[BottomWeight(l) + 1], width);
      PS_RETURN_IF_ERROR(backend_->Gemm(true, false, in, width, n, 1.0f,
                                        BottomInput(l), delta_, 0.0f, &dw));
      PS_RETURN_IF_ERROR(backend_->ColumnSum(n, width, delta_, &db));
      if (l == 0) break;
      PS_RETURN_IF_ERROR(Reserve(&prev_delta_, n * in));
      PS_RETURN_IF_ERROR(backend_->Gemm(false, true, n, in, width, 1.0f, delta_,
                                        params_[BottomWeight(l)], 0.0f,
                                        &prev_delta_));
      std::swap(delta_, prev_delta_);
    }
    if (accumulate) PS_RETURN_IF_ERROR(backend_->Add(total_, micro_, &grad_));

    // The embedding rows' gradient: a gather over the inverse index on the
    // backend, then the u rows come out.
    const int64_t u = batch_ids_.size();
    PS_RETURN_IF_ERROR(Reserve(&d_rows_, u * dim_));
    PS_RETURN_IF_ERROR(
        backend_->EmbeddingBagBackward(n * columns_, hashes_, dim_, pooling_,
                                       d_emb_, starts_, entries_, u, &d_rows_));
    SparseRows micro;
    micro.ids = batch_ids_;
    micro.values.resize(u * dim_);
    PS_RETURN_IF_ERROR(
        backend_->CopyToHost(d_rows_, u * dim_, micro.values.data()));
    if (accumulate && has_row_gradient_) {
      row_grad_ = MergeRows(row_grad_, micro);
    } else {
      row_grad_ = std::move(micro);
    }
    has_row_gradient_ = true;
    PS_ASSIGN_OR_RETURN(const double loss_sum, backend_->Sum(n, losses_));
    return loss_sum / n;
  }

  absl::StatusOr<EvalResult> EvaluateResident(const Batch& batch) override {
    PS_RETURN_IF_ERROR(CheckBatch(batch));
    if (!params_.has()) return NoParams();
    EvalResult r;
    r.total = batch.n;
    if (batch.n == 0) return r;
    PS_RETURN_IF_ERROR(Prepare(batch, /*backward=*/false));
    PS_RETURN_IF_ERROR(Forward(batch.n));
    PS_RETURN_IF_ERROR(Head(batch.n, 0.0f, nullptr));
    PS_ASSIGN_OR_RETURN(r.loss_sum, backend_->Sum(batch.n, losses_));
    const int64_t out = num_outputs();
    logits_.resize(batch.n * out);
    PS_RETURN_IF_ERROR(
        backend_->CopyToHost(top_z_.back(), logits_.size(), logits_.data()));
    r.correct = CountCorrect(logits_, out, batch.y);
    return r;
  }

  DeviceBuffer* gradient() override {
    return grad_.size() == 0 ? nullptr : &grad_;
  }

 private:
  int BottomWeight(int l) const { return 1 + 2 * l; }
  int TopWeight(int l) const { return 1 + 2 * bottom_layers_ + 2 * l; }
  int64_t num_outputs() const { return top_widths_.back(); }
  const DeviceBuffer& BottomInput(int l) const {
    return l == 0 ? x_ : bottom_a_[l - 1];
  }
  const DeviceBuffer& BottomOutput() const {
    return bottom_layers_ == 0 ? x_ : bottom_a_.back();
  }

  static absl::Status NoParams() {
    return absl::FailedPreconditionError("the model has no parameters yet");
  }

  absl::Status CheckTable(int tensor) const {
    if (tensor == kTable) return absl::OkStatus();
    if (tensor < 0 || tensor >= static_cast<int>(specs_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no parameter tensor ",
                                                     tensor, " (the model has ",
                                                     specs_.size(), ")"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter '", specs_[tensor].name(), "' is not row-sparse"));
  }

  // Sizes, categorical columns, class ids in [0, classes), and the index
  // limit of the embedding bags.
  absl::Status CheckBatch(const Batch& batch) const {
    const int64_t dim = bottom_widths_[0];
    if (batch.n < 0 || batch.dim != dim || batch.num_cat != columns_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch has n=", batch.n, ", ", batch.dim, " numeric and ",
          batch.num_cat, " categorical columns; the model expects ", dim,
          " and ", columns_));
    }
    if (batch.x.size() != static_cast<uint64_t>(batch.n) * dim ||
        batch.y.size() != static_cast<uint64_t>(batch.n) ||
        batch.cat.size() != static_cast<uint64_t>(batch.n) * columns_) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch of ", batch.n, " examples has ", batch.x.size(),
                       " numeric values, ", batch.cat.size(),
                       " categorical values and ", batch.y.size(), " labels"));
    }
    if (batch.n > kMaxEmbeddingEntries / (columns_ * hashes_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch of ", batch.n, " examples x ", columns_,
                       " columns x ", hashes_, " hashes exceeds ",
                       kMaxEmbeddingEntries, " embedding lookups"));
    }
    const int64_t classes = num_outputs();
    for (int64_t i = 0; i < batch.n; ++i) {
      const float y = batch.y[i];
      if (!(y >= 0 && y < classes && y == std::floor(y))) {
        return absl::InvalidArgumentError(
            absl::StrCat("label ", y, " of example ", i, " is invalid (",
                         classes, " classes)"));
      }
    }
    return absl::OkStatus();
  }

  // The table row of every lookup p = (i * columns + c) * hashes + t.
  std::vector<int64_t> HashBatch(const Batch& batch) const {
    std::vector<int64_t> rows(batch.n * columns_ * hashes_);
    for (int64_t i = 0; i < batch.n; ++i) {
      for (int64_t c = 0; c < columns_; ++c) {
        const uint64_t value = batch.cat[i * columns_ + c];
        for (int64_t t = 0; t < hashes_; ++t) {
          rows[(i * columns_ + c) * hashes_ + t] =
              HashedRow(value, c, t, buckets_);
        }
      }
    }
    return rows;
  }

  // Host side of a batch: the batch's unique rows (batch_ids_), each
  // lookup's index into them, the inverse (rows -> lookups, for the
  // backward), and the rows themselves from the resident rows_; then
  // uploads them with the numeric features and labels.
  absl::Status Prepare(const Batch& batch, bool backward) {
    const std::vector<int64_t> rows = HashBatch(batch);
    batch_ids_ = rows;
    std::sort(batch_ids_.begin(), batch_ids_.end());
    batch_ids_.erase(std::unique(batch_ids_.begin(), batch_ids_.end()),
                     batch_ids_.end());
    const int64_t u = batch_ids_.size(), lookups = rows.size();
    host_rows_.resize(u * dim_);
    for (int64_t k = 0; k < u; ++k) {
      const auto it =
          std::lower_bound(rows_.ids.begin(), rows_.ids.end(), batch_ids_[k]);
      if (it == rows_.ids.end() || *it != batch_ids_[k]) {
        return absl::FailedPreconditionError(absl::StrCat(
            "row ", batch_ids_[k], " of '", specs_[kTable].name(),
            "' is read by the batch but was not set (SetRows with RowIds' "
            "rows)"));
      }
      const float* src = &rows_.values[(it - rows_.ids.begin()) * dim_];
      std::copy(src, src + dim_, &host_rows_[k * dim_]);
    }
    host_index_.resize(lookups);
    std::vector<int64_t> local(lookups);
    for (int64_t p = 0; p < lookups; ++p) {
      local[p] =
          std::lower_bound(batch_ids_.begin(), batch_ids_.end(), rows[p]) -
          batch_ids_.begin();
      host_index_[p] = static_cast<float>(local[p]);
    }
    PS_RETURN_IF_ERROR(Upload(host_index_, &index_));
    PS_RETURN_IF_ERROR(Upload(host_rows_, &rows_device_));
    PS_RETURN_IF_ERROR(Upload(batch.x, &x_));
    PS_RETURN_IF_ERROR(Upload(batch.y, &labels_));
    if (!backward) return absl::OkStatus();
    // Counting sort of the lookups by row: positions ascending per row.
    std::vector<int64_t> starts(u + 1, 0);
    for (int64_t p = 0; p < lookups; ++p) ++starts[local[p] + 1];
    for (int64_t k = 0; k < u; ++k) starts[k + 1] += starts[k];
    host_starts_.assign(starts.begin(), starts.end());
    host_entries_.resize(lookups);
    for (int64_t p = 0; p < lookups; ++p) {
      host_entries_[starts[local[p]]++] = static_cast<float>(p);
    }
    PS_RETURN_IF_ERROR(Upload(host_starts_, &starts_));
    return Upload(host_entries_, &entries_);
  }

  // Bottom MLP, embedding bags, top MLP (top_z_.back() = logits) from the
  // uploaded batch.
  absl::Status Forward(int64_t n) {
    for (int l = 0; l < bottom_layers_; ++l) {
      const int64_t in = bottom_widths_[l], width = bottom_widths_[l + 1];
      PS_RETURN_IF_ERROR(Reserve(&bottom_z_[l], n * width));
      PS_RETURN_IF_ERROR(Reserve(&bottom_a_[l], n * width));
      PS_RETURN_IF_ERROR(
          backend_->Gemm(false, false, n, width, in, 1.0f, BottomInput(l),
                         params_[BottomWeight(l)], 0.0f, &bottom_z_[l]));
      PS_RETURN_IF_ERROR(backend_->BiasAdd(
          n, width, params_[BottomWeight(l) + 1], &bottom_z_[l]));
      PS_RETURN_IF_ERROR(backend_->ActivationForward(
          act_, n * width, bottom_z_[l], &bottom_a_[l]));
    }
    const int64_t e_width = columns_ * dim_, b_width = bottom_widths_.back();
    PS_RETURN_IF_ERROR(Reserve(&emb_, n * e_width));
    PS_RETURN_IF_ERROR(backend_->EmbeddingBagForward(
        n * columns_, hashes_, dim_, pooling_, index_, rows_device_,
        static_cast<int64_t>(batch_ids_.size()), &emb_));
    for (int l = 0; l < top_layers_; ++l) {
      const int64_t in = top_widths_[l], width = top_widths_[l + 1];
      PS_RETURN_IF_ERROR(Reserve(&top_z_[l], n * width));
      if (l == 0) {
        DeviceBuffer w_b = params_[TopWeight(0)].View(0, b_width * width);
        DeviceBuffer w_e =
            params_[TopWeight(0)].View(b_width * width, e_width * width);
        PS_RETURN_IF_ERROR(backend_->Gemm(false, false, n, width, b_width, 1.0f,
                                          BottomOutput(), w_b, 0.0f,
                                          &top_z_[0]));
        PS_RETURN_IF_ERROR(backend_->Gemm(false, false, n, width, e_width, 1.0f,
                                          emb_, w_e, 1.0f, &top_z_[0]));
      } else {
        PS_RETURN_IF_ERROR(backend_->Gemm(false, false, n, width, in, 1.0f,
                                          top_a_[l - 1], params_[TopWeight(l)],
                                          0.0f, &top_z_[l]));
      }
      PS_RETURN_IF_ERROR(
          backend_->BiasAdd(n, width, params_[TopWeight(l) + 1], &top_z_[l]));
      if (l + 1 < top_layers_) {
        PS_RETURN_IF_ERROR(Reserve(&top_a_[l], n * width));
        PS_RETURN_IF_ERROR(backend_->ActivationForward(act_, n * width,
                                                       top_z_[l], &top_a_[l]));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Head(int64_t n, float grad_scale, DeviceBuffer* grad) {
    PS_RETURN_IF_ERROR(Reserve(&losses_, n));
    return backend_->SoftmaxCrossEntropy(n, num_outputs(), top_z_.back(),
                                         labels_, grad_scale, &losses_, grad);
  }

  // The union of two row sets, rows in both summed.
  SparseRows MergeRows(const SparseRows& a, const SparseRows& b) const {
    SparseRows out;
    size_t i = 0, j = 0;
    auto append = [&](int64_t id, const float* row) {
      out.ids.push_back(id);
      out.values.insert(out.values.end(), row, row + dim_);
    };
    while (i < a.ids.size() || j < b.ids.size()) {
      if (j == b.ids.size() || (i < a.ids.size() && a.ids[i] < b.ids[j])) {
        append(a.ids[i], &a.values[i * dim_]);
        ++i;
      } else if (i == a.ids.size() || b.ids[j] < a.ids[i]) {
        append(b.ids[j], &b.values[j * dim_]);
        ++j;
      } else {
        append(a.ids[i], &a.values[i * dim_]);
        float* sum = &out.values[out.values.size() - dim_];
        for (int64_t k = 0; k < dim_; ++k) sum[k] += b.values[j * dim_ + k];
        ++i;
        ++j;
      }
    }
    return out;
  }

  ResidentParams& resident_params() override { return params_; }

  absl::Status Reserve(DeviceBuffer* buffer, int64_t n) {
    return ReserveBuffer(backend_, n, buffer);
  }

  absl::Status Upload(const std::vector<float>& host, DeviceBuffer* buffer) {
    PS_RETURN_IF_ERROR(Reserve(buffer, host.size()));
    return backend_->CopyToDevice(host.data(), host.size(), buffer);
  }

  // Declared first so that it is destroyed after the buffers below.
  const std::unique_ptr<ComputeBackend> owned_backend_;  // may be null
  ComputeBackend* const backend_;
  const std::vector<TensorSpec> specs_;
  const Activation act_;
  const Pooling pooling_;
  const int64_t columns_, hashes_, dim_, buckets_;
  const int bottom_layers_, top_layers_;
  std::vector<int64_t> bottom_widths_;  // input_dim, bottom_hidden...
  std::vector<int64_t> top_widths_;     // B + C*dim, hidden..., classes
  std::vector<int64_t> offsets_;        // of each tensor in the flat gradient
  int64_t total_ = 0;                   // floats in the dense tensors
  bool has_row_gradient_ = false;
  // Host: the resident rows of the table, the row gradient, and the current
  // batch's unique rows, index, inverse and rows.
  SparseRows rows_, row_grad_;
  std::vector<int64_t> batch_ids_;
  std::vector<float> host_index_, host_starts_, host_entries_, host_rows_;
  std::vector<float> logits_;
  // On the backend, reused across calls (params_[0], the table, stays
  // empty; the others may view the caller's memory, ShareParams).
  ResidentParams params_;
  std::vector<DeviceBuffer> bottom_z_, bottom_a_, top_z_, top_a_;
  DeviceBuffer grad_, micro_, x_, labels_, index_, starts_, entries_,
      rows_device_, emb_, d_emb_, d_rows_, delta_, prev_delta_, losses_;
};

}  // namespace

int64_t HashedRow(uint64_t value, int64_t column, int64_t hash,
                  int64_t buckets) {
  const uint64_t key =
      Mix(Mix(static_cast<uint64_t>(column) * 0x100000001b3ULL +
              static_cast<uint64_t>(hash) + 1) ^
          value);
  return static_cast<int64_t>(key % static_cast<uint64_t>(buckets));
}

std::unique_ptr<Model> CreateWideDeepModel(
    const ModelConfig& config, std::vector<TensorSpec> specs,
    ComputeBackend* backend, std::unique_ptr<ComputeBackend> owned) {
  return std::unique_ptr<Model>(
      new WideDeepModel(config, std::move(specs), backend, std::move(owned)));
}

}  // namespace pstrain
