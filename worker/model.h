// Models the workers train: loss, gradient and evaluation of a batch given the
// parameter tensors (as pulled from the servers, in the order of params()).
#ifndef PSTRAIN_WORKER_MODEL_H_
#define PSTRAIN_WORKER_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "proto/pstrain.pb.h"
#include "worker/compute_backend.h"

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

struct EvalResult {
  double loss_sum = 0;  // sum of per-example losses
  int64_t correct = 0;  // argmax == label; 0 for regressors
  int64_t total = 0;    // examples evaluated
};

// Thread-compatible: one instance per thread (instances keep scratch buffers
// on their backend); models sharing a backend must not run concurrently.
// Parameters and gradients are flat fp32 host vectors in the order of
// params(); dense models copy them to the backend, compute there (every
// matrix product, activation and loss head) and copy the gradients back.
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
  // must outlive it (the scalar model computes on the host and ignores it).
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

  // Mean loss over the batch (n >= 1); `grads` is resized to match params and
  // receives the gradient of that mean loss. Wrong parameter count or sizes, a
  // batch whose dim or sizes do not match, or labels out of range are
  // INVALID_ARGUMENT.
  virtual absl::StatusOr<double> LossAndGradient(
      const std::vector<std::vector<float>>& params, const Batch& batch,
      std::vector<std::vector<float>>* grads) = 0;

  // Sum of per-example losses and correct count (n may be 0). Same checks.
  virtual absl::StatusOr<EvalResult> Evaluate(
      const std::vector<std::vector<float>>& params, const Batch& batch) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODEL_H_
