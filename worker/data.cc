#include "worker/data.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_spec.h"

namespace pstrain {
namespace {

using pstrain::v1::InitRule;
using pstrain::v1::TensorSpec;

constexpr int64_t kTeacherHidden = 16;
constexpr float kNonlinearWeight = 0.5f;  // of the tanh part of the teacher
constexpr uint64_t kMaxBatchElements = uint64_t{1} << 28;

// A counter-based random stream: element i is a pure function of
// (seed, name, i), the same generator that initialises parameters.
TensorSpec Stream(const std::string& name, InitRule::Kind kind, uint64_t seed) {
  TensorSpec spec;
  spec.set_name(name);
  spec.mutable_init()->set_kind(kind);
  spec.mutable_init()->set_scale(1.0f);
  spec.mutable_init()->set_seed(seed);
  return spec;
}

std::vector<float> Draw(const std::string& name, uint64_t seed, int64_t size,
                        float scale) {
  std::vector<float> v(size);
  InitialValues(Stream(name, InitRule::NORMAL, seed), 0, size, v.data());
  for (float& x : v) x *= scale;
  return v;
}

absl::Status CheckCount(int64_t n, int64_t dim) {
  if (n < 0 || static_cast<uint64_t>(n) * std::max<int64_t>(dim, 1) >
                   kMaxBatchElements) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", n, " examples of ", dim,
                     " features is negative or too large"));
  }
  return absl::OkStatus();
}

// [begin, end) of the test ids that `rank` of `world` evaluates.
absl::StatusOr<std::pair<int64_t, int64_t>> TestRange(int64_t examples,
                                                      int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad test slice: rank ", rank, " of ", world));
  }
  return std::make_pair(examples * rank / world, examples * (rank + 1) / world);
}

// The "scalar" model's data: featureless examples cycling through targets.
class TargetsSource : public DataSource {
 public:
  explicit TargetsSource(const DataConfig& config) : config_(config) {}

  int64_t num_features() const override { return 0; }
  int64_t num_classes() const override { return 1; }

  absl::StatusOr<Batch> TrainBatch(uint64_t first_id, int64_t n) override {
    if (absl::Status s = CheckCount(n, 0); !s.ok()) return s;
    Batch batch;
    batch.n = n;
    for (int64_t i = 0; i < n; ++i) {
      batch.y.push_back(
          config_.targets[(first_id + i) % config_.targets.size()]);
    }
    return batch;
  }

  absl::StatusOr<Batch> TestSlice(int rank, int world) override {
    auto range = TestRange(config_.test_examples, rank, world);
    if (!range.ok()) return range.status();
    return TrainBatch(range->first, range->second - range->first);
  }

 private:
  const DataConfig config_;
};

class SyntheticSource : public DataSource {
 public:
  explicit SyntheticSource(const DataConfig& config)
      : config_(config),
        dim_(config.num_features),
        outputs_(config.num_classes),
        train_(MakeStreams("train", config.seed)),
        test_(MakeStreams("test", config.seed)) {
    const uint64_t seed = config.seed;
    linear_ = Draw("teacher/linear", seed, dim_ * outputs_, 1.0f);
    // Unit-norm columns: every class's logit has the same spread, so the
    // argmax labels are balanced.
    for (int64_t j = 0; j < outputs_; ++j) {
      double norm = 0;
      for (int64_t k = 0; k < dim_; ++k) {
        norm += linear_[k * outputs_ + j] * linear_[k * outputs_ + j];
      }
      for (int64_t k = 0; k < dim_; ++k) {
        linear_[k * outputs_ + j] /= std::sqrt(norm);
      }
    }
    hidden_ = Draw("teacher/hidden", seed, dim_ * kTeacherHidden,
                   1.0f / std::sqrt(static_cast<float>(dim_)));
    head_ = Draw("teacher/head", seed, kTeacherHidden * outputs_,
                 kNonlinearWeight / std::sqrt(float{kTeacherHidden}));
  }

  int64_t num_features() const override { return dim_; }
  int64_t num_classes() const override { return outputs_; }

  absl::StatusOr<Batch> TrainBatch(uint64_t first_id, int64_t n) override {
    return Generate(train_, first_id, n);
  }

  absl::StatusOr<Batch> TestSlice(int rank, int world) override {
    auto range = TestRange(config_.test_examples, rank, world);
    if (!range.ok()) return range.status();
    return Generate(test_, range->first, range->second - range->first);
  }

 private:
  struct Streams {
    TensorSpec x;      // NORMAL, element id * dim + k
    TensorSpec flip;   // UNIFORM, element id: label replaced when < noise
    TensorSpec label;  // UNIFORM, element id: the replacement label
    TensorSpec noise;  // NORMAL, element id: regression noise
  };

  static Streams MakeStreams(const std::string& split, uint64_t seed) {
    const std::string p = "data/" + split + "/";
    return {Stream(p + "x", InitRule::NORMAL, seed),
            Stream(p + "flip", InitRule::UNIFORM, seed),
            Stream(p + "label", InitRule::UNIFORM, seed),
            Stream(p + "noise", InitRule::NORMAL, seed)};
  }

  absl::StatusOr<Batch> Generate(const Streams& s, uint64_t first_id,
                                 int64_t n) const {
    if (absl::Status st = CheckCount(n, dim_); !st.ok()) return st;
    Batch batch;
    batch.n = n;
    batch.dim = dim_;
    batch.x.resize(n * dim_);
    batch.y.resize(n);
    std::vector<float> logits(outputs_), h(kTeacherHidden);
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t id = first_id + i;
      float* x = &batch.x[i * dim_];
      InitialValues(s.x, id * dim_, dim_, x);
      // logits = x linear + tanh(x hidden) head
      std::fill(logits.begin(), logits.end(), 0.0f);
      std::fill(h.begin(), h.end(), 0.0f);
      for (int64_t k = 0; k < dim_; ++k) {
        for (int64_t j = 0; j < outputs_; ++j) {
          logits[j] += x[k] * linear_[k * outputs_ + j];
        }
        for (int64_t j = 0; j < kTeacherHidden; ++j) {
          h[j] += x[k] * hidden_[k * kTeacherHidden + j];
        }
      }
      for (int64_t k = 0; k < kTeacherHidden; ++k) {
        const float t = std::tanh(h[k]);
        for (int64_t j = 0; j < outputs_; ++j) {
          logits[j] += t * head_[k * outputs_ + j];
        }
      }
      if (outputs_ == 1) {
        batch.y[i] = logits[0] + config_.noise * InitialValue(s.noise, id);
        continue;
      }
      int64_t label =
          std::max_element(logits.begin(), logits.end()) - logits.begin();
      if (Unit(s.flip, id) < config_.noise) {
        label = std::min<int64_t>(Unit(s.label, id) * outputs_, outputs_ - 1);
      }
      batch.y[i] = static_cast<float>(label);
    }
    return batch;
  }

  // Uniform in [0, 1] from a UNIFORM(-1, 1) stream.
  static double Unit(const TensorSpec& stream, uint64_t id) {
    return (InitialValue(stream, id) + 1.0) / 2;
  }

  const DataConfig config_;
  const int64_t dim_, outputs_;
  const Streams train_, test_;
  // Teacher: linear_ [dim, outputs] + tanh(x hidden_ [dim, H]) head_ [H,
  // outputs].
  std::vector<float> linear_, hidden_, head_;
};

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataSource>> DataSource::Create(
    const DataConfig& config) {
  if (config.source != "synthetic") {
    return Invalid("data.source",
                   absl::StrCat("unknown source '", config.source,
                                "' (expected synthetic)"));
  }
  if (config.test_examples < 0) {
    return Invalid("data.test_examples",
                   absl::StrCat("must be >= 0, got ", config.test_examples));
  }
  if (!config.targets.empty()) {
    for (float t : config.targets) {
      if (!std::isfinite(t)) return Invalid("data.targets", "must be finite");
    }
    return std::unique_ptr<DataSource>(new TargetsSource(config));
  }
  if (config.num_features <= 0) {
    return Invalid("data.num_features",
                   absl::StrCat("must be > 0, got ", config.num_features));
  }
  if (config.num_classes <= 0) {
    return Invalid("data.num_classes",
                   absl::StrCat("must be > 0, got ", config.num_classes));
  }
  if (!(config.noise >= 0) || (config.num_classes >= 2 && config.noise > 1)) {
    return Invalid("data.noise",
                   absl::StrCat("must be >= 0 (and <= 1 for classes), got ",
                                config.noise));
  }
  return std::unique_ptr<DataSource>(new SyntheticSource(config));
}

uint64_t FirstExampleId(uint64_t step, int rank, int world,
                        int64_t local_batch) {
  const uint64_t b = local_batch;
  return step * world * b + rank * b;
}

}  // namespace pstrain
