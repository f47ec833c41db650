#include "worker/data/data.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "worker/data/file_data.h"

namespace pstrain {
namespace {

using pstrain::v1::InitRule;
using pstrain::v1::TensorSpec;

constexpr int64_t kTeacherHidden = 16;
constexpr float kNonlinearWeight = 0.5f;  // of the tanh part of the teacher
constexpr uint64_t kMaxBatchElements = uint64_t{1} << 28;
// Sparse columns: the sd of each value's effect on each class logit (the
// numeric teacher's logits have sd about 1), and the rejection sampler's
// most attempts per draw (it accepts with probability > 0.9).
constexpr float kSparseEffect = 1.0f;
constexpr int64_t kZipfAttempts = 32;

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

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// The "scalar" model's data: featureless examples cycling through targets.
class TargetsSource : public DataSource {
 public:
  explicit TargetsSource(const DataConfig& config) : config_(config) {}

  int64_t num_features() const override { return 0; }
  int64_t num_classes() const override { return 1; }
  int64_t train_size() const override { return config_.targets().size(); }
  std::string Describe() const override {
    return absl::StrCat("targets: ", config_.targets().size(),
                        " featureless examples cycled by id; ",
                        config_.test_examples(), " test examples");
  }

  absl::StatusOr<Batch> TrainBatch(uint64_t first_id, int64_t n) override {
    if (absl::Status s = CheckCount(n, 0); !s.ok()) return s;
    Batch batch;
    batch.n = n;
    for (int64_t i = 0; i < n; ++i) {
      batch.y.push_back(
          config_.targets()[(first_id + i) % config_.targets().size()]);
    }
    return batch;
  }

  absl::StatusOr<Batch> TestSlice(int rank, int world) override {
    auto range = TestSliceRange(config_.test_examples(), rank, world);
    if (!range.ok()) return range.status();
    return TrainBatch(range->first, range->second - range->first);
  }

 private:
  const DataConfig config_;
};

// Where the raw columns of a synthetic table sit among the encoded slots
// (see data.h): [numeric | one-hot blocks | numeric indicators |
// categorical indicators].
struct Layout {
  int64_t width = 0;     // D, all slots
  int64_t numeric = 0;   // R numeric columns, slots [0, R)
  int64_t missable = 0;  // the first `missable` numeric columns may be missing
  int64_t categorical = 0, levels = 0;  // C columns of L one-hot slots
  bool indicators = false;              // missing_rate > 0

  int64_t onehot(int64_t c) const { return numeric + c * levels; }
  int64_t numeric_indicator(int64_t j) const {
    return numeric + categorical * levels + j;
  }
  int64_t categorical_indicator(int64_t c) const {
    return numeric + categorical * levels + missable + c;
  }
  // Raw columns that can be missing: missable numeric, then categorical.
  int64_t missing_columns() const {
    return indicators ? missable + categorical : 0;
  }
};

absl::StatusOr<Layout> MakeLayout(const DataConfig& config) {
  Layout l;
  l.width = config.num_features();
  l.categorical = config.num_categorical();
  l.levels = config.categories();
  l.indicators = config.missing_rate() > 0;
  if (l.categorical < 0) {
    return Invalid("data.num_categorical",
                   absl::StrCat("must be >= 0, got ", l.categorical));
  }
  if (l.categorical > 0 && l.levels < 2) {
    return Invalid("data.categories",
                   absl::StrCat("must be >= 2, got ", l.levels));
  }
  if (!(config.missing_rate() >= 0 && config.missing_rate() < 1)) {
    return Invalid("data.missing_rate", absl::StrCat("must be in [0, 1), got ",
                                                     config.missing_rate()));
  }
  const int64_t categorical_slots =
      l.categorical * (l.levels + (l.indicators ? 1 : 0));
  const int64_t rest = l.width - categorical_slots;
  if (rest < 0) {
    return Invalid(
        "data.num_features",
        absl::StrCat(l.width, " encoded features cannot hold ", l.categorical,
                     " categorical columns x ", l.levels, " levels",
                     l.indicators ? " + their missing indicators" : "",
                     " (needs >= ", categorical_slots, ")"));
  }
  l.missable = l.indicators ? rest / 2 : 0;
  l.numeric = rest - l.missable;
  return l;
}

class SyntheticSource : public DataSource {
 public:
  SyntheticSource(const DataConfig& config, const Layout& layout)
      : config_(config),
        layout_(layout),
        dim_(config.num_features()),
        outputs_(config.num_classes()),
        train_(MakeStreams("train", config.seed())),
        test_(MakeStreams("test", config.seed())),
        sparse_(config.sparse_columns()),
        cardinality_(config.sparse_cardinality()),
        zipf_(config.sparse_cardinality(), config.zipf_exponent()),
        effect_(Stream("teacher/sparse", InitRule::NORMAL, config.seed())) {
    const uint64_t seed = config.seed();
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
  int64_t train_size() const override { return 0; }

  std::string Describe() const override {
    const Layout& l = layout_;
    std::string encoding = absl::StrCat(l.numeric, " numeric");
    if (l.categorical > 0) {
      absl::StrAppend(&encoding, " + ", l.categorical, " categorical x ",
                      l.levels, " levels one-hot");
    }
    if (l.indicators) {
      absl::StrAppend(&encoding, " + ", l.missing_columns(),
                      " missing indicators (missing_rate ",
                      config_.missing_rate(), ")");
    }
    return absl::StrCat(
        "synthetic: seed ", config_.seed(), ", ", dim_, " encoded features (",
        encoding, "), ",
        outputs_ == 1 ? std::string("regression")
                      : absl::StrCat(outputs_, " classes"),
        " from a random teacher (linear + tanh",
        sparse_ > 0
            ? absl::StrCat(" + an effect per value of ", sparse_,
                           " sparse columns of ", cardinality_, " Zipf(",
                           config_.zipf_exponent(), ") values")
            : std::string(),
        "), noise ", config_.noise(), "; unlimited training examples by id, ",
        config_.test_examples(), " test examples from a separate stream");
  }

  absl::StatusOr<Batch> TrainBatch(uint64_t first_id, int64_t n) override {
    return Generate(train_, first_id, n);
  }

  absl::StatusOr<Batch> TestSlice(int rank, int world) override {
    auto range = TestSliceRange(config_.test_examples(), rank, world);
    if (!range.ok()) return range.status();
    return Generate(test_, range->first, range->second - range->first);
  }

 private:
  struct Streams {
    TensorSpec x;        // NORMAL, element id * dim + k: numeric column k
    TensorSpec level;    // UNIFORM, element id * C + c: category of column c
    TensorSpec missing;  // UNIFORM, element id * M + j: column j missing
    TensorSpec flip;     // UNIFORM, element id: label replaced when < noise
    TensorSpec label;    // UNIFORM, element id: the replacement label
    TensorSpec noise;    // NORMAL, element id: regression noise
    // UNIFORM, element (id * S + c) * kZipfAttempts + attempt: the Zipf
    // draw of sparse column c.
    TensorSpec sparse;
  };

  static Streams MakeStreams(const std::string& split, uint64_t seed) {
    const std::string p = "data/" + split + "/";
    return {Stream(p + "x", InitRule::NORMAL, seed),
            Stream(p + "level", InitRule::UNIFORM, seed),
            Stream(p + "missing", InitRule::UNIFORM, seed),
            Stream(p + "flip", InitRule::UNIFORM, seed),
            Stream(p + "label", InitRule::UNIFORM, seed),
            Stream(p + "noise", InitRule::NORMAL, seed),
            Stream(p + "sparse", InitRule::UNIFORM, seed)};
  }

  // Encoded features of example `id` into x[0, dim_).
  void Encode(const Streams& s, uint64_t id, float* x) const {
    const Layout& l = layout_;
    std::fill(x, x + dim_, 0.0f);
    InitialValues(s.x, id * dim_, l.numeric, x);
    const int64_t m = l.missing_columns();
    auto missing = [&](int64_t j) {
      return Unit(s.missing, id * m + j) < config_.missing_rate();
    };
    for (int64_t j = 0; j < l.missable; ++j) {
      if (missing(j)) {
        x[j] = 0.0f;
        x[l.numeric_indicator(j)] = 1.0f;
      }
    }
    for (int64_t c = 0; c < l.categorical; ++c) {
      if (l.indicators && missing(l.missable + c)) {
        x[l.categorical_indicator(c)] = 1.0f;
        continue;
      }
      const int64_t level = std::min<int64_t>(
          Unit(s.level, id * l.categorical + c) * l.levels, l.levels - 1);
      x[l.onehot(c) + level] = 1.0f;
    }
  }

  absl::StatusOr<Batch> Generate(const Streams& s, uint64_t first_id,
                                 int64_t n) const {
    if (absl::Status st = CheckCount(n, dim_); !st.ok()) return st;
    Batch batch;
    batch.n = n;
    batch.dim = dim_;
    batch.x.resize(n * dim_);
    batch.y.resize(n);
    batch.num_cat = sparse_;
    batch.cat.resize(n * sparse_);
    std::vector<float> logits(outputs_), h(kTeacherHidden);
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t id = first_id + i;
      float* x = &batch.x[i * dim_];
      Encode(s, id, x);
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
      for (int64_t c = 0; c < sparse_; ++c) {
        const uint64_t draw = (id * sparse_ + c) * kZipfAttempts;
        const int64_t rank = zipf_.Sample(
            [&](int attempt) { return Unit(s.sparse, draw + attempt); });
        batch.cat[i * sparse_ + c] = SparseValue(c, rank);
        const uint64_t at = (c * cardinality_ + rank) * outputs_;
        for (int64_t j = 0; j < outputs_; ++j) {
          logits[j] += kSparseEffect * InitialValue(effect_, at + j);
        }
      }
      if (outputs_ == 1) {
        batch.y[i] = logits[0] + config_.noise() * InitialValue(s.noise, id);
        continue;
      }
      int64_t label =
          std::max_element(logits.begin(), logits.end()) - logits.begin();
      if (Unit(s.flip, id) < config_.noise()) {
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

  // The raw id of rank `rank` of sparse column `column`: a bijective
  // scramble (distinct ranks, distinct ids), so ids carry no order.
  uint64_t SparseValue(int64_t column, int64_t rank) const {
    return Mix(Mix(config_.seed() ^ (0x5350415253450000ULL + column)) +
               static_cast<uint64_t>(rank));
  }
  static uint64_t Mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

  const DataConfig config_;
  const Layout layout_;
  const int64_t dim_, outputs_;
  const Streams train_, test_;
  // Teacher: linear_ [dim, outputs] + tanh(x hidden_ [dim, H]) head_ [H,
  // outputs].
  std::vector<float> linear_, hidden_, head_;
  // Sparse columns: count, values per column, the rank sampler, and the
  // teacher's effects (element (c * cardinality + rank) * outputs + j).
  const int64_t sparse_, cardinality_;
  const ZipfSampler zipf_;
  const TensorSpec effect_;
};

}  // namespace

ZipfSampler::ZipfSampler(int64_t n, double exponent) : n_(n), s_(exponent) {
  h_integral_x1_ = HIntegral(1.5) - 1;
  h_integral_n_ = HIntegral(n_ + 0.5);
  sv_ = 2 - HIntegralInverse(HIntegral(2.5) - H(2));
}

int64_t ZipfSampler::Sample(const std::function<double(int)>& uniform) const {
  int64_t k = 1;
  for (int attempt = 0; attempt < kZipfAttempts; ++attempt) {
    const double u =
        h_integral_n_ + uniform(attempt) * (h_integral_x1_ - h_integral_n_);
    const double x = HIntegralInverse(u);
    k = std::clamp<int64_t>(static_cast<int64_t>(x + 0.5), 1, n_);
    if (k - x <= sv_ || u >= HIntegral(k + 0.5) - H(k)) return k - 1;
  }
  return k - 1;  // after kZipfAttempts rejections (probability < 1e-30)
}

double ZipfSampler::H(double x) const { return std::exp(-s_ * std::log(x)); }

double ZipfSampler::HIntegral(double x) const {
  const double log_x = std::log(x);
  return Helper2((1 - s_) * log_x) * log_x;
}

double ZipfSampler::HIntegralInverse(double x) const {
  double t = x * (1 - s_);
  if (t < -1) t = -1;  // rounding near the lower end
  return std::exp(Helper1(t) * x);
}

double ZipfSampler::Helper1(double x) {
  return std::abs(x) > 1e-8 ? std::log1p(x) / x
                            : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

double ZipfSampler::Helper2(double x) {
  return std::abs(x) > 1e-8 ? std::expm1(x) / x
                            : 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x));
}

absl::StatusOr<std::unique_ptr<DataSource>> DataSource::Create(
    const DataConfig& config) {
  if (config.source() == DataConfig::DIGITS ||
      config.source() == DataConfig::BREAST_CANCER ||
      config.source() == DataConfig::CSV ||
      config.source() == DataConfig::LIBSVM ||
      config.source() == DataConfig::CRITEO) {
    return CreateFileSource(config);
  }
  if (config.source() != DataConfig::SYNTHETIC) {
    return Invalid("data.source",
                   absl::StrCat("unknown source '", ConfigName(config.source()),
                                "' (expected synthetic, digits, breast_cancer, "
                                "csv, libsvm or criteo)"));
  }
  if (config.test_examples() < 0) {
    return Invalid("data.test_examples",
                   absl::StrCat("must be >= 0, got ", config.test_examples()));
  }
  if (!config.targets().empty()) {
    for (float t : config.targets()) {
      if (!std::isfinite(t)) return Invalid("data.targets", "must be finite");
    }
    return std::unique_ptr<DataSource>(new TargetsSource(config));
  }
  if (config.num_features() <= 0) {
    return Invalid("data.num_features",
                   absl::StrCat("must be > 0, got ", config.num_features()));
  }
  if (config.num_classes() <= 0) {
    return Invalid("data.num_classes",
                   absl::StrCat("must be > 0, got ", config.num_classes()));
  }
  if (!(config.noise() >= 0) ||
      (config.num_classes() >= 2 && config.noise() > 1)) {
    return Invalid("data.noise",
                   absl::StrCat("must be >= 0 (and <= 1 for classes), got ",
                                config.noise()));
  }
  if (config.sparse_columns() < 0) {
    return Invalid("data.sparse_columns",
                   absl::StrCat("must be >= 0, got ", config.sparse_columns()));
  }
  if (config.sparse_columns() > 0) {
    if (config.sparse_cardinality() < 2 ||
        config.sparse_cardinality() > (int64_t{1} << 40)) {
      return Invalid("data.sparse_cardinality",
                     absl::StrCat("must be in [2, 2^40], got ",
                                  config.sparse_cardinality()));
    }
    if (!(config.zipf_exponent() > 0) ||
        !std::isfinite(config.zipf_exponent())) {
      return Invalid("data.zipf_exponent",
                     absl::StrCat("must be > 0, got ", config.zipf_exponent()));
    }
  }
  absl::StatusOr<Layout> layout = MakeLayout(config);
  if (!layout.ok()) return layout.status();
  return std::unique_ptr<DataSource>(new SyntheticSource(config, *layout));
}

uint64_t FirstExampleId(uint64_t step, int rank, int world,
                        int64_t local_batch) {
  const uint64_t b = local_batch;
  return step * world * b + rank * b;
}

absl::StatusOr<std::pair<int64_t, int64_t>> TestSliceRange(int64_t size,
                                                           int rank,
                                                           int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad test slice: rank ", rank, " of ", world));
  }
  return std::make_pair(size * rank / world, size * (rank + 1) / world);
}

}  // namespace pstrain
