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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

// "inf" (unbounded, stored as -1) or a count >= 0.
absl::StatusOr<int64_t> Staleness(const Field& f) {
  if (f.node.IsScalar() && f.node.Scalar() == "inf") return -1;
  absl::StatusOr<int64_t> value = Int<int64_t>(f);
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

// Stores a parsed value through `set`, or passes the error on.
template <typename T, typename Set>
absl::Status Store(absl::StatusOr<T> value, Set set) {
  if (!value.ok()) return value.status();
  set(*std::move(value));
  return absl::OkStatus();
}

template <typename T, typename U>
absl::Status Store(absl::StatusOr<T> value, U* out) {
  return Store(std::move(value), [out](T v) { *out = static_cast<U>(v); });
}

// Stores into a proto field through its setter, e.g.
// &OptimizerConfig::set_gamma.
template <typename T, typename M, typename V>
absl::Status Store(absl::StatusOr<T> value, M* message, void (M::*set)(V)) {
  return Store(std::move(value),
               [=](T v) { (message->*set)(static_cast<V>(v)); });
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

absl::Status ReadSection(const Field& f, const Section& handlers) {
  return ReadMap(f, handlers, "key");
}

absl::Status ParseInto(const Field& root, JobConfig& c) {
  ModelConfig& m = c.model;
  DataConfig& d = c.data;
  OptimizerConfig& o = c.optimizer;
  using O = OptimizerConfig;
  // Each entry reads one key; `F` is the field being read.
  using F = const Field&;
  const Section job = {
      {"name", [&](F f) { return Store(String(f), &c.name); }},
      {"workers", [&](F f) { return Store(Int<int>(f), &c.workers); }},
      {"servers", [&](F f) { return Store(Int<int>(f), &c.servers); }},
  };
  const Section training = {
      {"mode", [&](F f) { return Store(Enum(f, ModeNames()), &c.mode); }},
      {"staleness", [&](F f) { return Store(Staleness(f), &c.staleness); }},
      {"backup_workers",
       [&](F f) { return Store(Int<int64_t>(f), &c.backup_workers); }},
      {"staleness_aware_lr",
       [&](F f) { return Store(Bool(f), &c.staleness_aware_lr); }},
      {"dc_lambda", [&](F f) { return Store(Number(f), &c.dc_lambda); }},
      {"optimizer",
       [&](F f) { return Store(Enum(f, OptimizerNames()), &o, &O::set_kind); }},
      {"base_lr", [&](F f) { return Store(Positive(f), &o, &O::set_base_lr); }},
      {"momentum", [&](F f) { return Store(Number(f), &o, &O::set_momentum); }},
      {"nesterov", [&](F f) { return Store(Bool(f), &o, &O::set_nesterov); }},
      {"beta1", [&](F f) { return Store(Number(f), &o, &O::set_beta1); }},
      {"beta2", [&](F f) { return Store(Number(f), &o, &O::set_beta2); }},
      {"epsilon", [&](F f) { return Store(Number(f), &o, &O::set_epsilon); }},
      {"weight_decay",
       [&](F f) { return Store(Number(f), &o, &O::set_weight_decay); }},
      {"adagrad_init",
       [&](F f) { return Store(Number(f), &o, &O::set_adagrad_init); }},
      {"lr_schedule",
       [&](F f) {
         return Store(Enum(f, ScheduleNames()), &o, &O::set_schedule);
       }},
      {"warmup_steps",
       [&](F f) { return Store(Int<uint64_t>(f), &o, &O::set_warmup_steps); }},
      {"step_size",
       [&](F f) { return Store(Int<uint64_t>(f), &o, &O::set_step_size); }},
      {"gamma", [&](F f) { return Store(Number(f), &o, &O::set_gamma); }},
      {"min_lr_ratio",
       [&](F f) { return Store(Number(f), &o, &O::set_min_lr_ratio); }},
      {"lr_scaling",
       [&](F f) {
         return Store(Enum(f, ScalingNames()), &o, &O::set_linear_scaling);
       }},
      {"reference_batch",
       [&](F f) {
         return Store(Int<uint64_t>(f), &o, &O::set_reference_batch);
       }},
      {"local_batch",
       [&](F f) { return Store(Int<int64_t>(f), &c.local_batch); }},
      {"grad_accum_steps",
       [&](F f) { return Store(Int<int64_t>(f), &c.grad_accum_steps); }},
      {"steps", [&](F f) { return Store(Int<int64_t>(f), &c.steps); }},
  };
  const Section model = {
      {"type", [&](F f) { return Store(Enum(f, ModelTypeNames()), &m.type); }},
      {"input_dim", [&](F f) { return Store(Int<int64_t>(f), &m.input_dim); }},
      {"num_classes",
       [&](F f) { return Store(Int<int64_t>(f), &m.num_classes); }},
      {"hidden",
       [&](F f) {
         return Store(List<int64_t>(f, [](F x) { return Int<int64_t>(x); }),
                      &m.hidden);
       }},
      {"activation",
       [&](F f) { return Store(Enum(f, ActivationNames()), &m.activation); }},
      {"classifier", [&](F f) { return Store(Bool(f), &m.classifier); }},
      {"seed", [&](F f) { return Store(Int<uint64_t>(f), &m.seed); }},
      {"init_value", [&](F f) { return Store(Number(f), &m.init_value); }},
  };
  const Section data = {
      {"source", [&](F f) { return Store(Enum(f, SourceNames()), &d.source); }},
      {"seed", [&](F f) { return Store(Int<uint64_t>(f), &d.seed); }},
      {"num_features",
       [&](F f) { return Store(Int<int64_t>(f), &d.num_features); }},
      {"num_classes",
       [&](F f) { return Store(Int<int64_t>(f), &d.num_classes); }},
      {"noise", [&](F f) { return Store(Number(f), &d.noise); }},
      {"test_examples",
       [&](F f) { return Store(Int<int64_t>(f), &d.test_examples); }},
      {"targets",
       [&](F f) {
         return Store(List<double>(f, Number), [&](std::vector<double> v) {
           d.targets.assign(v.begin(), v.end());
         });
       }},
      {"num_categorical",
       [&](F f) { return Store(Int<int64_t>(f), &d.num_categorical); }},
      {"categories",
       [&](F f) { return Store(Int<int64_t>(f), &d.categories); }},
      {"missing_rate", [&](F f) { return Store(Number(f), &d.missing_rate); }},
      {"path", [&](F f) { return Store(String(f), &d.path); }},
      {"dir", [&](F f) { return Store(String(f), &d.dir); }},
      {"label_column", [&](F f) { return Store(String(f), &d.label_column); }},
      {"test_fraction",
       [&](F f) { return Store(Number(f), &d.test_fraction); }},
      {"standardize", [&](F f) { return Store(Bool(f), &d.standardize); }},
  };
  const Section worker = {
      {"device",
       [&](F f) { return Store(Enum(f, DeviceNames()), &c.worker.device); }},
      {"compute_ms",
       [&](F f) { return Store(Number(f), &c.worker.compute_ms); }},
      {"straggler_rank",
       [&](F f) {
         return Store(Int<int64_t>(f, -1), &c.worker.straggler_rank);
       }},
      {"straggler_factor",
       [&](F f) { return Store(Number(f), &c.worker.straggler_factor); }},
  };
  const Section allreduce = {
      {"segment_bytes",
       [&](F f) { return Store(Int<int64_t>(f), &c.allreduce.segment_bytes); }},
      {"backend",
       [&](F f) {
         return Store(Enum(f, AllReduceBackendNames()), &c.allreduce.backend);
       }},
      {"timeout_s",
       [&](F f) { return Store(Positive(f), &c.allreduce.timeout_s); }},
  };
  const Section evaluation = {
      {"every_steps",
       [&](F f) { return Store(Int<int64_t>(f), &c.eval_every); }},
  };
  const Section server = {
      {"chunk_bytes",
       [&](F f) { return Store(Int<int64_t>(f), &c.chunk_bytes); }},
  };
  const Section network = {
      {"rpc_timeout_s",
       [&](F f) { return Store(Positive(f), &c.rpc_timeout_s); }},
      {"barrier_timeout_s",
       [&](F f) { return Store(Positive(f), &c.barrier_timeout_s); }},
      {"startup_timeout_s",
       [&](F f) { return Store(Positive(f), &c.startup_timeout_s); }},
      {"tls_cert", [&](F f) { return Store(String(f), &c.tls_cert); }},
      {"tls_key", [&](F f) { return Store(String(f), &c.tls_key); }},
      {"tls_ca", [&](F f) { return Store(String(f), &c.tls_ca); }},
      {"token_file", [&](F f) { return Store(String(f), &c.token_file); }},
  };
  auto section = [](const Section& keys) {
    return [&keys](F f) { return ReadSection(f, keys); };
  };
  const Section sections = {
      {"job", section(job)},
      {"training", section(training)},
      {"model", section(model)},
      {"data", section(data)},
      {"worker", section(worker)},
      {"allreduce", section(allreduce)},
      {"evaluation", section(evaluation)},
      {"server", section(server)},
      {"network", section(network)},
  };
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

// ---------------------------------------------------------------------------
// Emitting.

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

template <typename T>
void EmitEnum(YAML::Emitter& out, const char* key, const Names<T>& names,
              const T& value) {
  const std::string* name = NameOf(names, value);
  // An unknown value is written as is and rejected on the way back in.
  out << YAML::Key << key << YAML::Value
      << (name != nullptr ? *name : std::string("unspecified"));
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
  o.set_epsilon(1e-8);
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
  PS_RETURN_IF_ERROR(Positive("training.epsilon", o.epsilon()));
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
  PS_RETURN_IF_ERROR(Positive("network.rpc_timeout_s", c.rpc_timeout_s));
  PS_RETURN_IF_ERROR(
      Positive("network.barrier_timeout_s", c.barrier_timeout_s));
  PS_RETURN_IF_ERROR(
      Positive("network.startup_timeout_s", c.startup_timeout_s));
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return KeyError(c.tls_cert.empty() ? "network.tls_cert" : "network.tls_key",
                    "network.tls_cert and network.tls_key go together");
  }
  return absl::OkStatus();
}

std::string JobConfigToYaml(const JobConfig& c) {
  const OptimizerConfig& o = c.optimizer;
  const ModelConfig& m = c.model;
  const DataConfig& d = c.data;
  YAML::Emitter out;
  auto key = [&out](const char* name) -> YAML::Emitter& {
    return out << YAML::Key << name << YAML::Value;
  };
  auto section = [&](const char* name) { key(name) << YAML::BeginMap; };
  out << YAML::BeginMap;
  section("job");
  key("name") << c.name;
  key("workers") << c.workers;
  key("servers") << c.servers;
  out << YAML::EndMap;

  section("training");
  EmitEnum(out, "mode", ModeNames(), c.mode);
  if (c.staleness == -1) {
    key("staleness") << "inf";
  } else {
    key("staleness") << c.staleness;
  }
  key("backup_workers") << c.backup_workers;
  key("staleness_aware_lr") << c.staleness_aware_lr;
  key("dc_lambda") << FormatDouble(c.dc_lambda);
  EmitEnum(out, "optimizer", OptimizerNames(), o.kind());
  key("base_lr") << FormatDouble(o.base_lr());
  key("momentum") << FormatDouble(o.momentum());
  key("nesterov") << o.nesterov();
  key("beta1") << FormatDouble(o.beta1());
  key("beta2") << FormatDouble(o.beta2());
  key("epsilon") << FormatDouble(o.epsilon());
  key("weight_decay") << FormatDouble(o.weight_decay());
  key("adagrad_init") << FormatDouble(o.adagrad_init());
  EmitEnum(out, "lr_schedule", ScheduleNames(), o.schedule());
  key("warmup_steps") << o.warmup_steps();
  key("step_size") << o.step_size();
  key("gamma") << FormatDouble(o.gamma());
  key("min_lr_ratio") << FormatDouble(o.min_lr_ratio());
  EmitEnum(out, "lr_scaling", ScalingNames(), o.linear_scaling());
  key("reference_batch") << o.reference_batch();
  key("local_batch") << c.local_batch;
  key("grad_accum_steps") << c.grad_accum_steps;
  key("steps") << c.steps;
  out << YAML::EndMap;

  section("model");
  key("type") << m.type;
  key("input_dim") << m.input_dim;
  key("num_classes") << m.num_classes;
  key("hidden") << YAML::Flow << YAML::BeginSeq;
  for (int64_t width : m.hidden) out << width;
  out << YAML::EndSeq;
  key("activation") << m.activation;
  key("classifier") << m.classifier;
  key("seed") << m.seed;
  key("init_value") << FormatFloat(m.init_value);
  out << YAML::EndMap;

  section("data");
  key("source") << d.source;
  key("seed") << d.seed;
  key("num_features") << d.num_features;
  key("num_classes") << d.num_classes;
  key("noise") << FormatDouble(d.noise);
  key("test_examples") << d.test_examples;
  key("targets") << YAML::Flow << YAML::BeginSeq;
  for (float target : d.targets) out << FormatFloat(target);
  out << YAML::EndSeq;
  key("num_categorical") << d.num_categorical;
  key("categories") << d.categories;
  key("missing_rate") << FormatDouble(d.missing_rate);
  key("path") << d.path;
  key("dir") << d.dir;
  key("label_column") << d.label_column;
  key("test_fraction") << FormatDouble(d.test_fraction);
  key("standardize") << d.standardize;
  out << YAML::EndMap;

  section("worker");
  key("device") << c.worker.device;
  key("compute_ms") << FormatDouble(c.worker.compute_ms);
  key("straggler_rank") << c.worker.straggler_rank;
  key("straggler_factor") << FormatDouble(c.worker.straggler_factor);
  out << YAML::EndMap;

  section("allreduce");
  key("segment_bytes") << c.allreduce.segment_bytes;
  key("backend") << c.allreduce.backend;
  key("timeout_s") << FormatDouble(c.allreduce.timeout_s);
  out << YAML::EndMap;

  section("evaluation");
  key("every_steps") << c.eval_every;
  out << YAML::EndMap;

  section("server");
  key("chunk_bytes") << c.chunk_bytes;
  out << YAML::EndMap;

  section("network");
  key("rpc_timeout_s") << FormatDouble(c.rpc_timeout_s);
  key("barrier_timeout_s") << FormatDouble(c.barrier_timeout_s);
  key("startup_timeout_s") << FormatDouble(c.startup_timeout_s);
  key("tls_cert") << c.tls_cert;
  key("tls_key") << c.tls_key;
  key("tls_ca") << c.tls_ca;
  key("token_file") << c.token_file;
  out << YAML::EndMap;

  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace pstrain
