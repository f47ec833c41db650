#include "common/job_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace pstrain {
namespace {

using ::pstrain::v1::ConsistencyMode;
using ::pstrain::v1::OptimizerConfig;

constexpr int64_t kMaxChunkBytes = 4 << 20;

// Names accepted for an enum-like key, in the order error messages list them.
template <typename T>
using Names = std::vector<std::pair<std::string, T>>;

const Names<ConsistencyMode>& ModeNames() {
  static const auto* names =
      new Names<ConsistencyMode>{{"sync", v1::MODE_SYNC},
                                 {"async", v1::MODE_ASYNC},
                                 {"allreduce", v1::MODE_ALLREDUCE}};
  return *names;
}

const Names<OptimizerConfig::Kind>& OptimizerNames() {
  static const auto* names =
      new Names<OptimizerConfig::Kind>{{"sgd", OptimizerConfig::SGD},
                                       {"momentum", OptimizerConfig::MOMENTUM},
                                       {"adam", OptimizerConfig::ADAM},
                                       {"adamw", OptimizerConfig::ADAMW},
                                       {"adagrad", OptimizerConfig::ADAGRAD}};
  return *names;
}

const Names<OptimizerConfig::Schedule>& ScheduleNames() {
  static const auto* names = new Names<OptimizerConfig::Schedule>{
      {"constant", OptimizerConfig::CONSTANT},
      {"step", OptimizerConfig::STEP},
      {"cosine", OptimizerConfig::COSINE}};
  return *names;
}

const Names<bool>& ScalingNames() {
  static const auto* names = new Names<bool>{{"none", false}, {"linear", true}};
  return *names;
}

const Names<std::string>& ModelTypeNames() {
  static const auto* names = new Names<std::string>{{"scalar", "scalar"},
                                                    {"linear", "linear"},
                                                    {"softmax", "softmax"},
                                                    {"mlp", "mlp"}};
  return *names;
}

const Names<std::string>& ActivationNames() {
  static const auto* names = new Names<std::string>{
      {"relu", "relu"}, {"tanh", "tanh"}, {"gelu", "gelu"}};
  return *names;
}

const Names<std::string>& SourceNames() {
  static const auto* names =
      new Names<std::string>{{"synthetic", "synthetic"},
                             {"digits", "digits"},
                             {"breast_cancer", "breast_cancer"},
                             {"csv", "csv"},
                             {"libsvm", "libsvm"}};
  return *names;
}

const Names<std::string>& AllReduceBackendNames() {
  static const auto* names =
      new Names<std::string>{{"grpc", "grpc"}, {"nccl", "nccl"}};
  return *names;
}

const Names<v1::DType>& WireDtypeNames() {
  static const auto* names = new Names<v1::DType>{{"fp32", v1::DTYPE_F32},
                                                  {"bf16", v1::DTYPE_BF16},
                                                  {"fp16", v1::DTYPE_F16}};
  return *names;
}

const Names<std::string>& OnFailureNames() {
  static const auto* names = new Names<std::string>{
      {"fail", "fail"}, {"restart", "restart"}, {"elastic", "elastic"}};
  return *names;
}

const Names<std::string>& DeviceNames() {
  static const auto* names = new Names<std::string>{
      {"auto", "auto"}, {"cpu", "cpu"}, {"cuda", "cuda"}};
  return *names;
}

template <typename T>
std::string AllowedNames(const Names<T>& names) {
  return absl::StrJoin(names, ", ", [](std::string* out, const auto& entry) {
    out->append(entry.first);
  });
}

template <typename T>
const std::string* NameOf(const Names<T>& names, const T& value) {
  for (const auto& [name, v] : names) {
    if (v == value) return &name;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Parsing: one YAML value and where it came from.

struct Field {
  const std::string& source;
  YAML::Node node;
  std::string path;  // "training.base_lr"
  // Where to point: the value, or its key when the value is empty (yaml-cpp
  // places an empty value at the next token, possibly lines later).
  YAML::Mark mark;

  absl::Status Error(const std::string& message) const {
    return LocatedError(source, mark, absl::StrCat(path, ": ", message));
  }

  static absl::Status LocatedError(const std::string& source,
                                   const YAML::Mark& mark,
                                   const std::string& message) {
    if (source.empty()) return absl::InvalidArgumentError(message);
    if (mark.is_null() || mark.line < 0) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", message));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", mark.line + 1, ": ", message));
  }
};

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return absl::StrCat("'", node.Scalar(), "'");
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "nothing";
  }
}

absl::StatusOr<std::string> Scalar(const Field& f, const char* expected) {
  if (!f.node.IsScalar()) {
    return f.Error(
        absl::StrCat("expected ", expected, ", got ", Describe(f.node)));
  }
  return f.node.Scalar();
}

absl::StatusOr<std::string> String(const Field& f) {
  return Scalar(f, "a string");
}

// An integer in [min, max of T].
template <typename T>
absl::StatusOr<T> Int(const Field& f, int64_t min = 0) {
  PS_ASSIGN_OR_RETURN(std::string text, Scalar(f, "an integer"));
  T value;
  if (std::is_unsigned<T>::value && !text.empty() && text[0] == '-') {
    return f.Error(absl::StrCat("must be >= ", min, ", got ", text));
  }
  if (!absl::SimpleAtoi(text, &value)) {
    return f.Error(absl::StrCat("expected an integer, got '", text, "'"));
  }
  if (std::is_signed<T>::value && static_cast<int64_t>(value) < min) {
    return f.Error(absl::StrCat("must be >= ", min, ", got ", text));
  }
  return value;
}

absl::StatusOr<double> Number(const Field& f) {
  PS_ASSIGN_OR_RETURN(std::string text, Scalar(f, "a number"));
  double value;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
    return f.Error(absl::StrCat("expected a number, got '", text, "'"));
  }
  return value;
}

absl::StatusOr<double> Positive(const Field& f) {
  PS_ASSIGN_OR_RETURN(double value, Number(f));
  if (value <= 0) {
    return f.Error(absl::StrCat("must be > 0, got ", f.node.Scalar()));
  }
  return value;
}

absl::StatusOr<bool> Bool(const Field& f) {
  PS_ASSIGN_OR_RETURN(std::string text, Scalar(f, "true or false"));
  bool value;
  if (!YAML::convert<bool>::decode(f.node, value)) {
    return f.Error(absl::StrCat("expected true or false, got '", text, "'"));
  }
  return value;
}

template <typename T>
absl::StatusOr<T> Enum(const Field& f, const Names<T>& names) {
  PS_ASSIGN_OR_RETURN(std::string text, Scalar(f, "a name"));
  for (const auto& [name, value] : names) {
    if (text == name) return value;
  }
  return f.Error(absl::StrCat("expected one of ", AllowedNames(names),
                              ", got '", text, "'"));
}

// "inf" (unbounded, stored as -1) or a count >= 0: ParseStaleness.
absl::StatusOr<int64_t> Staleness(const Field& f) {
  absl::StatusOr<int64_t> value = f.node.IsScalar()
                                      ? ParseStaleness(f.node.Scalar())
                                      : absl::InvalidArgumentError("");
  if (!value.ok()) {
    return f.Error(absl::StrCat("expected an integer >= 0 or 'inf', got ",
                                Describe(f.node)));
  }
  return value;
}

// A list whose elements each parse with `element`.
template <typename T>
absl::StatusOr<std::vector<T>> List(
    const Field& f, std::function<absl::StatusOr<T>(const Field&)> element) {
  if (!f.node.IsSequence()) {
    return f.Error(absl::StrCat("expected a list, got ", Describe(f.node)));
  }
  std::vector<T> out;
  for (size_t i = 0; i < f.node.size(); ++i) {
    Field item{f.source, f.node[i], absl::StrCat(f.path, "[", i, "]"),
               f.node[i].Mark()};
    PS_ASSIGN_OR_RETURN(T value, element(item));
    out.push_back(value);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Emitting numbers.

// Shortest decimal text that reads back as exactly `value`.
std::string FormatDouble(double value) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

std::string FormatFloat(float value) {
  char buf[64];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtof(buf, nullptr) == value) break;
  }
  return buf;
}

// ---------------------------------------------------------------------------
// The key table: one row per YAML key drives parsing, emission and
// `section.key=value` overrides. A row pairs a codec (YAML value <-> T) with
// where the value lives in JobConfig.

template <typename T>
struct Codec {
  std::function<absl::StatusOr<T>(const Field&)> parse;
  std::function<void(YAML::Emitter&, const T&)> emit;
};

struct Key {
  std::string section;
  std::string name;
  std::function<absl::Status(const Field&, JobConfig&)> parse;
  // Writes "name: value" (or nothing, for an optional key left unset).
  std::function<void(const JobConfig&, YAML::Emitter&)> emit;
};

template <typename T>
Codec<T> IntCodec(int64_t min = 0) {
  return {[min](const Field& f) { return Int<T>(f, min); },
          [](YAML::Emitter& out, const T& v) { out << v; }};
}

Codec<double> NumberCodec() {
  return {Number,
          [](YAML::Emitter& out, const double& v) { out << FormatDouble(v); }};
}

Codec<double> PositiveCodec() {
  return {static_cast<absl::StatusOr<double> (*)(const Field&)>(Positive),
          [](YAML::Emitter& out, const double& v) { out << FormatDouble(v); }};
}

Codec<float> FloatCodec() {
  return {[](const Field& f) -> absl::StatusOr<float> {
            PS_ASSIGN_OR_RETURN(double v, Number(f));
            return static_cast<float>(v);
          },
          [](YAML::Emitter& out, const float& v) { out << FormatFloat(v); }};
}

Codec<bool> BoolCodec() {
  return {Bool, [](YAML::Emitter& out, const bool& v) { out << v; }};
}

Codec<std::string> StringCodec() {
  return {String, [](YAML::Emitter& out, const std::string& v) { out << v; }};
}

template <typename T>
Codec<T> EnumCodec(const Names<T>& names) {
  return {[&names](const Field& f) { return Enum(f, names); },
          [&names](YAML::Emitter& out, const T& v) {
            const std::string* name = NameOf(names, v);
            // An unknown value is written as is and rejected on the way in.
            out << (name != nullptr ? *name : std::string("unspecified"));
          }};
}

Codec<int64_t> StalenessCodec() {
  return {Staleness, [](YAML::Emitter& out, const int64_t& v) {
            if (v == -1) {
              out << "inf";
            } else {
              out << v;
            }
          }};
}

Codec<std::vector<int64_t>> IntListCodec() {
  return {[](const Field& f) {
            return List<int64_t>(
                f, [](const Field& x) { return Int<int64_t>(x); });
          },
          [](YAML::Emitter& out, const std::vector<int64_t>& v) {
            out << YAML::Flow << YAML::BeginSeq;
            for (int64_t x : v) out << x;
            out << YAML::EndSeq;
          }};
}

Codec<std::vector<float>> FloatListCodec() {
  return {[](const Field& f) -> absl::StatusOr<std::vector<float>> {
            PS_ASSIGN_OR_RETURN(std::vector<double> v, List<double>(f, Number));
            return std::vector<float>(v.begin(), v.end());
          },
          [](YAML::Emitter& out, const std::vector<float>& v) {
            out << YAML::Flow << YAML::BeginSeq;
            for (float x : v) out << FormatFloat(x);
            out << YAML::EndSeq;
          }};
}

// A row: `get` reads the value from a config, `set` stores a parsed one.
template <typename T, typename Get, typename Set>
Key Row(const char* section, const char* name, Codec<T> codec, Get get,
        Set set) {
  Key key{section, name, nullptr, nullptr};
  key.parse = [codec, set](const Field& f, JobConfig& c) -> absl::Status {
    PS_ASSIGN_OR_RETURN(T value, codec.parse(f));
    set(c, std::move(value));
    return absl::OkStatus();
  };
  key.emit = [codec, get, name](const JobConfig& c, YAML::Emitter& out) {
    out << YAML::Key << name << YAML::Value;
    codec.emit(out, static_cast<T>(get(c)));
  };
  return key;
}

// get/set pairs for Row: a JobConfig member, or an OptimizerConfig field.
#define PS_MEMBER(expr)                                                       \
  [](const JobConfig& c) { return c.expr; }, [](JobConfig& c, auto v) {       \
    c.expr =                                                                  \
        static_cast<std::remove_reference_t<decltype(c.expr)>>(std::move(v)); \
  }
#define PS_OPTIMIZER(field)                               \
  [](const JobConfig& c) { return c.optimizer.field(); }, \
      [](JobConfig& c, auto v) { c.optimizer.set_##field(v); }

// Every key, in the order JobConfigToYaml writes them. Adding a key: a field
// in JobConfig (common/job_config.h), a row here, its check in
// ValidateJobConfig, a line in README "Configuration" (see CONTRIBUTING.md).
const std::vector<Key>& KeyTable() {
  static const auto* table = new std::vector<Key>{
      Row("job", "name", StringCodec(), PS_MEMBER(name)),
      Row("job", "workers", IntCodec<int>(), PS_MEMBER(workers)),
      Row("job", "servers", IntCodec<int>(), PS_MEMBER(servers)),

      Row("training", "mode", EnumCodec(ModeNames()), PS_MEMBER(mode)),
      Row("training", "staleness", StalenessCodec(), PS_MEMBER(staleness)),
      Row("training", "backup_workers", IntCodec<int64_t>(),
          PS_MEMBER(backup_workers)),
      Row("training", "staleness_aware_lr", BoolCodec(),
          PS_MEMBER(staleness_aware_lr)),
      Row("training", "dc_lambda", NumberCodec(), PS_MEMBER(dc_lambda)),
      Row("training", "fail_on_divergence", BoolCodec(),
          PS_MEMBER(fail_on_divergence)),
      Row("training", "on_failure", EnumCodec(OnFailureNames()),
          PS_MEMBER(on_failure)),
      Row("training", "optimizer", EnumCodec(OptimizerNames()),
          PS_OPTIMIZER(kind)),
      Row("training", "base_lr", PositiveCodec(), PS_OPTIMIZER(base_lr)),
      Row("training", "momentum", NumberCodec(), PS_OPTIMIZER(momentum)),
      Row("training", "nesterov", BoolCodec(), PS_OPTIMIZER(nesterov)),
      Row("training", "beta1", NumberCodec(), PS_OPTIMIZER(beta1)),
      Row("training", "beta2", NumberCodec(), PS_OPTIMIZER(beta2)),
      // Optional: unset (0) means the optimizer's default, 1e-8 (AdaGrad
      // 1e-10); an explicit value must be > 0.
      [] {
        Key key =
            Row("training", "epsilon", PositiveCodec(), PS_OPTIMIZER(epsilon));
        auto emit = key.emit;
        key.emit = [emit](const JobConfig& c, YAML::Emitter& out) {
          if (c.optimizer.epsilon() != 0) emit(c, out);
        };
        return key;
      }(),
      Row("training", "weight_decay", NumberCodec(),
          PS_OPTIMIZER(weight_decay)),
      Row("training", "adagrad_init", NumberCodec(),
          PS_OPTIMIZER(adagrad_init)),
      Row("training", "lr_schedule", EnumCodec(ScheduleNames()),
          PS_OPTIMIZER(schedule)),
      Row("training", "warmup_steps", IntCodec<uint64_t>(),
          PS_OPTIMIZER(warmup_steps)),
      Row("training", "step_size", IntCodec<uint64_t>(),
          PS_OPTIMIZER(step_size)),
      Row("training", "gamma", NumberCodec(), PS_OPTIMIZER(gamma)),
      Row("training", "min_lr_ratio", NumberCodec(),
          PS_OPTIMIZER(min_lr_ratio)),
      Row("training", "lr_scaling", EnumCodec(ScalingNames()),
          PS_OPTIMIZER(linear_scaling)),
      Row("training", "reference_batch", IntCodec<uint64_t>(),
          PS_OPTIMIZER(reference_batch)),
      Row("training", "local_batch", IntCodec<int64_t>(),
          PS_MEMBER(local_batch)),
      Row("training", "grad_accum_steps", IntCodec<int64_t>(),
          PS_MEMBER(grad_accum_steps)),
      Row("training", "steps", IntCodec<int64_t>(), PS_MEMBER(steps)),

      Row("model", "type", EnumCodec(ModelTypeNames()), PS_MEMBER(model.type)),
      Row("model", "input_dim", IntCodec<int64_t>(),
          PS_MEMBER(model.input_dim)),
      Row("model", "num_classes", IntCodec<int64_t>(),
          PS_MEMBER(model.num_classes)),
      Row("model", "hidden", IntListCodec(), PS_MEMBER(model.hidden)),
      Row("model", "activation", EnumCodec(ActivationNames()),
          PS_MEMBER(model.activation)),
      Row("model", "classifier", BoolCodec(), PS_MEMBER(model.classifier)),
      Row("model", "seed", IntCodec<uint64_t>(), PS_MEMBER(model.seed)),
      Row("model", "init_value", FloatCodec(), PS_MEMBER(model.init_value)),

      Row("data", "source", EnumCodec(SourceNames()), PS_MEMBER(data.source)),
      Row("data", "seed", IntCodec<uint64_t>(), PS_MEMBER(data.seed)),
      Row("data", "num_features", IntCodec<int64_t>(),
          PS_MEMBER(data.num_features)),
      Row("data", "num_classes", IntCodec<int64_t>(),
          PS_MEMBER(data.num_classes)),
      Row("data", "noise", NumberCodec(), PS_MEMBER(data.noise)),
      Row("data", "test_examples", IntCodec<int64_t>(),
          PS_MEMBER(data.test_examples)),
      Row("data", "targets", FloatListCodec(), PS_MEMBER(data.targets)),
      Row("data", "num_categorical", IntCodec<int64_t>(),
          PS_MEMBER(data.num_categorical)),
      Row("data", "categories", IntCodec<int64_t>(),
          PS_MEMBER(data.categories)),
      Row("data", "missing_rate", NumberCodec(), PS_MEMBER(data.missing_rate)),
      Row("data", "path", StringCodec(), PS_MEMBER(data.path)),
      Row("data", "dir", StringCodec(), PS_MEMBER(data.dir)),
      Row("data", "label_column", StringCodec(), PS_MEMBER(data.label_column)),
      Row("data", "test_fraction", NumberCodec(),
          PS_MEMBER(data.test_fraction)),
      Row("data", "standardize", BoolCodec(), PS_MEMBER(data.standardize)),

      Row("worker", "device", EnumCodec(DeviceNames()),
          PS_MEMBER(worker.device)),
      Row("worker", "compute_ms", NumberCodec(), PS_MEMBER(worker.compute_ms)),
      Row("worker", "straggler_rank", IntCodec<int64_t>(-1),
          PS_MEMBER(worker.straggler_rank)),
      Row("worker", "straggler_factor", NumberCodec(),
          PS_MEMBER(worker.straggler_factor)),

      Row("allreduce", "segment_bytes", IntCodec<int64_t>(),
          PS_MEMBER(allreduce.segment_bytes)),
      Row("allreduce", "backend", EnumCodec(AllReduceBackendNames()),
          PS_MEMBER(allreduce.backend)),
      Row("allreduce", "timeout_s", PositiveCodec(),
          PS_MEMBER(allreduce.timeout_s)),

      Row("evaluation", "every_steps", IntCodec<int64_t>(),
          PS_MEMBER(eval_every)),

      Row("server", "chunk_bytes", IntCodec<int64_t>(), PS_MEMBER(chunk_bytes)),

      Row("checkpoint", "dir", StringCodec(), PS_MEMBER(checkpoint.dir)),
      Row("checkpoint", "every_steps", IntCodec<int64_t>(),
          PS_MEMBER(checkpoint.every_steps)),
      Row("checkpoint", "every_seconds", NumberCodec(),
          PS_MEMBER(checkpoint.every_seconds)),
      Row("checkpoint", "keep", IntCodec<int64_t>(),
          PS_MEMBER(checkpoint.keep)),

      Row("network", "rpc_timeout_s", PositiveCodec(),
          PS_MEMBER(rpc_timeout_s)),
      Row("network", "barrier_timeout_s", PositiveCodec(),
          PS_MEMBER(barrier_timeout_s)),
      Row("network", "startup_timeout_s", PositiveCodec(),
          PS_MEMBER(startup_timeout_s)),
      Row("network", "wire_dtype", EnumCodec(WireDtypeNames()),
          PS_MEMBER(wire_dtype)),
      Row("network", "lease_s", PositiveCodec(), PS_MEMBER(lease_s)),
      Row("network", "tls_cert", StringCodec(), PS_MEMBER(tls_cert)),
      Row("network", "tls_key", StringCodec(), PS_MEMBER(tls_key)),
      Row("network", "tls_ca", StringCodec(), PS_MEMBER(tls_ca)),
      Row("network", "token_file", StringCodec(), PS_MEMBER(token_file)),
  };
  return *table;
}

#undef PS_MEMBER
#undef PS_OPTIMIZER

// Section names in table order.
std::vector<std::string> SectionOrder() {
  std::vector<std::string> sections;
  for (const Key& key : KeyTable()) {
    if (sections.empty() || sections.back() != key.section) {
      sections.push_back(key.section);
    }
  }
  return sections;
}

using Handler = std::function<absl::Status(const Field&)>;
using Section = std::map<std::string, Handler>;

// Applies `handlers` to every key of the map `node`, in document order.
absl::Status ReadMap(const Field& f, const Section& handlers,
                     const char* kind) {
  if (f.node.IsNull()) return absl::OkStatus();  // "job:" with no keys
  if (!f.node.IsMap()) {
    return f.Error(absl::StrCat("expected a map, got ", Describe(f.node)));
  }
  std::set<std::string> seen;
  for (const auto& entry : f.node) {
    const YAML::Node& key = entry.first;
    const std::string name = key.IsScalar() ? key.Scalar() : Describe(key);
    const std::string where = f.path.empty()
                                  ? std::string()
                                  : absl::StrCat(" in section '", f.path, "'");
    auto handler = handlers.find(name);
    if (!key.IsScalar() || handler == handlers.end()) {
      std::vector<std::string> known;
      for (const auto& h : handlers) known.push_back(h.first);
      return Field::LocatedError(
          f.source, key.Mark(),
          absl::StrCat("unknown ", kind, " '", name, "'", where,
                       " (known: ", absl::StrJoin(known, ", "), ")"));
    }
    if (!seen.insert(name).second) {
      return Field::LocatedError(
          f.source, key.Mark(),
          absl::StrCat("duplicate ", kind, " '", name, "'", where));
    }
    const std::string path =
        f.path.empty() ? name : absl::StrCat(f.path, ".", name);
    const YAML::Mark mark =
        entry.second.IsNull() ? key.Mark() : entry.second.Mark();
    PS_RETURN_IF_ERROR(
        handler->second(Field{f.source, entry.second, path, mark}));
  }
  return absl::OkStatus();
}

absl::Status ParseInto(const Field& root, JobConfig& c) {
  std::map<std::string, Section> keys;  // section -> key -> handler
  for (const Key& key : KeyTable()) {
    keys[key.section][key.name] = [&key, &c](const Field& f) {
      return key.parse(f, c);
    };
  }
  Section sections;
  for (const auto& [name, section] : keys) {
    sections[name] = [&section = section](const Field& f) {
      return ReadMap(f, section, "key");
    };
  }
  if (!root.node.IsNull() && !root.node.IsMap()) {
    return Field::LocatedError(
        root.source, root.mark,
        absl::StrCat("expected a map of sections, got ", Describe(root.node)));
  }
  return ReadMap(root, sections, "section");
}

// ---------------------------------------------------------------------------
// Validation helpers: errors name the key as it is spelled in YAML.

absl::Status KeyError(const std::string& key, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", message));
}

absl::Status AtLeast(const std::string& key, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return KeyError(key, absl::StrCat("must be >= ", min, ", got ", value));
}

absl::Status InRange(const std::string& key, double value, double lo, double hi,
                     bool hi_inclusive) {
  if (value >= lo && (hi_inclusive ? value <= hi : value < hi)) {
    return absl::OkStatus();
  }
  return KeyError(key, absl::StrCat("must be in [", lo, ", ", hi,
                                    hi_inclusive ? "]" : ")", ", got ", value));
}

absl::Status Positive(const std::string& key, double value) {
  if (value > 0 && std::isfinite(value)) return absl::OkStatus();
  return KeyError(key, absl::StrCat("must be > 0, got ", value));
}

absl::Status NonNegative(const std::string& key, double value) {
  if (value >= 0 && std::isfinite(value)) return absl::OkStatus();
  return KeyError(key, absl::StrCat("must be >= 0, got ", value));
}

template <typename T>
absl::Status Known(const std::string& key, const Names<T>& names,
                   const T& value) {
  if (NameOf(names, value) != nullptr) return absl::OkStatus();
  return KeyError(key, absl::StrCat("must be one of ", AllowedNames(names)));
}

}  // namespace

JobConfig DefaultJobConfig() {
  JobConfig config;
  OptimizerConfig& o = config.optimizer;
  o.set_kind(OptimizerConfig::SGD);
  o.set_base_lr(0.1);
  o.set_momentum(0.9);
  o.set_nesterov(false);
  o.set_beta1(0.9);
  o.set_beta2(0.999);
  // epsilon stays 0: the optimizer's own default (1e-8, AdaGrad 1e-10).
  o.set_weight_decay(0);
  o.set_adagrad_init(0.1);
  o.set_schedule(OptimizerConfig::CONSTANT);
  o.set_warmup_steps(0);
  o.set_step_size(0);
  o.set_gamma(0.1);
  o.set_min_lr_ratio(0);
  o.set_linear_scaling(false);
  o.set_reference_batch(256);
  FinalizeJobConfig(&config);
  return config;
}

void FinalizeJobConfig(JobConfig* config) {
  config->optimizer.set_total_steps(
      static_cast<uint64_t>(std::max<int64_t>(config->steps, 0)));
  config->optimizer.set_global_batch(static_cast<uint64_t>(std::max<int64_t>(
      config->local_batch * config->workers * config->grad_accum_steps, 0)));
}

absl::StatusOr<JobConfig> ParseJobConfig(const std::string& yaml_text,
                                         const std::string& source_name) {
  const std::string source = source_name.empty() ? "config" : source_name;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Field::LocatedError(source, e.mark,
                               absl::StrCat("YAML syntax error: ", e.msg));
  }
  JobConfig config = DefaultJobConfig();
  PS_RETURN_IF_ERROR(ParseInto(Field{source, root, "", root.Mark()}, config));
  FinalizeJobConfig(&config);
  return config;
}

absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot read config file '", path, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseJobConfig(text.str(), path);
}

absl::Status ValidateJobConfig(const JobConfig& c) {
  const OptimizerConfig& o = c.optimizer;
  const ModelConfig& m = c.model;
  const DataConfig& d = c.data;
  PS_RETURN_IF_ERROR(AtLeast("job.workers", c.workers, 1));
  PS_RETURN_IF_ERROR(AtLeast("job.servers", c.servers, 1));

  PS_RETURN_IF_ERROR(Known("training.mode", ModeNames(), c.mode));
  PS_RETURN_IF_ERROR(AtLeast("training.staleness", c.staleness, -1));
  PS_RETURN_IF_ERROR(Known("training.optimizer", OptimizerNames(), o.kind()));
  PS_RETURN_IF_ERROR(Positive("training.base_lr", o.base_lr()));
  PS_RETURN_IF_ERROR(InRange("training.momentum", o.momentum(), 0, 1, false));
  PS_RETURN_IF_ERROR(InRange("training.beta1", o.beta1(), 0, 1, false));
  PS_RETURN_IF_ERROR(InRange("training.beta2", o.beta2(), 0, 1, false));
  // 0 = unset: the optimizer's default (1e-8, AdaGrad 1e-10).
  PS_RETURN_IF_ERROR(NonNegative("training.epsilon", o.epsilon()));
  PS_RETURN_IF_ERROR(NonNegative("training.weight_decay", o.weight_decay()));
  PS_RETURN_IF_ERROR(NonNegative("training.adagrad_init", o.adagrad_init()));
  PS_RETURN_IF_ERROR(
      Known("training.lr_schedule", ScheduleNames(), o.schedule()));
  if (o.schedule() == OptimizerConfig::STEP) {
    PS_RETURN_IF_ERROR(Positive("training.gamma", o.gamma()));
    if (o.step_size() < 1) {
      return KeyError("training.step_size",
                      "must be >= 1 with lr_schedule step");
    }
  }
  PS_RETURN_IF_ERROR(
      InRange("training.min_lr_ratio", o.min_lr_ratio(), 0, 1, true));
  if (o.linear_scaling() && o.reference_batch() < 1) {
    return KeyError("training.reference_batch",
                    "must be >= 1 with lr_scaling linear");
  }
  PS_RETURN_IF_ERROR(AtLeast("training.local_batch", c.local_batch, 1));
  PS_RETURN_IF_ERROR(
      AtLeast("training.grad_accum_steps", c.grad_accum_steps, 1));
  PS_RETURN_IF_ERROR(AtLeast("training.steps", c.steps, 1));

  PS_RETURN_IF_ERROR(Known("model.type", ModelTypeNames(), m.type));
  PS_RETURN_IF_ERROR(
      Known("model.activation", ActivationNames(), m.activation));
  PS_RETURN_IF_ERROR(AtLeast("model.num_classes", m.num_classes, 1));
  for (size_t i = 0; i < m.hidden.size(); ++i) {
    PS_RETURN_IF_ERROR(
        AtLeast(absl::StrCat("model.hidden[", i, "]"), m.hidden[i], 1));
  }
  PS_RETURN_IF_ERROR(Known("data.source", SourceNames(), d.source));
  PS_RETURN_IF_ERROR(AtLeast("data.num_classes", d.num_classes, 1));
  PS_RETURN_IF_ERROR(AtLeast("data.test_examples", d.test_examples, 0));
  PS_RETURN_IF_ERROR(NonNegative("data.noise", d.noise));
  if (m.type == "scalar") {
    if (d.targets.empty()) {
      return KeyError("data.targets",
                      "must be non-empty for model.type scalar");
    }
  } else {
    PS_RETURN_IF_ERROR(AtLeast("model.input_dim", m.input_dim, 1));
    // File data knows its width only once loaded; the worker checks then.
    if (d.source == "synthetic" && m.input_dim != d.num_features) {
      return KeyError(
          "model.input_dim",
          absl::StrCat("is ", m.input_dim, " but data.num_features is ",
                       d.num_features, "; they must match"));
    }
  }
  PS_RETURN_IF_ERROR(AtLeast("data.num_categorical", d.num_categorical, 0));
  if (d.num_categorical > d.num_features) {
    return KeyError(
        "data.num_categorical",
        absl::StrCat("is ", d.num_categorical,
                     " but data.num_features is only ", d.num_features));
  }
  PS_RETURN_IF_ERROR(AtLeast("data.categories", d.categories, 2));
  PS_RETURN_IF_ERROR(InRange("data.missing_rate", d.missing_rate, 0, 1, false));
  PS_RETURN_IF_ERROR(
      InRange("data.test_fraction", d.test_fraction, 0, 1, false));
  if ((d.source == "csv" || d.source == "libsvm") && d.path.empty()) {
    return KeyError("data.path",
                    absl::StrCat("is required with data.source ", d.source));
  }
  PS_RETURN_IF_ERROR(Known("worker.device", DeviceNames(), c.worker.device));
  PS_RETURN_IF_ERROR(NonNegative("worker.compute_ms", c.worker.compute_ms));
  if (c.worker.straggler_rank < -1 || c.worker.straggler_rank >= c.workers) {
    return KeyError(
        "worker.straggler_rank",
        absl::StrCat("must be -1 (none) or a rank below job.workers (",
                     c.workers, "), got ", c.worker.straggler_rank));
  }
  if (!(c.worker.straggler_factor >= 1)) {
    return KeyError(
        "worker.straggler_factor",
        absl::StrCat("must be >= 1, got ", c.worker.straggler_factor));
  }
  PS_RETURN_IF_ERROR(AtLeast("training.backup_workers", c.backup_workers, 0));
  if (c.backup_workers > 0 &&
      (c.mode != v1::MODE_SYNC || c.backup_workers >= c.workers)) {
    return KeyError("training.backup_workers",
                    absl::StrCat("needs mode sync and fewer than job.workers (",
                                 c.workers, "), got ", c.backup_workers));
  }
  if ((c.staleness_aware_lr || c.dc_lambda != 0) && c.mode != v1::MODE_ASYNC) {
    return KeyError(c.staleness_aware_lr ? "training.staleness_aware_lr"
                                         : "training.dc_lambda",
                    "applies to mode async only");
  }
  PS_RETURN_IF_ERROR(NonNegative("training.dc_lambda", c.dc_lambda));
  if (c.allreduce.segment_bytes < 4096 ||
      c.allreduce.segment_bytes > (4 << 20) || c.allreduce.segment_bytes % 4) {
    return KeyError(
        "allreduce.segment_bytes",
        absl::StrCat("must be a multiple of 4 in [4096, 4 MiB], got ",
                     c.allreduce.segment_bytes));
  }
  PS_RETURN_IF_ERROR(
      Known("allreduce.backend", AllReduceBackendNames(), c.allreduce.backend));
  if (d.source == "synthetic" && m.num_classes != d.num_classes) {
    return KeyError(
        "model.num_classes",
        absl::StrCat("is ", m.num_classes, " but data.num_classes is ",
                     d.num_classes, "; they must match"));
  }

  PS_RETURN_IF_ERROR(AtLeast("evaluation.every_steps", c.eval_every, 0));
  if (c.chunk_bytes != 0 &&
      (c.chunk_bytes < 64 || c.chunk_bytes > kMaxChunkBytes ||
       c.chunk_bytes % 4 != 0)) {
    return KeyError("server.chunk_bytes",
                    absl::StrCat("must be 0 (automatic) or a multiple of 4 in "
                                 "[64, ",
                                 kMaxChunkBytes, "], got ", c.chunk_bytes));
  }
  PS_RETURN_IF_ERROR(
      AtLeast("checkpoint.every_steps", c.checkpoint.every_steps, 0));
  PS_RETURN_IF_ERROR(
      NonNegative("checkpoint.every_seconds", c.checkpoint.every_seconds));
  PS_RETURN_IF_ERROR(AtLeast("checkpoint.keep", c.checkpoint.keep, 0));
  if (c.checkpoint.every_steps > 0 || c.checkpoint.every_seconds > 0) {
    if (c.mode == pstrain::v1::MODE_ASYNC) {
      return KeyError(c.checkpoint.every_steps > 0 ? "checkpoint.every_steps"
                                                   : "checkpoint.every_seconds",
                      "checkpoints in mode async are not supported yet "
                      "(only sync)");
    }
    if (c.mode == pstrain::v1::MODE_ALLREDUCE) {
      return KeyError(c.checkpoint.every_steps > 0 ? "checkpoint.every_steps"
                                                   : "checkpoint.every_seconds",
                      "mode allreduce has no servers to checkpoint");
    }
  }
  PS_RETURN_IF_ERROR(Positive("network.rpc_timeout_s", c.rpc_timeout_s));
  PS_RETURN_IF_ERROR(
      Positive("network.barrier_timeout_s", c.barrier_timeout_s));
  PS_RETURN_IF_ERROR(
      Positive("network.startup_timeout_s", c.startup_timeout_s));
  PS_RETURN_IF_ERROR(
      Known("network.wire_dtype", WireDtypeNames(), c.wire_dtype));
  PS_RETURN_IF_ERROR(Positive("network.lease_s", c.lease_s));
  PS_RETURN_IF_ERROR(
      Known("training.on_failure", OnFailureNames(), c.on_failure));
  if (c.on_failure != "fail") {
    return KeyError("training.on_failure",
                    absl::StrCat("'", c.on_failure,
                                 "' is not implemented yet; use 'fail'"));
  }
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return KeyError(c.tls_cert.empty() ? "network.tls_cert" : "network.tls_key",
                    "network.tls_cert and network.tls_key go together");
  }
  return absl::OkStatus();
}

std::string JobConfigToYaml(const JobConfig& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const std::string& section : SectionOrder()) {
    out << YAML::Key << section << YAML::Value << YAML::BeginMap;
    for (const Key& key : KeyTable()) {
      if (key.section == section) key.emit(c, out);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

absl::StatusOr<int64_t> ParseStaleness(absl::string_view text) {
  int64_t value;
  if (text == "inf") return -1;
  if (!absl::SimpleAtoi(text, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an integer >= 0 or 'inf', got '", text, "'"));
  }
  return value;
}

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> keys;
  for (const Key& key : KeyTable()) {
    keys.push_back(absl::StrCat(key.section, ".", key.name));
  }
  return keys;
}

absl::Status ApplyConfigOverride(const std::string& key,
                                 const std::string& value, JobConfig* config) {
  const std::vector<std::string> path = absl::StrSplit(key, '.');
  if (path.size() < 2 ||
      std::any_of(path.begin(), path.end(),
                  [](const std::string& p) { return p.empty(); })) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad key '", key, "' (expected section.key)"));
  }
  const Key* row = nullptr;
  std::vector<std::string> known_keys;
  for (const Key& k : KeyTable()) {
    if (k.section != path[0]) continue;
    known_keys.push_back(k.name);
    if (k.name == path[1]) row = &k;
  }
  if (known_keys.empty()) {
    std::vector<std::string> sections = SectionOrder();
    std::sort(sections.begin(), sections.end());
    return absl::InvalidArgumentError(
        absl::StrCat("unknown section '", path[0],
                     "' (known: ", absl::StrJoin(sections, ", "), ")"));
  }
  if (row == nullptr) {
    std::sort(known_keys.begin(), known_keys.end());
    return absl::InvalidArgumentError(
        absl::StrCat("unknown key '", path[1], "' in section '", path[0],
                     "' (known: ", absl::StrJoin(known_keys, ", "), ")"));
  }
  if (path.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path[1], "' is not a section"));
  }
  YAML::Node node;
  try {
    node = value.empty() ? YAML::Node(std::string()) : YAML::Load(value);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("bad YAML value: ", e.msg));
  }
  const std::string no_source;  // errors carry no file or line
  return row->parse(Field{no_source, node, key, YAML::Mark::null_mark()},
                    *config);
}

absl::Status ApplyFlagOverrides(const std::vector<FlagOverride>& overrides,
                                JobConfig* config) {
  for (const FlagOverride& o : overrides) {
    absl::Status st = ApplyConfigOverride(o.key, o.value, config);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(o.flag, ": ", st.message()));
    }
  }
  FinalizeJobConfig(config);
  absl::Status valid = ValidateJobConfig(*config);
  if (valid.ok()) return valid;
  // Name the flag whose key the error is about ("job.workers: ...").
  for (const FlagOverride& o : overrides) {
    if (absl::StartsWith(valid.message(), absl::StrCat(o.key, ":"))) {
      return absl::InvalidArgumentError(
          absl::StrCat(o.flag, ": ", valid.message()));
    }
  }
  return valid;
}

}  // namespace pstrain
