// Models the workers train: loss, gradient and evaluation of a batch given the
// parameter tensors (as pulled from the servers, in the order of params()).
#ifndef PSTRAIN_WORKER_MODEL_MODEL_H_
#define PSTRAIN_WORKER_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/job_config.h"
#include "proto/pstrain.pb.h"
#include "worker/compute/compute_backend.h"

namespace pstrain {

// A categorical value that is missing (an empty Criteo field). It is hashed
// like any other value, so each column's "missing" has its own rows.
inline constexpr uint64_t kMissingCategory = ~uint64_t{0};

// A batch of examples.
struct Batch {
  int64_t n = 0;         // examples
  int64_t dim = 0;       // features per example
  std::vector<float> x;  // n * dim, row-major
  // n labels: a class id (as float) when the model's output has >= 2 units,
  // otherwise the regression target.
  std::vector<float> y;
  // Categorical columns per example (model.type wide_deep; 0 otherwise) and
  // their raw values, n * num_cat, row-major: a category id, or a Criteo
  // field's 32-bit hash, or kMissingCategory. The model hashes them into
  // its embedding table.
  int64_t num_cat = 0;
  std::vector<uint64_t> cat;
};

// Some rows of a row-sparse tensor (TensorSpec.row_sparse, shape [rows,
// dim]): `ids` sorted ascending and unique, `values` their rows, ids.size()
// x dim, row-major.
struct SparseRows {
  std::vector<int64_t> ids;
  std::vector<float> values;
};

// Read-only views of parameter tensors (flat fp32, in the order of params()),
// e.g. slices of one pinned HostBuffer. The same type as ps_client.h's.
using TensorViews = std::vector<absl::Span<const float>>;

struct EvalResult {
  double loss_sum = 0;  // sum of per-example losses
  int64_t correct = 0;  // argmax == label; 0 for regressors
  int64_t total = 0;    // examples evaluated
};

// Thread-compatible: one instance per thread (instances keep scratch buffers
// on their backend); models sharing a backend must not run concurrently.
//
// Training is device-resident: the model keeps one copy of the parameters
// and one flat gradient on its backend between calls (SetParams,
// ComputeGradient, gradient()), so a step moves only what must cross: the
// parameters in once (SetParams), the batch in, and whatever the caller
// copies out of gradient() (one CopyToHost into a pinned buffer for a
// parameter-server push; nothing for an all-reduce on the device). The host
// wrappers LossAndGradient and Evaluate (tests, benchmarks) are built on the
// same calls. Parameters and gradients are flat fp32 tensors in the order of
// params().
class Model {
 public:
  // Models and per-example losses:
  //   scalar:  (w - y)^2, features ignored (any dim, including 0).
  //   linear:  x W + b, 0.5 * sum over outputs of (pred - target)^2.
  //   softmax: x W + b, softmax cross-entropy.
  //   mlp:     hidden layers with relu | tanh | gelu (tanh approximation),
  //            then a softmax cross-entropy head (classifier) or the linear
  //            0.5 * squared-error head (regressor).
  //   wide_deep: hashed embeddings of the categorical columns and a bottom
  //            MLP over the numeric ones, into a top MLP with a softmax
  //            cross-entropy head (worker/model/wide_deep_model.h); its
  //            embedding table is row-sparse (RowIds, SetRows,
  //            row_gradient below).
  // A squared-error head with num_classes >= 2 regresses onto the one-hot
  // encoding of the class id (and counts argmax accuracy). Invalid configs
  // are INVALID_ARGUMENT (see ModelParamSpecs).
  //
  // The model computes through `backend`, which it does not own and which
  // must outlive it (the scalar model computes its loss on the host and
  // keeps only its gradient on the backend).
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const ModelConfig& config, ComputeBackend* backend);
  // Same, on a CPU backend that the model owns.
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const ModelConfig& config);
  virtual ~Model() = default;

  virtual const std::vector<pstrain::v1::TensorSpec>& params() const = 0;
  // True when labels are class ids (num_classes >= 2): Evaluate counts
  // correct predictions.
  virtual bool is_classifier() const = 0;
  // The backend the model computes on (and holds gradient() in).
  virtual ComputeBackend* backend() const = 0;
  // Floats in all parameter tensors together.
  int64_t num_params() const;
  // Floats in the tensors that are not row-sparse: what gradient() holds.
  int64_t num_dense_params() const;

  // Makes `params` the resident parameters. Wrong parameter count or sizes
  // are INVALID_ARGUMENT (and keep the old ones). Dense models upload each
  // tensor once (one CopyToDevice per tensor; from a HostBuffer without
  // staging); nothing else crosses. A row-sparse tensor's view must be empty:
  // its rows come through SetRows.
  virtual absl::Status SetParams(const TensorViews& params) = 0;
  absl::Status SetParams(const std::vector<std::vector<float>>& params);

  // Like SetParams, but where the backend's memory is the host's
  // (ComputeBackend::host_memory: the CPU backend) the dense tensors stay
  // where they are and the model computes on them there, with no copy. The
  // caller keeps that memory alive and unchanged until the next SetParams,
  // ShareParams or ReleaseSharedParams. On other backends, and in models
  // without their own (the default), it is SetParams.
  virtual absl::Status ShareParams(const TensorViews& params) {
    return SetParams(params);
  }
  // Forgets parameters ShareParams left in the caller's memory: the model
  // then has none (FAILED_PRECONDITION) until the next SetParams or
  // ShareParams. Parameters the model holds a copy of are kept. For a caller
  // about to free or reuse that memory.
  virtual void ReleaseSharedParams() {}

  // Gradient of the mean loss over `batch` (n >= 1) at the resident
  // parameters into gradient(): it replaces the gradient, or with
  // `accumulate` is added to it (ComputeBackend::Add). Returns the mean
  // loss. A batch whose dim or sizes do not match, or labels out of range,
  // are INVALID_ARGUMENT; FAILED_PRECONDITION before SetParams.
  virtual absl::StatusOr<double> ComputeGradient(const Batch& batch,
                                                 bool accumulate) = 0;

  // Sum of per-example losses and correct count at the resident parameters
  // (n may be 0). Same checks.
  virtual absl::StatusOr<EvalResult> EvaluateResident(const Batch& batch) = 0;

  // The resident gradient on backend(): num_dense_params() + 1 floats, the
  // tensors of params() back to back (row-sparse ones take no space: see
  // row_gradient), then one spare float that the model
  // never reads or writes (the all-reduce puts its sample count there, so
  // that one collective carries both). Holds the last ComputeGradient's
  // result; the caller may change it in place (scale it, all-reduce it).
  // Null before the first ComputeGradient.
  virtual DeviceBuffer* gradient() = 0;

  // Row-sparse tensors (TensorSpec.row_sparse: an embedding table [rows,
  // dim] that may have 10^7..10^8 rows) are never held whole, on the backend
  // or the host. A step asks which rows its batch reads, gets them (pulled,
  // or from a local table), sets them, computes, and reads back the
  // gradient of those rows only:
  //   ids = RowIds(t, batch); SetRows(t, {ids, rows}); ComputeGradient(batch);
  //   row_gradient(t) -> {ids touched, their gradient rows}
  // The base class has no row-sparse tensors: RowIds and SetRows are
  // INVALID_ARGUMENT and row_gradient is null.
  //
  // The sorted unique rows of params()[tensor] that `batch` reads.
  // INVALID_ARGUMENT for a tensor that is not row-sparse and for a batch the
  // model rejects (as ComputeGradient would).
  virtual absl::StatusOr<std::vector<int64_t>> RowIds(int tensor,
                                                      const Batch& batch) const;
  // Makes `rows` the resident rows of params()[tensor], replacing earlier
  // ones; batches of later ComputeGradient / EvaluateResident calls may read
  // only these (FAILED_PRECONDITION naming a missing row). INVALID_ARGUMENT
  // (keeping the old rows) for ids unsorted, repeated or outside [0, rows),
  // values of the wrong size, or a tensor that is not row-sparse. The rows
  // stay on the host; each batch uploads the rows it reads (u x dim floats).
  virtual absl::Status SetRows(int tensor, SparseRows rows);
  // The gradient of row-sparse params()[tensor] from the last
  // ComputeGradient, row-sparse and on the host: the unique rows its batch
  // touched, ascending, each with its gradient row summed over every use in
  // the batch (with `accumulate`, the union over the micro-batches, a row in
  // several summed). Never a dense [rows, dim] buffer. Null before the first
  // ComputeGradient or for a tensor that is not row-sparse. The caller may
  // change it (scale it).
  virtual SparseRows* row_gradient(int tensor);

  // Host wrappers. LossAndGradient: SetParams, ComputeGradient, then one
  // CopyToHost per tensor into `grads` (resized to match params). Evaluate:
  // SetParams, then EvaluateResident. Both replace the resident parameters.
  absl::StatusOr<double> LossAndGradient(
      const std::vector<std::vector<float>>& params, const Batch& batch,
      std::vector<std::vector<float>>* grads);
  absl::StatusOr<EvalResult> Evaluate(
      const std::vector<std::vector<float>>& params, const Batch& batch);
};

// INVALID_ARGUMENT unless `params` has one view per spec, of the spec's size
// (empty for a row-sparse spec), naming the tensor.
absl::Status CheckParamViews(const std::vector<pstrain::v1::TensorSpec>& specs,
                             const TensorViews& params);

// Makes `buffer` hold at least `n` floats of `backend`: kept when it does,
// else freed first (a lower peak) and allocated anew, uninitialised.
absl::Status ReserveBuffer(ComputeBackend* backend, int64_t n,
                           DeviceBuffer* buffer);

// The dense parameters a model keeps resident, one buffer per tensor of its
// specs (a row-sparse tensor's stays empty): copied into buffers of the
// backend (SetParams), or, on a backend whose memory is the host's, views of
// the caller's memory (ShareParams). A model declares it after whatever owns
// its backend, so that the buffers go first.
class ResidentParams {
 public:
  // Checks `params` against `specs` (CheckParamViews: on an error nothing
  // changes), then makes them resident: with `share` on a backend whose
  // memory is the host's, views of them where they are; otherwise copies in
  // buffers of `backend`, each reused when it is large enough and is not a
  // view (a view is never copied into).
  absl::Status Set(ComputeBackend* backend,
                   const std::vector<pstrain::v1::TensorSpec>& specs,
                   const TensorViews& params, bool share);
  // Drops views of the caller's memory: nothing is resident until the next
  // Set. Copies stay.
  void ReleaseShared();

  // False before the first Set, after a failed one, and after ReleaseShared
  // of views.
  bool has() const { return has_; }
  DeviceBuffer& operator[](size_t t) { return buffers_[t]; }
  const DeviceBuffer& operator[](size_t t) const { return buffers_[t]; }

 private:
  std::vector<DeviceBuffer> buffers_;
  bool has_ = false;
  bool shared_ = false;  // buffers_ view the caller's memory
};

// A model whose dense parameters are a ResidentParams (resident_params()):
// SetParams copies them onto the backend, ShareParams views them where they
// are on the CPU backend.
class ResidentParamsModel : public Model {
 public:
  using Model::SetParams;
  absl::Status SetParams(const TensorViews& params) final {
    return resident_params().Set(backend(), this->params(), params, false);
  }
  absl::Status ShareParams(const TensorViews& params) final {
    return resident_params().Set(backend(), this->params(), params, true);
  }
  void ReleaseSharedParams() final { resident_params().ReleaseShared(); }

 protected:
  virtual ResidentParams& resident_params() = 0;
};

// Examples of `y` (class ids) whose row of `logits` (y.size() rows of `out`
// scores) has its largest score at the label: an evaluation's `correct`.
int64_t CountCorrect(absl::Span<const float> logits, int64_t out,
                     absl::Span<const float> y);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODEL_MODEL_H_
