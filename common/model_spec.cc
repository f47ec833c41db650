#include "common/model_spec.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

using pstrain::v1::InitRule;
using pstrain::v1::TensorSpec;

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
// wide_deep: embedding rows start UNIFORM(+-kEmbeddingInitScale / sqrt(dim)),
// small, so that the random rows of rarely seen ids add little noise.
constexpr double kEmbeddingInitScale = 0.1;

// splitmix64 finaliser: a bijective, well-mixed 64-bit hash.
uint64_t Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a, so the name hash does not depend on std::hash's implementation.
uint64_t HashName(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Uniform in (0, 1]: the top 53 bits, shifted off zero so log() is finite.
double Unit(uint64_t h) { return ((h >> 11) + 1) * 0x1.0p-53; }

// `stream` is the per-tensor key Mix(seed ^ Mix(name hash)).
float Sample(const InitRule& rule, uint64_t stream, uint64_t index) {
  switch (rule.kind()) {
    case InitRule::CONSTANT:
      return rule.value();
    case InitRule::UNIFORM: {
      const double u = Unit(Mix(stream + index * kGolden));
      return static_cast<float>(rule.scale() * (2.0 * u - 1.0));
    }
    case InitRule::NORMAL: {
      const uint64_t h1 = Mix(stream + index * kGolden);
      const double u1 = Unit(h1);
      const double u2 = Unit(Mix(h1 ^ kGolden));
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
      return static_cast<float>(rule.scale() * z);
    }
    default:
      return 0.0f;
  }
}

uint64_t Stream(const TensorSpec& spec) {
  return Mix(spec.init().seed() ^ Mix(HashName(spec.name())));
}

TensorSpec MakeSpec(std::string name, std::vector<int64_t> shape,
                    InitRule::Kind kind, float scale, uint64_t seed) {
  TensorSpec spec;
  spec.set_name(std::move(name));
  for (int64_t d : shape) spec.add_shape(d);
  spec.set_dtype(pstrain::v1::DTYPE_F32);
  spec.mutable_init()->set_kind(kind);
  spec.mutable_init()->set_scale(scale);
  spec.mutable_init()->set_seed(seed);
  return spec;
}

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// "uniform(0.1)" -> 0.1 for `kind` "uniform"; false when `text` is not
// kind(NUMBER).
bool ParseInitArg(absl::string_view text, absl::string_view kind,
                  double* value) {
  if (!absl::ConsumePrefix(&text, kind) || !absl::ConsumePrefix(&text, "(") ||
      !absl::ConsumeSuffix(&text, ")")) {
    return false;
  }
  return absl::SimpleAtod(text, value) && std::isfinite(*value);
}

// model.type external: one "NAME:D0xD1x...[:INIT]" entry of model.tensors.
absl::StatusOr<TensorSpec> ExternalTensor(int i, const std::string& entry,
                                          uint64_t seed) {
  const std::string field = absl::StrCat("model.tensors[", i, "]");
  const std::vector<std::string> parts = absl::StrSplit(entry, ':');
  if (parts.size() < 2 || parts.size() > 3) {
    return Invalid(field,
                   absl::StrCat("'", entry, "' is not NAME:D0xD1x...[:INIT]"));
  }
  // Torch's parameter names use '.', the job's tensors '/'.
  std::string name = parts[0];
  for (char& c : name) {
    if (c == '.') c = '/';
  }
  if (name.empty() || name.size() > 256 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW"
                             "XYZ0123456789_/-") != std::string::npos) {
    return Invalid(field, absl::StrCat("tensor name '", parts[0],
                                       "': 1..256 of [A-Za-z0-9_./-]"));
  }
  std::vector<int64_t> shape;
  int64_t elements = 1;
  for (absl::string_view d : absl::StrSplit(parts[1], 'x')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(d, &v) || v < 1 || v > (int64_t{1} << 32) ||
        elements > (int64_t{1} << 34) / v) {
      return Invalid(field,
                     absl::StrCat("tensor '", name, "': shape '", parts[1],
                                  "' is not D0xD1x... with each D >= "
                                  "1 (at most 2^34 elements)"));
    }
    elements *= v;
    shape.push_back(v);
  }
  // Default: Glorot uniform over torch's layout [out, in, kernel...].
  InitRule::Kind kind = InitRule::ZEROS;
  double scale = 0, value = 0;
  if (shape.size() >= 2) {
    const double receptive = static_cast<double>(elements) /
                             (static_cast<double>(shape[0]) * shape[1]);
    kind = InitRule::UNIFORM;
    scale = std::sqrt(6.0 / ((shape[0] + shape[1]) * receptive));
  }
  if (parts.size() == 3) {
    const std::string init = absl::AsciiStrToLower(parts[2]);
    if (init == "zeros") {
      kind = InitRule::ZEROS;
    } else if (ParseInitArg(init, "constant", &value)) {
      kind = InitRule::CONSTANT;
    } else if (ParseInitArg(init, "uniform", &scale) && scale >= 0) {
      kind = InitRule::UNIFORM;
    } else if (ParseInitArg(init, "normal", &scale) && scale >= 0) {
      kind = InitRule::NORMAL;
    } else {
      return Invalid(field,
                     absl::StrCat("tensor '", name, "': init '", parts[2],
                                  "' is not zeros, constant(V), "
                                  "uniform(S) or normal(S)"));
    }
  }
  TensorSpec spec =
      MakeSpec(name, shape, kind, static_cast<float>(scale), seed);
  spec.mutable_init()->set_value(static_cast<float>(value));
  return spec;
}

absl::Status CheckActivation(const ModelConfig& config) {
  const std::string& act = ConfigName(config.activation());
  if (act != "relu" && act != "tanh" && act != "gelu") {
    return Invalid("model.activation",
                   absl::StrCat("unknown activation '", act,
                                "' (expected relu, tanh or gelu)"));
  }
  return absl::OkStatus();
}

// Dense layers `prefix`{i} over `widths`, initialised as the mlp's.
void AddLayers(const std::string& prefix, const std::vector<int64_t>& widths,
               bool last_is_hidden, const ModelConfig& config,
               std::vector<TensorSpec>* specs) {
  const bool relu = config.activation() == ModelConfig::RELU;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const double fan_in = widths[i], fan_out = widths[i + 1];
    const bool hidden = last_is_hidden || i + 2 < widths.size();
    const double scale = (hidden && relu) ? std::sqrt(6.0 / fan_in)
                                          : std::sqrt(6.0 / (fan_in + fan_out));
    const std::string name = absl::StrCat(prefix, i);
    specs->push_back(MakeSpec(name + "/weight", {widths[i], widths[i + 1]},
                              InitRule::UNIFORM, scale, config.seed()));
    specs->push_back(MakeSpec(name + "/bias", {widths[i + 1]}, InitRule::ZEROS,
                              0, config.seed()));
  }
}

absl::StatusOr<std::vector<TensorSpec>> WideDeepSpecs(
    const ModelConfig& config) {
  struct Count {
    const char* key;
    int64_t value, min;
  };
  for (const Count& c :
       {Count{"model.input_dim", config.input_dim(), 1},
        Count{"model.num_classes", config.num_classes(), 2},
        Count{"model.sparse_columns", config.sparse_columns(), 1},
        Count{"model.buckets", config.buckets(), 1},
        Count{"model.embedding_dim", config.embedding_dim(), 1},
        Count{"model.hashes", config.hashes(), 1}}) {
    if (c.value < c.min) {
      return Invalid(c.key,
                     absl::StrCat("must be >= ", c.min,
                                  " for model.type wide_deep, got ", c.value));
    }
  }
  if (config.pooling() != ModelConfig::SUM &&
      config.pooling() != ModelConfig::MEAN) {
    return Invalid("model.pooling", "must be sum or mean");
  }
  if (absl::Status s = CheckActivation(config); !s.ok()) return s;
  std::vector<int64_t> bottom = {config.input_dim()};
  for (int i = 0; i < config.bottom_hidden_size(); ++i) {
    if (config.bottom_hidden(i) <= 0) {
      return Invalid(
          absl::StrCat("model.bottom_hidden[", i, "]"),
          absl::StrCat("must be > 0, got ", config.bottom_hidden(i)));
    }
    bottom.push_back(config.bottom_hidden(i));
  }
  std::vector<int64_t> top = {bottom.back() +
                              config.sparse_columns() * config.embedding_dim()};
  for (int i = 0; i < config.hidden_size(); ++i) {
    if (config.hidden(i) <= 0) {
      return Invalid(absl::StrCat("model.hidden[", i, "]"),
                     absl::StrCat("must be > 0, got ", config.hidden(i)));
    }
    top.push_back(config.hidden(i));
  }
  top.push_back(config.num_classes());
  std::vector<TensorSpec> specs;
  specs.push_back(
      MakeSpec("embedding", {config.buckets(), config.embedding_dim()},
               InitRule::UNIFORM,
               kEmbeddingInitScale /
                   std::sqrt(static_cast<double>(config.embedding_dim())),
               config.seed()));
  specs.back().set_row_sparse(true);
  AddLayers("bottom", bottom, /*last_is_hidden=*/true, config, &specs);
  AddLayers("top", top, /*last_is_hidden=*/false, config, &specs);
  return specs;
}

}  // namespace

absl::StatusOr<std::vector<TensorSpec>> ModelParamSpecs(
    const ModelConfig& config) {
  std::vector<TensorSpec> specs;
  const uint64_t seed = config.seed();
  if (config.type() == ModelConfig::SCALAR) {
    specs.push_back(MakeSpec("w", {1}, InitRule::CONSTANT, 0, seed));
    specs.back().mutable_init()->set_value(config.init_value());
    return specs;
  }
  if (config.type() == ModelConfig::EXTERNAL) {
    if (config.tensors().empty()) {
      return Invalid("model.tensors",
                     "must list the tensors for model.type external");
    }
    for (int i = 0; i < config.tensors_size(); ++i) {
      PS_ASSIGN_OR_RETURN(TensorSpec spec,
                          ExternalTensor(i, config.tensors(i), seed));
      for (const TensorSpec& other : specs) {
        if (other.name() == spec.name()) {
          return Invalid(
              absl::StrCat("model.tensors[", i, "]"),
              absl::StrCat("tensor '", spec.name(), "' is listed twice"));
        }
      }
      specs.push_back(std::move(spec));
    }
    return specs;
  }
  if (config.type() == ModelConfig::WIDE_DEEP) return WideDeepSpecs(config);
  if (config.type() != ModelConfig::LINEAR &&
      config.type() != ModelConfig::SOFTMAX &&
      config.type() != ModelConfig::MLP) {
    return Invalid(
        "model.type",
        absl::StrCat("unknown model type '", ConfigName(config.type()),
                     "' (expected scalar, linear, softmax, mlp, wide_deep or "
                     "external)"));
  }
  const int64_t in = config.input_dim(), out = config.num_classes();
  if (in <= 0) {
    return Invalid("model.input_dim", absl::StrCat("must be > 0, got ", in));
  }
  if (out <= 0) {
    return Invalid("model.num_classes", absl::StrCat("must be > 0, got ", out));
  }
  const bool classifier =
      config.type() == ModelConfig::SOFTMAX ||
      (config.type() == ModelConfig::MLP && config.classifier());
  if (classifier && out < 2) {
    return Invalid("model.num_classes",
                   absl::StrCat("a classifier needs >= 2 classes, got ", out));
  }
  if (config.type() != ModelConfig::MLP) {
    const std::string prefix = ConfigName(config.type());
    specs.push_back(MakeSpec(prefix + "/weight", {in, out}, InitRule::UNIFORM,
                             1.0 / std::sqrt(static_cast<double>(in)), seed));
    specs.push_back(
        MakeSpec(prefix + "/bias", {out}, InitRule::ZEROS, 0, seed));
    return specs;
  }
  const std::string& act = ConfigName(config.activation());
  if (act != "relu" && act != "tanh" && act != "gelu") {
    return Invalid("model.activation",
                   absl::StrCat("unknown activation '", act,
                                "' (expected relu, tanh or gelu)"));
  }
  std::vector<int64_t> widths = {in};
  for (int i = 0; i < config.hidden_size(); ++i) {
    if (config.hidden(i) <= 0) {
      return Invalid(absl::StrCat("model.hidden[", i, "]"),
                     absl::StrCat("must be > 0, got ", config.hidden(i)));
    }
    widths.push_back(config.hidden(i));
  }
  widths.push_back(out);
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const double fan_in = widths[i], fan_out = widths[i + 1];
    const bool hidden = i + 2 < widths.size();
    const double scale = (hidden && act == "relu")
                             ? std::sqrt(6.0 / fan_in)
                             : std::sqrt(6.0 / (fan_in + fan_out));
    const std::string prefix = absl::StrCat("layer", i);
    specs.push_back(MakeSpec(prefix + "/weight", {widths[i], widths[i + 1]},
                             InitRule::UNIFORM, scale, seed));
    specs.push_back(
        MakeSpec(prefix + "/bias", {widths[i + 1]}, InitRule::ZEROS, 0, seed));
  }
  return specs;
}

int64_t NumElements(const TensorSpec& spec) {
  int64_t n = 1;
  for (int64_t d : spec.shape()) n *= d;
  return n;
}

float InitialValue(const TensorSpec& spec, uint64_t index) {
  return Sample(spec.init(), Stream(spec), index);
}

void InitialValues(const TensorSpec& spec, uint64_t offset, uint64_t length,
                   float* out) {
  const uint64_t stream = Stream(spec);
  for (uint64_t i = 0; i < length; ++i) {
    out[i] = Sample(spec.init(), stream, offset + i);
  }
}

bool IsClassifier(const ModelConfig& config) {
  return config.type() != ModelConfig::SCALAR && config.num_classes() >= 2;
}

}  // namespace pstrain
