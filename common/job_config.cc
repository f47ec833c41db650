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
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/tcp_congestion.h"
#include "coordinator/failure_policy.h"
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

const Names<v1::TrainingConfig::AsyncLrPerPush>& AsyncLrNames() {
  static const auto* names = new Names<v1::TrainingConfig::AsyncLrPerPush>{
      {"full", v1::TrainingConfig::FULL},
      {"scaled", v1::TrainingConfig::SCALED}};
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

const Names<ModelConfig::ModelType>& ModelTypeNames() {
  static const auto* names =
      new Names<ModelConfig::ModelType>{{"scalar", ModelConfig::SCALAR},
                                        {"linear", ModelConfig::LINEAR},
                                        {"softmax", ModelConfig::SOFTMAX},
                                        {"mlp", ModelConfig::MLP},
                                        {"external", ModelConfig::EXTERNAL},
                                        {"wide_deep", ModelConfig::WIDE_DEEP}};
  return *names;
}

const Names<ModelConfig::Pooling>& PoolingNames() {
  static const auto* names = new Names<ModelConfig::Pooling>{
      {"sum", ModelConfig::SUM}, {"mean", ModelConfig::MEAN}};
  return *names;
}

const Names<ModelConfig::Activation>& ActivationNames() {
  static const auto* names =
      new Names<ModelConfig::Activation>{{"relu", ModelConfig::RELU},
                                         {"tanh", ModelConfig::TANH},
                                         {"gelu", ModelConfig::GELU}};
  return *names;
}

const Names<DataConfig::DataSource>& SourceNames() {
  static const auto* names = new Names<DataConfig::DataSource>{
      {"synthetic", DataConfig::SYNTHETIC},
      {"digits", DataConfig::DIGITS},
      {"breast_cancer", DataConfig::BREAST_CANCER},
      {"csv", DataConfig::CSV},
      {"libsvm", DataConfig::LIBSVM},
      {"criteo", DataConfig::CRITEO}};
  return *names;
}

const Names<AllReduceConfig::Backend>& AllReduceBackendNames() {
  static const auto* names = new Names<AllReduceConfig::Backend>{
      {"grpc", AllReduceConfig::GRPC}, {"nccl", AllReduceConfig::NCCL}};
  return *names;
}

const Names<AllReduceConfig::Sparse>& AllReduceSparseNames() {
  static const auto* names = new Names<AllReduceConfig::Sparse>{
      {"dense", AllReduceConfig::DENSE},
      {"allgather", AllReduceConfig::ALLGATHER}};
  return *names;
}

const Names<v1::DType>& WireDtypeNames() {
  static const auto* names = new Names<v1::DType>{{"fp32", v1::DTYPE_F32},
                                                  {"bf16", v1::DTYPE_BF16},
                                                  {"fp16", v1::DTYPE_F16}};
  return *names;
}

const Names<v1::ServerConfig::SparseOnFull>& SparseOnFullNames() {
  using S = v1::ServerConfig;
  static const auto* names =
      new Names<S::SparseOnFull>{{"evict", S::EVICT}, {"reject", S::REJECT}};
  return *names;
}

const Names<v1::TrainingConfig::OnFailure>& OnFailureNames() {
  using T = v1::TrainingConfig;
  static const auto* names = new Names<T::OnFailure>{
      {"fail", T::FAIL}, {"restart", T::RESTART}, {"elastic", T::ELASTIC}};
  return *names;
}

const Names<v1::TrainingConfig::Clock>& ClockNames() {
  using T = v1::TrainingConfig;
  static const auto* names = new Names<T::Clock>{{"worker", T::CLOCK_WORKER},
                                                 {"model", T::CLOCK_MODEL}};
  return *names;
}

const Names<WorkerConfig::Device>& DeviceNames() {
  static const auto* names =
      new Names<WorkerConfig::Device>{{"auto", WorkerConfig::AUTO},
                                      {"cpu", WorkerConfig::CPU},
                                      {"cuda", WorkerConfig::CUDA}};
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

template <typename T>
const std::string& NameOrUnspecified(const Names<T>& names, const T& value) {
  static const auto* unspecified = new std::string("unspecified");
  const std::string* name = NameOf(names, value);
  return name != nullptr ? *name : *unspecified;
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

// A string without control characters: names and paths have none, and
// one such as a trailing carriage return (a file saved with CRLF line ends
// and no final newline) would not survive JobConfigToYaml's round trip.
absl::StatusOr<std::string> String(const Field& f) {
  PS_ASSIGN_OR_RETURN(std::string s, Scalar(f, "a string"));
  const auto bad = std::find_if(s.begin(), s.end(), [](char c) {
    return absl::ascii_iscntrl(static_cast<unsigned char>(c));
  });
  if (bad != s.end()) {
    return f.Error(absl::StrFormat(
        "expected a string without control characters, got byte 0x%02x at "
        "position %d",
        static_cast<unsigned char>(*bad), bad - s.begin()));
  }
  return s;
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
// The key table: one row per YAML key drives parsing, emission,
// `section.key=value` overrides and the reference (docs/configuration.md). A
// row pairs a codec (YAML value <-> T) with where the value lives in
// JobConfig and what the key means.

template <typename T>
struct Codec {
  using value_type = T;
  std::function<absl::StatusOr<T>(const Field&)> parse;
  std::function<void(YAML::Emitter&, const T&)> emit;
  std::string type;  // what `parse` accepts, for the reference (Markdown)
};

struct Key {
  std::string section;
  std::string name;
  std::string type;           // the codec's
  std::string default_value;  // as emitted; "" when unset (ConfigKeyDoc)
  std::string description;    // one line of Markdown
  std::function<absl::Status(const Field&, JobConfig&)> parse;
  // Writes "name: value" (or nothing, for an optional key left unset).
  std::function<void(const JobConfig&, YAML::Emitter&)> emit;
  // Stores the key's default (DefaultJobConfig).
  std::function<void(JobConfig&)> set_default;
};

template <typename T>
Codec<T> IntCodec(int64_t min = 0) {
  return {[min](const Field& f) { return Int<T>(f, min); },
          [](YAML::Emitter& out, const T& v) { out << v; },
          absl::StrCat("integer >= ", min)};
}

Codec<double> NumberCodec() {
  return {Number,
          [](YAML::Emitter& out, const double& v) { out << FormatDouble(v); },
          "number"};
}

Codec<double> PositiveCodec() {
  return {static_cast<absl::StatusOr<double> (*)(const Field&)>(Positive),
          [](YAML::Emitter& out, const double& v) { out << FormatDouble(v); },
          "number > 0"};
}

Codec<float> FloatCodec() {
  return {[](const Field& f) -> absl::StatusOr<float> {
            PS_ASSIGN_OR_RETURN(double v, Number(f));
            return static_cast<float>(v);
          },
          [](YAML::Emitter& out, const float& v) { out << FormatFloat(v); },
          "number"};
}

Codec<bool> BoolCodec() {
  return {Bool, [](YAML::Emitter& out, const bool& v) { out << v; },
          "`true` or `false`"};
}

Codec<std::string> StringCodec() {
  return {String, [](YAML::Emitter& out, const std::string& v) { out << v; },
          "string"};
}

template <typename T>
Codec<T> EnumCodec(const Names<T>& names) {
  return {[&names](const Field& f) { return Enum(f, names); },
          [&names](YAML::Emitter& out, const T& v) {
            // An unknown value is written as is and rejected on the way in.
            out << NameOrUnspecified(names, v);
          },
          absl::StrJoin(names, ", ", [](std::string* out, const auto& entry) {
            absl::StrAppend(out, "`", entry.first, "`");
          })};
}

Codec<int64_t> StalenessCodec() {
  return {Staleness,
          [](YAML::Emitter& out, const int64_t& v) {
            if (v == -1) {
              out << "inf";
            } else {
              out << v;
            }
          },
          "integer >= 0 or `inf`"};
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
          },
          "list of integers >= 0"};
}

Codec<std::vector<std::string>> StringListCodec() {
  return {[](const Field& f) { return List<std::string>(f, String); },
          [](YAML::Emitter& out, const std::vector<std::string>& v) {
            out << YAML::Flow << YAML::BeginSeq;
            for (const std::string& x : v) out << x;
            out << YAML::EndSeq;
          },
          "list of strings"};
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
          },
          "list of numbers"};
}

// A row: the key's default, `get` reads the value from a config, `set`
// stores a parsed one, `description` says what the key does (one line of
// Markdown for docs/configuration.md: its meaning, and the checks
// ValidateJobConfig adds to the codec's).
template <typename T, typename Get, typename Set>
Key Row(const char* section, const char* name, Codec<T> codec,
        const typename Codec<T>::value_type& default_value, Get get, Set set,
        const char* description) {
  YAML::Emitter default_yaml;
  codec.emit(default_yaml, default_value);
  Key key{section,     name,    codec.type, default_yaml.c_str(),
          description, nullptr, nullptr,    nullptr};
  key.set_default = [default_value, set](JobConfig& c) {
    set(c, T(default_value));
  };
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

// get/set pairs for Row: field `field` of section message `section`, a
// repeated one, or a training.optimizer field.
#define PS_FIELD(section, field)                          \
  [](const JobConfig& c) { return c.section().field(); }, \
      [](JobConfig& c, auto v) {                          \
        c.mutable_##section()->set_##field(std::move(v)); \
      }
#define PS_LIST(section, field)                                           \
  [](const JobConfig& c) {                                                \
    const auto& f = c.section().field();                                  \
    return std::vector<std::decay_t<decltype(f[0])>>(f.begin(), f.end()); \
  },                                                                      \
      [](JobConfig& c, auto v) {                                          \
        auto* f = c.mutable_##section()->mutable_##field();               \
        f->Clear();                                                       \
        f->Add(v.begin(), v.end());                                       \
      }
#define PS_OPTIMIZER(field)                                            \
  [](const JobConfig& c) { return c.training().optimizer().field(); }, \
      [](JobConfig& c, auto v) {                                       \
        c.mutable_training()->mutable_optimizer()->set_##field(v);     \
      }

// Every key, in the order JobConfigToYaml writes them, with its default and
// what it means. Adding a key: a field in pstrain.v1.JobConfig
// (proto/pstrain.proto), a row here, its check in ValidateJobConfig, then
// regenerate docs/configuration.md (see CONTRIBUTING.md).
const std::vector<Key>& KeyTable() {
  using OC = OptimizerConfig;
  static const auto* table = new std::vector<Key>{
      Row("job", "name", StringCodec(), "pstrain", PS_FIELD(job, name),
          "Names the job in logs, errors, `summary.json` and checkpoints."),
      Row("job", "workers", IntCodec<int32_t>(), 2, PS_FIELD(job, workers),
          "Number of workers N; >= 1."),
      Row("job", "servers", IntCodec<int32_t>(), 2, PS_FIELD(job, servers),
          "Number of server shards K; >= 1 (mode `allreduce` starts none)."),

      Row("training", "mode", EnumCodec(ModeNames()), v1::MODE_SYNC,
          PS_FIELD(training, mode),
          "`sync`: parameter servers, every step waits for every worker "
          "(BSP); `async`: parameter servers, pushes applied as they arrive "
          "within `training.staleness` (SSP); `allreduce`: a ring among the "
          "workers, no servers ([architecture](architecture.md))."),
      Row("training", "staleness", StalenessCodec(), 0,
          PS_FIELD(training, staleness),
          "Mode `async`: the SSP bound s in clocks: a pull at clock c waits "
          "until the slowest worker has pushed clock c - s; `0` is "
          "lock-step, `inf` never waits."),
      Row("training", "backup_workers", IntCodec<int64_t>(), 0,
          PS_FIELD(training, backup_workers),
          "Mode `sync` only: each step is applied with the first N - b "
          "gradients and late ones are dropped (Chen et al. 2016); below "
          "`job.workers`."),
      Row("training", "staleness_aware_lr", BoolCodec(), false,
          PS_FIELD(training, staleness_aware_lr),
          "Mode `async` only: a push of staleness tau is applied with "
          "learning rate lr / max(tau, 1) (Zhang et al. 2016)."),
      Row("training", "async_lr_per_push", EnumCodec(AsyncLrNames()),
          v1::TrainingConfig::FULL, PS_FIELD(training, async_lr_per_push),
          "Mode `async`: the learning rate of each push. `full`: the "
          "scheduled rate, so N workers make N updates per clock where sync "
          "makes one; `scaled`: the rate / `job.workers`, sync's learning "
          "rate per sample ([studies](studies.md#update-count-control)); "
          "`scaled` needs mode async."),
      Row("training", "clock", EnumCodec(ClockNames()),
          v1::TrainingConfig::CLOCK_WORKER, PS_FIELD(training, clock),
          "What a step is. `worker`: each worker's own clock (every worker "
          "trains `steps` steps; a `metrics.csv` row is a step every worker "
          "reported). `model` (mode `async`): the servers' clock, N pushes "
          "= one model step; workers train until the servers took N x "
          "`steps` pushes, as many steps each as its speed allows, and rows "
          "and the learning-rate schedule follow the model "
          "([studies](studies.md#model-clock)). Sync and all-reduce rows "
          "follow the model either way. `model` in async needs "
          "`training.on_failure: fail`, no checkpoints, no "
          "`worker.overlap`, no row-sparse table and C++ workers."),
      Row("training", "dc_lambda", NumberCodec(), 0,
          PS_FIELD(training, dc_lambda),
          "Mode `async` only: DC-ASGD delay compensation lambda >= 0, the "
          "gradient applied as g + lambda * g * g * (w_now - w_read) (Zheng "
          "et al. 2017); 0: off."),
      Row("training", "fail_on_divergence", BoolCodec(), true,
          PS_FIELD(training, fail_on_divergence),
          "A NaN or infinite loss fails the job; `false`: the job goes on "
          "and `summary.json` says `diverged`."),
      Row("training", "on_failure", EnumCodec(OnFailureNames()),
          v1::TrainingConfig::FAIL, PS_FIELD(training, on_failure),
          "What a dead process (silent for `network.lease_s`) does to the "
          "job: `fail` ends it at once; `restart` waits for a replacement "
          "and rolls every shard and worker back to the last checkpoint "
          "(async: the last clock cut; allreduce: every rank reloads rank "
          "0's last checkpoint and the ring re-forms); `elastic` (workers; "
          "a dead server fails the job) goes on with the live workers: in "
          "sync a live worker takes the dead rank over (global batch kept), "
          "in async the rank's micro-batches are skipped, in allreduce a "
          "live worker hosts the rank and every rank rolls back to the last "
          "checkpoint. `restart` and `elastic` in mode allreduce need "
          "`allreduce.backend: grpc`; `elastic` in mode sync needs "
          "`backup_workers: 0` ([failures and "
          "recovery](failures-and-recovery.md))."),
      Row("training", "restart_timeout_s", PositiveCodec(), 60,
          PS_FIELD(training, restart_timeout_s),
          "`restart`: the longest wait in seconds for a dead process's "
          "replacement (registered, and for a server ready) before the job "
          "fails; `elastic` in mode allreduce: the same for the member that "
          "hosts a lost rank (or a new worker)."),
      Row("training", "max_restarts", IntCodec<int64_t>(), 3,
          PS_FIELD(training, max_restarts),
          "`restart`: the failures the job survives in all (each a "
          "replacement and a rollback); one more fails it. `elastic`: how "
          "many times `psctl run` starts a dead worker again to rejoin its "
          "rank; after that the job goes on without it."),
      Row("training", "min_workers", IntCodec<int64_t>(), 1,
          PS_FIELD(training, min_workers),
          "`on_failure: elastic`: the job fails once fewer workers than this "
          "are alive; in [1, `job.workers`]."),
      Row("training", "optimizer", EnumCodec(OptimizerNames()), OC::SGD,
          PS_OPTIMIZER(kind),
          "The update rule (the servers', or every replica's in mode "
          "allreduce: the same code)."),
      Row("training", "base_lr", PositiveCodec(), 0.1, PS_OPTIMIZER(base_lr),
          "Base learning rate, before warm-up, schedule and `lr_scaling`."),
      Row("training", "momentum", NumberCodec(), 0.9, PS_OPTIMIZER(momentum),
          "`momentum`: the momentum coefficient; in [0, 1)."),
      Row("training", "nesterov", BoolCodec(), false, PS_OPTIMIZER(nesterov),
          "`momentum`: Nesterov's variant."),
      Row("training", "beta1", NumberCodec(), 0.9, PS_OPTIMIZER(beta1),
          "`adam`, `adamw`: decay of the first moment; in [0, 1)."),
      Row("training", "beta2", NumberCodec(), 0.999, PS_OPTIMIZER(beta2),
          "`adam`, `adamw`: decay of the second moment; in [0, 1)."),
      // Optional: unset (0) means the optimizer's default, 1e-8 (AdaGrad
      // 1e-10); an explicit value must be > 0.
      [] {
        Key key = Row("training", "epsilon", PositiveCodec(), 0,
                      PS_OPTIMIZER(epsilon),
                      "`adam`, `adamw`, `adagrad`: the epsilon of the "
                      "denominator; leave the key out for the optimizer's "
                      "default (1e-8; AdaGrad 1e-10), or give a value > 0.");
        key.default_value.clear();
        auto emit = key.emit;
        key.emit = [emit](const JobConfig& c, YAML::Emitter& out) {
          if (c.training().optimizer().epsilon() != 0) emit(c, out);
        };
        return key;
      }(),
      Row("training", "weight_decay", NumberCodec(), 0,
          PS_OPTIMIZER(weight_decay),
          "Weight decay >= 0: an L2 term in the gradient (`sgd`, `momentum`, "
          "`adam`, `adagrad`) or decoupled (`adamw`)."),
      Row("training", "adagrad_init", NumberCodec(), 0.1,
          PS_OPTIMIZER(adagrad_init),
          "`adagrad`: the accumulator's initial value; >= 0."),
      Row("training", "lr_schedule", EnumCodec(ScheduleNames()), OC::CONSTANT,
          PS_OPTIMIZER(schedule),
          "`constant`; `step`: lr times `gamma` every `step_size` steps; "
          "`cosine`: cosine decay to `min_lr_ratio` times lr over "
          "`training.steps`."),
      Row("training", "warmup_steps", IntCodec<uint64_t>(), 0,
          PS_OPTIMIZER(warmup_steps),
          "Steps of linear warm-up from 0 to the learning rate, before the "
          "schedule; with `cosine`, below `training.steps`."),
      Row("training", "step_size", IntCodec<uint64_t>(), 0,
          PS_OPTIMIZER(step_size),
          "`lr_schedule: step`: steps between decays; >= 1 with that "
          "schedule."),
      Row("training", "gamma", NumberCodec(), 0.1, PS_OPTIMIZER(gamma),
          "`lr_schedule: step`: the factor applied every `step_size` steps; "
          "> 0 with that schedule."),
      Row("training", "min_lr_ratio", NumberCodec(), 0,
          PS_OPTIMIZER(min_lr_ratio),
          "`lr_schedule: cosine`: the final learning rate as a fraction of "
          "the base; in [0, 1]."),
      Row("training", "lr_scaling", EnumCodec(ScalingNames()), false,
          PS_OPTIMIZER(linear_scaling),
          "`linear`: lr = `base_lr` times the global batch / "
          "`reference_batch`; `none`: `base_lr` as is."),
      Row("training", "reference_batch", IntCodec<uint64_t>(), 256,
          PS_OPTIMIZER(reference_batch),
          "`lr_scaling: linear`: the batch `base_lr` is meant for; >= 1 with "
          "it."),
      Row("training", "local_batch", IntCodec<int64_t>(), 32,
          PS_FIELD(training, local_batch),
          "Examples per worker per micro-batch; >= 1."),
      Row("training", "grad_accum_steps", IntCodec<int64_t>(), 1,
          PS_FIELD(training, grad_accum_steps),
          "Micro-batches a worker accumulates per step; the global batch is "
          "`local_batch` times `job.workers` times this; >= 1."),
      Row("training", "steps", IntCodec<int64_t>(), 200,
          PS_FIELD(training, steps),
          "Training steps (clocks) of every worker; >= 1."),

      Row("model", "type", EnumCodec(ModelTypeNames()), ModelConfig::MLP,
          PS_FIELD(model, type),
          "`scalar`: one weight w, loss (w - y)^2 on `data.targets`; "
          "`linear`: linear regression (squared error); `softmax`: softmax "
          "regression; `mlp`: a multi-layer perceptron of `hidden` widths; "
          "`wide_deep`: hashed embeddings of categorical columns and a "
          "bottom MLP over the numeric ones, into a top MLP of `hidden` "
          "widths ([sparse model](sparse-model.md)); "
          "`external`: the tensors listed in `tensors`, trained by Python "
          "workers (docs/python.md)."),
      Row("model", "input_dim", IntCodec<int64_t>(), 32,
          PS_FIELD(model, input_dim),
          "Input width; >= 1 (except `scalar`); synthetic data: equal to "
          "`data.num_features` (file data: checked when loaded)."),
      Row("model", "num_classes", IntCodec<int64_t>(), 4,
          PS_FIELD(model, num_classes),
          "Output width (1: regression); >= 1, and >= 2 for a classifier "
          "(`softmax`, or `mlp` with `classifier`); synthetic data: equal to "
          "`data.num_classes`."),
      Row("model", "hidden", IntListCodec(), {64}, PS_LIST(model, hidden),
          "`mlp`: the widths of the hidden layers, each >= 1."),
      Row("model", "tensors", StringListCodec(), {}, PS_LIST(model, tensors),
          "`external`: the model's tensors, `NAME:D0xD1x...[:INIT]` each "
          "(INIT `zeros`, `constant(V)`, `uniform(S)` or `normal(S)`; by "
          "default Glorot uniform for rank >= 2, zeros for rank 1); Python "
          "workers check their parameters against them (docs/python.md)."),
      Row("model", "activation", EnumCodec(ActivationNames()),
          ModelConfig::RELU, PS_FIELD(model, activation),
          "`mlp`: the hidden layers' activation."),
      Row("model", "classifier", BoolCodec(), true, PS_FIELD(model, classifier),
          "A softmax cross-entropy head; `false`: squared error."),
      Row("model", "seed", IntCodec<uint64_t>(), 1, PS_FIELD(model, seed),
          "Seed of the initial weights."),
      Row("model", "init_value", FloatCodec(), 0, PS_FIELD(model, init_value),
          "`scalar`: the initial w."),
      Row("model", "sparse_columns", IntCodec<int64_t>(), 0,
          PS_FIELD(model, sparse_columns),
          "`wide_deep`: categorical columns per example; >= 1 with it; "
          "equal to `data.sparse_columns` (synthetic) or 26 (`criteo`)."),
      Row("model", "buckets", IntCodec<int64_t>(), 1000000,
          PS_FIELD(model, buckets),
          "`wide_deep`: rows of the hashed embedding table (the hashing "
          "trick: a value's row is a hash of column, value and hash number, "
          "modulo this); >= 1."),
      Row("model", "embedding_dim", IntCodec<int64_t>(), 16,
          PS_FIELD(model, embedding_dim),
          "`wide_deep`: width of each embedding row; >= 1."),
      Row("model", "hashes", IntCodec<int64_t>(), 1, PS_FIELD(model, hashes),
          "`wide_deep`: rows per categorical value (independent hashes), "
          "pooled; >= 1 (2 or more soften collisions)."),
      Row("model", "pooling", EnumCodec(PoolingNames()), ModelConfig::SUM,
          PS_FIELD(model, pooling),
          "`wide_deep`: how a value's `hashes` rows combine: `sum` or "
          "`mean`."),
      Row("model", "bottom_hidden", IntListCodec(), {},
          PS_LIST(model, bottom_hidden),
          "`wide_deep`: hidden widths of the MLP over the numeric columns "
          "(`[]`: they enter the top MLP as they are), each >= 1."),

      Row("data", "source", EnumCodec(SourceNames()), DataConfig::SYNTHETIC,
          PS_FIELD(data, source),
          "`synthetic`: generated from `data.seed`; `digits`, "
          "`breast_cancer`: the built-in data sets (in `data.dir`); `csv`, "
          "`libsvm`, `criteo` (the Criteo display-ads TSV layout, "
          "`model.type: wide_deep`): the file `data.path`."),
      Row("data", "seed", IntCodec<uint64_t>(), 7, PS_FIELD(data, seed),
          "Seed of the synthetic task and examples, the train/test split "
          "and the shuffling."),
      Row("data", "num_features", IntCodec<int64_t>(), 32,
          PS_FIELD(data, num_features),
          "Synthetic: input features; equal to `model.input_dim`; at least "
          "`num_categorical` x (`categories`, + 1 with `missing_rate` > 0)."),
      Row("data", "num_classes", IntCodec<int64_t>(), 4,
          PS_FIELD(data, num_classes),
          "Synthetic: classes (1: regression); >= 1; equal to "
          "`model.num_classes`."),
      Row("data", "noise", NumberCodec(), 0.1, PS_FIELD(data, noise),
          "Synthetic: the share of labels drawn at random (classes: at most "
          "1), or the scale of the target noise (regression); >= 0."),
      Row("data", "test_examples", IntCodec<int64_t>(), 2000,
          PS_FIELD(data, test_examples),
          "Synthetic: held-out examples, split over the workers for "
          "evaluation."),
      Row("data", "targets", FloatListCodec(), {}, PS_LIST(data, targets),
          "`model.type: scalar`: the targets, cycled through by example id; "
          "finite, not empty for that model and empty for the others."),
      Row("data", "num_categorical", IntCodec<int64_t>(), 0,
          PS_FIELD(data, num_categorical),
          "Synthetic: how many of the `num_features` columns are "
          "categorical (one-hot encoded); at most `num_features`."),
      Row("data", "categories", IntCodec<int64_t>(), 4,
          PS_FIELD(data, categories),
          "Synthetic: the one-hot slots of each categorical column; >= 2."),
      Row("data", "missing_rate", NumberCodec(), 0,
          PS_FIELD(data, missing_rate),
          "Synthetic: the share of missing values (each 0 plus a "
          "missing-indicator feature); in [0, 1)."),
      Row("data", "sparse_columns", IntCodec<int64_t>(), 0,
          PS_FIELD(data, sparse_columns),
          "Synthetic: high-cardinality categorical columns, given to the "
          "model as raw ids (`model.type: wide_deep`, or `external`: Python "
          "workers read them through `ps_report data-export`); >= 0."),
      Row("data", "sparse_cardinality", IntCodec<int64_t>(), 100000,
          PS_FIELD(data, sparse_cardinality),
          "Synthetic: distinct values of each sparse column; >= 2."),
      Row("data", "zipf_exponent", NumberCodec(), 1.1,
          PS_FIELD(data, zipf_exponent),
          "Synthetic: sparse values follow a Zipf law, P(rank r) ~ 1 / r^s "
          "with this s (a few hot values, a long tail); > 0."),
      Row("data", "path", StringCodec(), "", PS_FIELD(data, path),
          "The `csv`, `libsvm` or `criteo` file (required with them); with "
          "`digits` or `breast_cancer`, a file instead of the built-in "
          "one."),
      Row("data", "dir", StringCodec(), ".cache/pstrain/datasets",
          PS_FIELD(data, dir),
          "Where the built-in data sets are (`./psctl setup` puts "
          "`digits.csv` and `breast_cancer.csv` there)."),
      Row("data", "label_column", StringCodec(), "label",
          PS_FIELD(data, label_column),
          "`csv`: the header of the label column."),
      Row("data", "test_fraction", NumberCodec(), 0.2,
          PS_FIELD(data, test_fraction),
          "File data: the share held out for evaluation (a seeded split); "
          "in [0, 1)."),
      Row("data", "standardize", BoolCodec(), true, PS_FIELD(data, standardize),
          "File data: z-score every feature with the training split's "
          "statistics."),

      Row("worker", "device", EnumCodec(DeviceNames()), WorkerConfig::AUTO,
          PS_FIELD(worker, device),
          "Where a worker computes: `auto` (the GPU when one is visible), "
          "`cpu` or `cuda`; `ps_worker --device` overrides, `--cuda_device "
          "N` / `--local_rank R` pick the GPU ([GPU](gpu.md))."),
      Row("worker", "compute_ms", NumberCodec(), 0,
          PS_FIELD(worker, compute_ms),
          "Emulated compute: each step's gradient computation takes at "
          "least this many milliseconds (the math still runs); 0: off; "
          ">= 0."),
      Row("worker", "straggler_rank", IntCodec<int64_t>(-1), -1,
          PS_FIELD(worker, straggler_rank),
          "One slow worker: this rank's compute takes `straggler_factor` "
          "times as long; -1: none, else below `job.workers`."),
      Row("worker", "straggler_factor", NumberCodec(), 1,
          PS_FIELD(worker, straggler_factor),
          "The straggler's slow-down; >= 1."),
      Row("worker", "transient_straggler_p", NumberCodec(), 0,
          PS_FIELD(worker, transient_straggler_p),
          "Transient stragglers: on each step each worker is slowed with "
          "this probability, in [0, 1]; 0: off "
          "([studies](studies.md#straggler-models))."),
      Row("worker", "transient_straggler_factor", NumberCodec(), 2,
          PS_FIELD(worker, transient_straggler_factor),
          "A transient slow-down's minimum factor, >= 1: the factor is drawn "
          "from a Pareto law of shape 2 (median 1.41x, mean 2x this), capped "
          "at 10x this, seeded by `data.seed`, rank and step."),
      Row("worker", "pause_rank", IntCodec<int64_t>(-1), -1,
          PS_FIELD(worker, pause_rank),
          "A one-time pause: this rank sleeps `pause_s` seconds once, after "
          "its compute of step `pause_at_step`; -1: none, else below "
          "`job.workers`."),
      Row("worker", "pause_at_step", IntCodec<int64_t>(), 0,
          PS_FIELD(worker, pause_at_step),
          "The step of the pause; in [0, `training.steps`)."),
      Row("worker", "pause_s", NumberCodec(), 0, PS_FIELD(worker, pause_s),
          "The pause in seconds: > 0 with `pause_rank` set, and below "
          "`network.barrier_timeout_s` (the other workers may wait it out)."),
      Row("worker", "overlap", BoolCodec(), false, PS_FIELD(worker, overlap),
          "Modes `sync` and `async` with `compute_ms`: overlap "
          "communication and compute layer by layer ([architecture]"
          "(architecture.md#worker-overlap-chunk-by-chunk)); the same "
          "values, other timing; ignored in mode `allreduce`."),

      Row("allreduce", "segment_bytes", IntCodec<int64_t>(), 1 << 20,
          PS_FIELD(allreduce, segment_bytes),
          "Bytes per ring segment: a multiple of 4 in [4096, 4 MiB]."),
      Row("allreduce", "backend", EnumCodec(AllReduceBackendNames()),
          AllReduceConfig::GRPC, PS_FIELD(allreduce, backend),
          "`grpc`: the ring over gRPC streams; `nccl`: NCCL (every worker on "
          "a GPU)."),
      Row("allreduce", "timeout_s", PositiveCodec(), 60,
          PS_FIELD(allreduce, timeout_s),
          "The longest wait of any ring step, in seconds."),
      Row("allreduce", "sparse", EnumCodec(AllReduceSparseNames()),
          AllReduceConfig::DENSE, PS_FIELD(allreduce, sparse),
          "Row-sparse tables (`model.type: wide_deep`) in mode `allreduce`: "
          "`dense` all-reduces each table's whole [rows, dim] gradient every "
          "step (what plain data parallelism does); `allgather` sends each "
          "worker's unique row ids and their gradient rows to every worker "
          "over the ring ([sparse](sparse.md#parameter-server-vs-all-reduce-"
          "on-the-sparse-model)). Needs `allreduce.backend: grpc`; "
          "`allgather` needs a model with a row-sparse table and "
          "`network.wire_dtype: fp32`. Ignored in modes `sync` and `async`."),

      Row("evaluation", "every_steps", IntCodec<int64_t>(), 0,
          PS_FIELD(evaluation, every_steps),
          "Evaluate on the held-out examples every k steps; 0: only at the "
          "end."),

      Row("server", "chunk_bytes", IntCodec<int64_t>(), 0,
          PS_FIELD(server, chunk_bytes),
          "Bytes per chunk, the unit tensors are sharded, pushed and pulled "
          "in: 0 (automatic: about eight chunks per shard, at most 1 MiB) or a "
          "multiple of 4 in [64, 4 MiB]."),
      Row("server", "sparse_max_rows", IntCodec<int64_t>(), 0,
          PS_FIELD(server, sparse_max_rows),
          "Row-sparse tensors: rows of each table one shard stores at most "
          "(about rows * (dim * 4 * (1 + optimizer slots) + 96) bytes); 0: "
          "no bound ([sparse](sparse.md#memory-bound))."),
      Row("server", "sparse_on_full", EnumCodec(SparseOnFullNames()),
          v1::ServerConfig::EVICT, PS_FIELD(server, sparse_on_full),
          "At `sparse_max_rows`: `evict` drops the least recently used rows "
          "(they read as initial values again), `reject` refuses the push "
          "naming the tensor."),

      Row("checkpoint", "dir", StringCodec(), "", PS_FIELD(checkpoint, dir),
          "Where checkpoints go; \"\": the coordinator's `--out`/ckpt "
          "([checkpoints](checkpoints.md))."),
      Row("checkpoint", "every_steps", IntCodec<int64_t>(), 0,
          PS_FIELD(checkpoint, every_steps),
          "A checkpoint every k steps (async: a consistent clock cut; "
          "allreduce: rank 0 writes its replica), plus one at the end; 0: "
          "off."),
      Row("checkpoint", "every_seconds", NumberCodec(), 0,
          PS_FIELD(checkpoint, every_seconds),
          "A checkpoint once this many seconds passed since the last one "
          "(sync, allreduce: at the end of the next step; async: at the next "
          "clock the shards can reach), plus one at the end; 0: off; >= 0."),
      Row("checkpoint", "keep", IntCodec<int64_t>(), 0,
          PS_FIELD(checkpoint, keep),
          "Keep the newest k complete checkpoints; 0: all."),

      Row("network", "rpc_timeout_s", PositiveCodec(), 30,
          PS_FIELD(network, rpc_timeout_s),
          "The deadline of every call and push, in seconds."),
      Row("network", "barrier_timeout_s", PositiveCodec(), 300,
          PS_FIELD(network, barrier_timeout_s),
          "The longest a pull may take, barrier wait included, in seconds "
          "(the coordinator hands it to servers and workers; no per-binary "
          "flag); until every worker has completed a step, "
          "`startup_timeout_s` more."),
      Row("network", "startup_timeout_s", PositiveCodec(), 60,
          PS_FIELD(network, startup_timeout_s),
          "The coordinator fails the job if not every server and worker has "
          "registered within this many seconds (binaries also take "
          "`--startup_timeout_s`)."),
      Row("network", "lease_s", PositiveCodec(), 5, PS_FIELD(network, lease_s),
          "A server or worker silent this many seconds is dead; the "
          "coordinator silent this long ends every server and worker "
          "([failures and recovery](failures-and-recovery.md))."),
      Row("network", "wire_dtype", EnumCodec(WireDtypeNames()), v1::DTYPE_F32,
          PS_FIELD(network, wire_dtype),
          "Gradients (push) and weights (pull) between workers and servers, "
          "rounded to nearest even; servers keep fp32 weights and optimizer "
          "state; `fp16` saturates beyond +-65504. Mode allreduce: `fp32`, "
          "or `bf16` with `allreduce.backend: grpc` (segments in bf16, sums "
          "in fp32) ([low-precision "
          "wire](architecture.md#low-precision-wire))."),
      Row("network", "push_streams", IntCodec<int32_t>(), 0,
          PS_FIELD(network, push_streams),
          "Streams (each its own connection) a worker splits each shard's "
          "push over: 1 to 8, or 0: 1 (one stream per shard); more than 1 "
          "only in mode sync without backup workers ([one push over several "
          "streams](architecture.md#one-push-over-several-streams))."),
      Row("network", "pull_streams", IntCodec<int32_t>(), 0,
          PS_FIELD(network, pull_streams),
          "Streams (the push's connections) a worker splits each shard's "
          "pull over, each part reading the weights on its own: 1 to 8; 0 "
          "is 1 (measured slower in real jobs on 2 cores); more than 1 only "
          "in mode sync without backup workers ([one pull over several "
          "streams](architecture.md#one-pull-over-several-streams))."),
      Row("network", "tcp_congestion_control", StringCodec(), "",
          PS_FIELD(network, tcp_congestion_control),
          "TCP congestion control of the connections every server accepts, "
          "so of the pulls it sends, e.g. `cubic`; empty: the host's "
          "(`net.ipv4.tcp_congestion_control`). Each server reads it from "
          "its `--config` and fails to start when the kernel refuses it; "
          "`ps_worker --check_config` (run by `psctl run` first) tries it on "
          "its host. A host on `bbr` paces every connection, loopback too: "
          "real same-host jobs pulled 1.2-1.4x faster with `cubic` ([the "
          "servers' congestion "
          "control](performance-log.md#the-servers-tcp-congestion-control-a-"
          "job-key-2026-12-06))."),
      Row("network", "tls_cert", StringCodec(), "", PS_FIELD(network, tls_cert),
          "PEM certificate of every gRPC server (with `tls_key`): TLS on "
          "every connection; `--tls_cert` overrides."),
      Row("network", "tls_key", StringCodec(), "", PS_FIELD(network, tls_key),
          "PEM private key of `tls_cert` (the two go together); `--tls_key` "
          "overrides."),
      Row("network", "tls_ca", StringCodec(), "", PS_FIELD(network, tls_ca),
          "PEM CA that clients check servers with; on servers, mutual TLS; "
          "`--tls_ca` overrides."),
      Row("network", "token_file", StringCodec(), "",
          PS_FIELD(network, token_file),
          "The job token file: every call carries it, every service "
          "requires it; `--token_file` overrides; `psctl run` makes one per "
          "job ([security](security.md))."),

      Row("security", "insecure", BoolCodec(), false,
          PS_FIELD(security, insecure),
          "`false`: a process started without a job token (`--token_file` "
          "or `network.token_file`) refuses to start; `true`: it starts, "
          "checks no token and logs a warning (a process given a token "
          "checks it either way; [security](security.md))."),
  };
  return *table;
}

#undef PS_FIELD
#undef PS_LIST
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

// network.push_streams and pull_streams: 0..kMaxPushStreamsConfig, and
// more than 1 only where `split_ok` (else `why`).
absl::Status StreamsKey(const std::string& key, int64_t value, bool split_ok,
                        const char* why) {
  PS_RETURN_IF_ERROR(AtLeast(key, value, 0));
  if (value > kMaxPushStreamsConfig) {
    return KeyError(key, absl::StrCat("must be <= ", kMaxPushStreamsConfig,
                                      ", got ", value));
  }
  if (value > 1 && !split_ok) return KeyError(key, why);
  return absl::OkStatus();
}

// A kernel congestion control's name ("" is the host's): at most
// kMaxTcpCongestionControlName letters, digits, '_', '-' or '.'. Whether
// a host has it is CheckCongestionControl's (common/tcp_congestion.h).
absl::Status CongestionControlName(const std::string& key,
                                   const std::string& name) {
  if (name.size() > kMaxTcpCongestionControlName) {
    return KeyError(key,
                    absl::StrCat("'", name, "' is longer than ",
                                 kMaxTcpCongestionControlName, " characters"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '-' && c != '.') {
      return KeyError(key, absl::StrCat("'", name,
                                        "' is not a congestion control's name "
                                        "(letters, digits, '_', '-', '.'), "
                                        "e.g. cubic"));
    }
  }
  return absl::OkStatus();
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

// model.type wide_deep and its data: synthetic tables with sparse columns,
// or the Criteo layout (13 numeric and 26 categorical columns, 2 classes).
absl::Status ValidateSparse(const ModelConfig& m, const DataConfig& d) {
  PS_RETURN_IF_ERROR(AtLeast("data.sparse_columns", d.sparse_columns(), 0));
  PS_RETURN_IF_ERROR(
      AtLeast("data.sparse_cardinality", d.sparse_cardinality(), 2));
  PS_RETURN_IF_ERROR(Positive("data.zipf_exponent", d.zipf_exponent()));
  if (d.sparse_columns() > 0 && d.source() != DataConfig::SYNTHETIC) {
    return KeyError(
        "data.sparse_columns",
        absl::StrCat("applies to data.source synthetic only (",
                     ConfigName(d.source()), " brings its own columns)"));
  }
  const bool wide_deep = m.type() == ModelConfig::WIDE_DEEP;
  if (!wide_deep) {
    // An external model's Python workers read the ids through
    // `ps_report data-export` (docs/python.md).
    if (d.sparse_columns() > 0 && m.type() != ModelConfig::EXTERNAL) {
      return KeyError("data.sparse_columns",
                      "needs model.type wide_deep or external (no other "
                      "model reads categorical ids)");
    }
    if (d.source() == DataConfig::CRITEO) {
      return KeyError("data.source", "criteo needs model.type wide_deep");
    }
    return absl::OkStatus();
  }
  PS_RETURN_IF_ERROR(Known("model.pooling", PoolingNames(), m.pooling()));
  PS_RETURN_IF_ERROR(AtLeast("model.sparse_columns", m.sparse_columns(), 1));
  PS_RETURN_IF_ERROR(AtLeast("model.buckets", m.buckets(), 1));
  PS_RETURN_IF_ERROR(AtLeast("model.embedding_dim", m.embedding_dim(), 1));
  PS_RETURN_IF_ERROR(AtLeast("model.hashes", m.hashes(), 1));
  PS_RETURN_IF_ERROR(AtLeast("model.num_classes", m.num_classes(), 2));
  for (int i = 0; i < m.bottom_hidden_size(); ++i) {
    PS_RETURN_IF_ERROR(AtLeast(absl::StrCat("model.bottom_hidden[", i, "]"),
                               m.bottom_hidden(i), 1));
  }
  if (d.source() == DataConfig::SYNTHETIC) {
    if (m.sparse_columns() != d.sparse_columns()) {
      return KeyError("model.sparse_columns",
                      absl::StrCat("is ", m.sparse_columns(),
                                   " but data.sparse_columns is ",
                                   d.sparse_columns(), "; they must match"));
    }
    return absl::OkStatus();
  }
  if (d.source() != DataConfig::CRITEO) {
    return KeyError("data.source",
                    absl::StrCat(ConfigName(d.source()),
                                 " has no categorical columns for model.type "
                                 "wide_deep (use synthetic or criteo)"));
  }
  if (m.input_dim() != kCriteoNumeric) {
    return KeyError(
        "model.input_dim",
        absl::StrCat("must be ", kCriteoNumeric,
                     " with data.source criteo, got ", m.input_dim()));
  }
  if (m.sparse_columns() != kCriteoCategorical) {
    return KeyError(
        "model.sparse_columns",
        absl::StrCat("must be ", kCriteoCategorical,
                     " with data.source criteo, got ", m.sparse_columns()));
  }
  if (m.num_classes() != 2) {
    return KeyError("model.num_classes",
                    absl::StrCat("must be 2 with data.source criteo, got ",
                                 m.num_classes()));
  }
  return absl::OkStatus();
}

}  // namespace

JobConfig DefaultJobConfig() {
  JobConfig config;
  for (const Key& key : KeyTable()) key.set_default(config);
  FinalizeJobConfig(&config);
  return config;
}

void FinalizeJobConfig(JobConfig* config) {
  v1::TrainingConfig* t = config->mutable_training();
  t->mutable_optimizer()->set_total_steps(
      static_cast<uint64_t>(std::max<int64_t>(t->steps(), 0)));
  t->mutable_optimizer()->set_global_batch(
      static_cast<uint64_t>(std::max<int64_t>(
          t->local_batch() * config->job().workers() * t->grad_accum_steps(),
          0)));
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
  const v1::JobSection& j = c.job();
  const v1::TrainingConfig& t = c.training();
  const OptimizerConfig& o = t.optimizer();
  const ModelConfig& m = c.model();
  const DataConfig& d = c.data();
  const WorkerConfig& w = c.worker();
  const AllReduceConfig& a = c.allreduce();
  const v1::NetworkConfig& n = c.network();
  PS_RETURN_IF_ERROR(AtLeast("job.workers", j.workers(), 1));
  PS_RETURN_IF_ERROR(AtLeast("job.servers", j.servers(), 1));

  PS_RETURN_IF_ERROR(Known("training.mode", ModeNames(), t.mode()));
  PS_RETURN_IF_ERROR(AtLeast("training.staleness", t.staleness(), -1));
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
  PS_RETURN_IF_ERROR(AtLeast("training.local_batch", t.local_batch(), 1));
  PS_RETURN_IF_ERROR(
      AtLeast("training.grad_accum_steps", t.grad_accum_steps(), 1));
  PS_RETURN_IF_ERROR(AtLeast("training.steps", t.steps(), 1));
  // The cosine decays over the steps after the warm-up (Optimizer::Create
  // refuses a schedule with none left).
  if (o.schedule() == OptimizerConfig::COSINE &&
      t.steps() <= static_cast<int64_t>(o.warmup_steps())) {
    return KeyError(
        "training.steps",
        absl::StrCat("must exceed training.warmup_steps (", o.warmup_steps(),
                     ") with lr_schedule cosine, got ", t.steps()));
  }

  PS_RETURN_IF_ERROR(Known("model.type", ModelTypeNames(), m.type()));
  PS_RETURN_IF_ERROR(
      Known("model.activation", ActivationNames(), m.activation()));
  PS_RETURN_IF_ERROR(AtLeast("model.num_classes", m.num_classes(), 1));
  // A softmax cross-entropy head (ModelParamSpecs) needs two outputs.
  if ((m.type() == ModelConfig::SOFTMAX ||
       (m.type() == ModelConfig::MLP && m.classifier())) &&
      m.num_classes() < 2) {
    return KeyError(
        "model.num_classes",
        absl::StrCat(
            "must be >= 2 for a classifier (model.type ", ConfigName(m.type()),
            m.type() == ModelConfig::MLP ? " with model.classifier true" : "",
            "), got ", m.num_classes()));
  }
  for (int i = 0; i < m.hidden_size(); ++i) {
    PS_RETURN_IF_ERROR(
        AtLeast(absl::StrCat("model.hidden[", i, "]"), m.hidden(i), 1));
  }
  PS_RETURN_IF_ERROR(Known("data.source", SourceNames(), d.source()));
  PS_RETURN_IF_ERROR(AtLeast("data.num_classes", d.num_classes(), 1));
  PS_RETURN_IF_ERROR(AtLeast("data.test_examples", d.test_examples(), 0));
  PS_RETURN_IF_ERROR(NonNegative("data.noise", d.noise()));
  for (float target : d.targets()) {
    if (!std::isfinite(target)) {
      return KeyError("data.targets",
                      absl::StrCat("must be finite, got ", target));
    }
  }
  // Synthetic classes: noise is the share of labels drawn at random.
  const bool synthetic_task =
      d.source() == DataConfig::SYNTHETIC && d.targets().empty();
  if (synthetic_task && d.num_classes() >= 2 && d.noise() > 1) {
    return KeyError("data.noise",
                    absl::StrCat("must be <= 1 with data.num_classes >= 2 "
                                 "(the share of random labels), got ",
                                 d.noise()));
  }
  // Targets replace the synthetic task by one target per example and no
  // features (worker/data/data.cc): only the scalar model reads them.
  if (m.type() != ModelConfig::SCALAR && !d.targets().empty() &&
      d.source() == DataConfig::SYNTHETIC) {
    return KeyError("data.targets",
                    absl::StrCat("apply to model.type scalar only (model.type "
                                 "is ",
                                 ConfigName(m.type()), "); remove them"));
  }
  if (m.type() == ModelConfig::SCALAR) {
    if (d.targets().empty()) {
      return KeyError("data.targets",
                      "must be non-empty for model.type scalar");
    }
  } else if (m.type() == ModelConfig::EXTERNAL) {
    if (m.tensors().empty()) {
      return KeyError("model.tensors",
                      "must list the tensors for model.type external");
    }
  } else {
    PS_RETURN_IF_ERROR(AtLeast("model.input_dim", m.input_dim(), 1));
    // File data knows its width only once loaded; the worker checks then.
    if (d.source() == DataConfig::SYNTHETIC &&
        m.input_dim() != d.num_features()) {
      return KeyError(
          "model.input_dim",
          absl::StrCat("is ", m.input_dim(), " but data.num_features is ",
                       d.num_features(), "; they must match"));
    }
  }
  PS_RETURN_IF_ERROR(ValidateSparse(m, d));
  if (m.type() == ModelConfig::WIDE_DEEP) {
    // What row-sparse tables do not support yet (docs/sparse.md, "Parameter
    // server vs all-reduce on the sparse model"), refused before anything
    // starts rather than by a process mid-run.
    // Mode allreduce keeps a replica of the table on every worker
    // (worker/allreduce/allreduce_trainer.h); its checkpoints and rollbacks
    // hold dense tensors only.
    if (t.mode() == v1::MODE_ALLREDUCE) {
      if (a.backend() == AllReduceConfig::NCCL) {
        return KeyError("allreduce.backend",
                        "nccl does not carry row-sparse tables (model.type "
                        "wide_deep): use grpc");
      }
      if (c.checkpoint().every_steps() > 0 ||
          c.checkpoint().every_seconds() > 0) {
        return KeyError(c.checkpoint().every_steps() > 0
                            ? "checkpoint.every_steps"
                            : "checkpoint.every_seconds",
                        "mode allreduce does not checkpoint row-sparse tables "
                        "(model.type wide_deep) yet: use mode sync");
      }
    }
    // What training.on_failure cannot do with row-sparse tables, the policy
    // says (FailurePolicy::CheckJob, below).
    if (t.backup_workers() > 0 || t.dc_lambda() != 0) {
      return KeyError(t.backup_workers() > 0 ? "training.backup_workers"
                                             : "training.dc_lambda",
                      "not supported with row-sparse tables (model.type "
                      "wide_deep)");
    }
  }
  PS_RETURN_IF_ERROR(AtLeast("data.num_categorical", d.num_categorical(), 0));
  if (d.num_categorical() > d.num_features()) {
    return KeyError(
        "data.num_categorical",
        absl::StrCat("is ", d.num_categorical(),
                     " but data.num_features is only ", d.num_features()));
  }
  PS_RETURN_IF_ERROR(AtLeast("data.categories", d.categories(), 2));
  PS_RETURN_IF_ERROR(
      InRange("data.missing_rate", d.missing_rate(), 0, 1, false));
  // The synthetic layout (worker/data/data.cc): each categorical column takes
  // `categories` one-hot slots, plus a missing indicator when values go
  // missing.
  if (synthetic_task && d.num_categorical() > 0) {
    const int64_t slots =
        d.num_categorical() * (d.categories() + (d.missing_rate() > 0 ? 1 : 0));
    if (d.num_features() < slots) {
      return KeyError(
          "data.num_features",
          absl::StrCat(
              "is ", d.num_features(), " but ", d.num_categorical(),
              " categorical columns x ", d.categories(), " levels",
              d.missing_rate() > 0 ? " + their missing indicators" : "",
              " need ", slots, " encoded features"));
    }
  }
  PS_RETURN_IF_ERROR(
      InRange("data.test_fraction", d.test_fraction(), 0, 1, false));
  if ((d.source() == DataConfig::CSV || d.source() == DataConfig::LIBSVM ||
       d.source() == DataConfig::CRITEO) &&
      d.path().empty()) {
    return KeyError("data.path", absl::StrCat("is required with data.source ",
                                              ConfigName(d.source())));
  }
  PS_RETURN_IF_ERROR(Known("worker.device", DeviceNames(), w.device()));
  PS_RETURN_IF_ERROR(NonNegative("worker.compute_ms", w.compute_ms()));
  if (w.straggler_rank() < -1 || w.straggler_rank() >= j.workers()) {
    return KeyError(
        "worker.straggler_rank",
        absl::StrCat("must be -1 (none) or a rank below job.workers (",
                     j.workers(), "), got ", w.straggler_rank()));
  }
  if (!(w.straggler_factor() >= 1)) {
    return KeyError("worker.straggler_factor",
                    absl::StrCat("must be >= 1, got ", w.straggler_factor()));
  }
  PS_RETURN_IF_ERROR(InRange("worker.transient_straggler_p",
                             w.transient_straggler_p(), 0, 1, true));
  if (!(w.transient_straggler_factor() >= 1) ||
      !std::isfinite(w.transient_straggler_factor())) {
    return KeyError("worker.transient_straggler_factor",
                    absl::StrCat("must be >= 1 and finite, got ",
                                 w.transient_straggler_factor()));
  }
  if (w.pause_rank() < -1 || w.pause_rank() >= j.workers()) {
    return KeyError(
        "worker.pause_rank",
        absl::StrCat("must be -1 (none) or a rank below job.workers (",
                     j.workers(), "), got ", w.pause_rank()));
  }
  if (w.pause_rank() >= 0) {
    if (w.pause_at_step() < 0 || w.pause_at_step() >= t.steps()) {
      return KeyError("worker.pause_at_step",
                      absl::StrCat("must be in [0, training.steps (", t.steps(),
                                   ")), got ", w.pause_at_step()));
    }
    if (!(w.pause_s() > 0) || !(w.pause_s() < n.barrier_timeout_s())) {
      return KeyError(
          "worker.pause_s",
          absl::StrCat("must be > 0 and below network.barrier_timeout_s (",
                       n.barrier_timeout_s(),
                       ") with "
                       "worker.pause_rank set, got ",
                       w.pause_s()));
    }
  } else if (w.pause_s() != 0) {
    return KeyError(
        "worker.pause_s",
        absl::StrCat("needs worker.pause_rank set, got ", w.pause_s()));
  }
  PS_RETURN_IF_ERROR(AtLeast("training.backup_workers", t.backup_workers(), 0));
  if (t.backup_workers() > 0 &&
      (t.mode() != v1::MODE_SYNC || t.backup_workers() >= j.workers())) {
    return KeyError("training.backup_workers",
                    absl::StrCat("needs mode sync and fewer than job.workers (",
                                 j.workers(), "), got ", t.backup_workers()));
  }
  if ((t.staleness_aware_lr() || t.dc_lambda() != 0) &&
      t.mode() != v1::MODE_ASYNC) {
    return KeyError(t.staleness_aware_lr() ? "training.staleness_aware_lr"
                                           : "training.dc_lambda",
                    "applies to mode async only");
  }
  PS_RETURN_IF_ERROR(NonNegative("training.dc_lambda", t.dc_lambda()));
  PS_RETURN_IF_ERROR(Known("training.async_lr_per_push", AsyncLrNames(),
                           t.async_lr_per_push()));
  if (t.async_lr_per_push() == v1::TrainingConfig::SCALED &&
      t.mode() != v1::MODE_ASYNC) {
    return KeyError("training.async_lr_per_push",
                    "'scaled' applies to mode async only");
  }
  if (a.segment_bytes() < 4096 || a.segment_bytes() > (4 << 20) ||
      a.segment_bytes() % 4) {
    return KeyError(
        "allreduce.segment_bytes",
        absl::StrCat("must be a multiple of 4 in [4096, 4 MiB], got ",
                     a.segment_bytes()));
  }
  PS_RETURN_IF_ERROR(
      Known("allreduce.backend", AllReduceBackendNames(), a.backend()));
  if (d.source() == DataConfig::SYNTHETIC &&
      m.num_classes() != d.num_classes()) {
    return KeyError(
        "model.num_classes",
        absl::StrCat("is ", m.num_classes(), " but data.num_classes is ",
                     d.num_classes(), "; they must match"));
  }

  PS_RETURN_IF_ERROR(
      AtLeast("evaluation.every_steps", c.evaluation().every_steps(), 0));
  if (c.server().chunk_bytes() != 0 &&
      (c.server().chunk_bytes() < 64 ||
       c.server().chunk_bytes() > kMaxChunkBytes ||
       c.server().chunk_bytes() % 4 != 0)) {
    return KeyError(
        "server.chunk_bytes",
        absl::StrCat("must be 0 (automatic) or a multiple of 4 in "
                     "[64, ",
                     kMaxChunkBytes, "], got ", c.server().chunk_bytes()));
  }
  PS_RETURN_IF_ERROR(
      AtLeast("server.sparse_max_rows", c.server().sparse_max_rows(), 0));
  PS_RETURN_IF_ERROR(Known("server.sparse_on_full", SparseOnFullNames(),
                           c.server().sparse_on_full()));
  const v1::CheckpointConfig& k = c.checkpoint();
  PS_RETURN_IF_ERROR(AtLeast("checkpoint.every_steps", k.every_steps(), 0));
  PS_RETURN_IF_ERROR(
      NonNegative("checkpoint.every_seconds", k.every_seconds()));
  PS_RETURN_IF_ERROR(AtLeast("checkpoint.keep", k.keep(), 0));
  // Every mode checkpoints: sync and async at consistent cuts the
  // coordinator orders (async: clock cuts, time cuts at the next clock), mode
  // allreduce by rank 0 writing its replica (worker/allreduce/checkpointing.h).
  PS_RETURN_IF_ERROR(Positive("network.rpc_timeout_s", n.rpc_timeout_s()));
  PS_RETURN_IF_ERROR(
      Positive("network.barrier_timeout_s", n.barrier_timeout_s()));
  PS_RETURN_IF_ERROR(
      Positive("network.startup_timeout_s", n.startup_timeout_s()));
  PS_RETURN_IF_ERROR(Positive("network.lease_s", n.lease_s()));
  PS_RETURN_IF_ERROR(
      Known("network.wire_dtype", WireDtypeNames(), n.wire_dtype()));
  const bool plain_sync = t.mode() == v1::MODE_SYNC && t.backup_workers() == 0;
  PS_RETURN_IF_ERROR(StreamsKey(
      "network.push_streams", n.push_streams(), plain_sync,
      "a push splits over several streams in mode sync without backup "
      "workers only (the servers sum it on arrival); other modes take it as "
      "one stream: use 1 or 0"));
  PS_RETURN_IF_ERROR(StreamsKey(
      "network.pull_streams", n.pull_streams(), plain_sync,
      "a pull splits over several streams in mode sync without backup "
      "workers only (where every part reads the same step); use 1 or 0"));
  PS_RETURN_IF_ERROR(CongestionControlName("network.tcp_congestion_control",
                                           n.tcp_congestion_control()));
  // Mode allreduce: the gRPC ring sends fp32 or bf16
  // (worker/allreduce/ring_allreduce.h); fp16 partial sums could overflow,
  // and NCCL reduces in fp32 only here.
  if (t.mode() == v1::MODE_ALLREDUCE && n.wire_dtype() == v1::DTYPE_F16) {
    return KeyError("network.wire_dtype",
                    "mode allreduce sends fp32 or bf16, not fp16 (partial "
                    "sums may exceed fp16's range)");
  }
  if (t.mode() == v1::MODE_ALLREDUCE && n.wire_dtype() == v1::DTYPE_BF16 &&
      a.backend() == AllReduceConfig::NCCL) {
    return KeyError("network.wire_dtype",
                    "bf16 applies to allreduce.backend grpc (the ring); the "
                    "nccl backend reduces in fp32");
  }
  PS_RETURN_IF_ERROR(
      Known("allreduce.sparse", AllReduceSparseNames(), a.sparse()));
  // The all-gather of rows sends ids and rows in fp32 (exact ids, and the
  // sync shards' sums); a model without a row-sparse table has nothing to
  // gather.
  if (t.mode() == v1::MODE_ALLREDUCE &&
      a.sparse() == AllReduceConfig::ALLGATHER) {
    if (m.type() != ModelConfig::WIDE_DEEP) {
      return KeyError(
          "allreduce.sparse",
          absl::StrCat("allgather applies to models with a row-sparse table "
                       "(model.type wide_deep); model.type ",
                       ConfigName(m.type()),
                       " has none: use dense (the default)"));
    }
    if (n.wire_dtype() != v1::DTYPE_F32) {
      return KeyError("network.wire_dtype",
                      "allreduce.sparse: allgather sends ids and rows in "
                      "fp32 only: use fp32");
    }
  }
  PS_RETURN_IF_ERROR(
      Known("training.on_failure", OnFailureNames(), t.on_failure()));
  PS_RETURN_IF_ERROR(
      Positive("training.restart_timeout_s", t.restart_timeout_s()));
  PS_RETURN_IF_ERROR(AtLeast("training.max_restarts", t.max_restarts(), 0));
  PS_RETURN_IF_ERROR(Known("training.clock", ClockNames(), t.clock()));
  if (t.clock() == v1::TrainingConfig::CLOCK_MODEL &&
      t.mode() == v1::MODE_ASYNC) {
    // The model clock keeps no per-worker step the recovery paths could
    // roll back to or stand in for: refused before anything starts.
    if (t.on_failure() != v1::TrainingConfig::FAIL &&
        t.on_failure() != v1::TrainingConfig::ON_FAILURE_UNSPECIFIED) {
      return KeyError(
          "training.clock",
          absl::StrCat("model needs training.on_failure fail, "
                       "got ",
                       NameOrUnspecified(OnFailureNames(), t.on_failure())));
    }
    if (c.checkpoint().every_steps() > 0 ||
        c.checkpoint().every_seconds() > 0) {
      return KeyError("training.clock",
                      "model takes no checkpoints (async cuts are worker "
                      "clocks): set checkpoint.every_steps and "
                      "checkpoint.every_seconds to 0");
    }
    if (c.worker().overlap()) {
      return KeyError("training.clock",
                      "model does not overlap (worker.overlap): set it false");
    }
    if (m.type() == ModelConfig::WIDE_DEEP) {
      return KeyError("training.clock",
                      "model does not take row-sparse tables (model.type "
                      "wide_deep) yet");
    }
  }
  // The policy's own cross-key rules (mode, allreduce.backend, model.type,
  // training.backup_workers): coordinator/failure_policy.h.
  PS_RETURN_IF_ERROR(FailurePolicy::ForJob(t)->CheckJob(c));
  if (t.min_workers() < 1 || t.min_workers() > c.job().workers()) {
    return KeyError(
        "training.min_workers",
        absl::StrCat("must be in [1, job.workers = ", c.job().workers(),
                     "], got ", t.min_workers()));
  }
  if (n.tls_cert().empty() != n.tls_key().empty()) {
    return KeyError(
        n.tls_cert().empty() ? "network.tls_cert" : "network.tls_key",
        "network.tls_cert and network.tls_key go together");
  }
  return absl::OkStatus();
}

std::vector<std::string> ConfigWarnings(const JobConfig& c) {
  std::vector<std::string> warnings;
  if (c.network().wire_dtype() == v1::DTYPE_F16) {
    warnings.push_back(
        "network.wire_dtype: fp16 carries values up to +-65504 only; larger "
        "finite weights and gradients are sent as +-65504 (saturated, logged "
        "by the process that sends them); bf16 keeps fp32's range");
  }
  if (!c.network().tcp_congestion_control().empty() &&
      c.training().mode() == v1::MODE_ALLREDUCE) {
    warnings.push_back(
        "network.tcp_congestion_control: mode allreduce has no servers; the "
        "ring's connections keep the host's congestion control");
  }
  return warnings;
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

const std::string& ConfigName(ModelConfig::ModelType value) {
  return NameOrUnspecified(ModelTypeNames(), value);
}
const std::string& ConfigName(ModelConfig::Activation value) {
  return NameOrUnspecified(ActivationNames(), value);
}
const std::string& ConfigName(ModelConfig::Pooling value) {
  return NameOrUnspecified(PoolingNames(), value);
}
const std::string& ConfigName(DataConfig::DataSource value) {
  return NameOrUnspecified(SourceNames(), value);
}
const std::string& ConfigName(WorkerConfig::Device value) {
  return NameOrUnspecified(DeviceNames(), value);
}
const std::string& ConfigName(AllReduceConfig::Backend value) {
  return NameOrUnspecified(AllReduceBackendNames(), value);
}
const std::string& ConfigName(AllReduceConfig::Sparse value) {
  return NameOrUnspecified(AllReduceSparseNames(), value);
}
const std::string& ConfigName(v1::ConsistencyMode value) {
  return NameOrUnspecified(ModeNames(), value);
}
const std::string& ConfigName(v1::TrainingConfig::OnFailure value) {
  return NameOrUnspecified(OnFailureNames(), value);
}
const std::string& ConfigName(v1::DType value) {
  return NameOrUnspecified(WireDtypeNames(), value);
}

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> keys;
  for (const Key& key : KeyTable()) {
    keys.push_back(absl::StrCat(key.section, ".", key.name));
  }
  return keys;
}

std::vector<ConfigKeyDoc> ConfigReference() {
  std::vector<ConfigKeyDoc> keys;
  for (const Key& key : KeyTable()) {
    keys.push_back(
        {key.section, key.name, key.type, key.default_value, key.description});
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

int PushStreams(const JobConfig& config) {
  return config.network().push_streams() > 0 ? config.network().push_streams()
                                             : kDefaultPushStreams;
}

int PullStreams(const JobConfig& config) {
  return std::max(config.network().pull_streams(), 1);
}

}  // namespace pstrain
