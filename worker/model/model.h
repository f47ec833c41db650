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

// A batch of examples.
struct Batch {
  int64_t n = 0;         // examples
  int64_t dim = 0;       // features per example
  std::vector<float> x;  // n * dim, row-major
  // n labels: a class id (as float) when the model's output has >= 2 units,
  // otherwise the regression target.
  std::vector<float> y;
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

  // Makes `params` the resident parameters. Wrong parameter count or sizes
  // are INVALID_ARGUMENT (and keep the old ones). Dense models upload each
  // tensor once (one CopyToDevice per tensor; from a HostBuffer without
  // staging); nothing else crosses.
  virtual absl::Status SetParams(const TensorViews& params) = 0;
  absl::Status SetParams(const std::vector<std::vector<float>>& params);

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

  // The resident gradient on backend(): num_params() + 1 floats, the
  // tensors of params() back to back, then one spare float that the model
  // never reads or writes (the all-reduce puts its sample count there, so
  // that one collective carries both). Holds the last ComputeGradient's
  // result; the caller may change it in place (scale it, all-reduce it).
  // Null before the first ComputeGradient.
  virtual DeviceBuffer* gradient() = 0;

  // Host wrappers. LossAndGradient: SetParams, ComputeGradient, then one
  // CopyToHost per tensor into `grads` (resized to match params). Evaluate:
  // SetParams, then EvaluateResident. Both replace the resident parameters.
  absl::StatusOr<double> LossAndGradient(
      const std::vector<std::vector<float>>& params, const Batch& batch,
      std::vector<std::vector<float>>* grads);
  absl::StatusOr<EvalResult> Evaluate(
      const std::vector<std::vector<float>>& params, const Batch& batch);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODEL_MODEL_H_
