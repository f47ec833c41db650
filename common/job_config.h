// The job configuration: one YAML file read by psctl and every binary, with
// command-line flags overriding individual keys (see docs/configuration.md).
#ifndef PSTRAIN_COMMON_JOB_CONFIG_H_
#define PSTRAIN_COMMON_JOB_CONFIG_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// The schema is proto (pstrain.v1.JobConfig in proto/pstrain.proto): one
// sub-message per YAML section, one field per key. YAML is only the edge
// encoding, read and written through the key table in job_config.cc, which
// also holds every default.
using JobConfig = v1::JobConfig;
using ModelConfig = v1::ModelConfig;
using DataConfig = v1::DataConfig;
using WorkerConfig = v1::WorkerConfig;
using AllReduceConfig = v1::AllReduceConfig;

// The YAML spelling of an enum value ("mlp", "synthetic", "auto", "grpc",
// "relu", "sync"); "unspecified" for a value no key accepts.
const std::string& ConfigName(ModelConfig::ModelType value);
const std::string& ConfigName(ModelConfig::Activation value);
const std::string& ConfigName(ModelConfig::Pooling value);
const std::string& ConfigName(DataConfig::DataSource value);
const std::string& ConfigName(WorkerConfig::Device value);
const std::string& ConfigName(AllReduceConfig::Backend value);
const std::string& ConfigName(AllReduceConfig::Sparse value);
const std::string& ConfigName(v1::ConsistencyMode value);
const std::string& ConfigName(v1::TrainingConfig::OnFailure value);
const std::string& ConfigName(v1::DType value);  // network.wire_dtype

// Replaces a repeated config field, e.g.
// SetList(config.mutable_model()->mutable_hidden(), {64, 64}).
template <typename T>
void SetList(google::protobuf::RepeatedField<T>* field,
             std::initializer_list<
                 typename google::protobuf::RepeatedField<T>::value_type>
                 values) {
  field->Clear();
  field->Add(values.begin(), values.end());
}

// Returns the defaults (each key table row's default: 2 workers, 2 servers,
// sync, an mlp on synthetic data, SGD lr 0.1, ...; see
// docs/configuration.md), already finalized. optimizer.epsilon is 0 (unset):
// the optimizer's own default, 1e-8 (AdaGrad 1e-10); YAML `training.epsilon`
// sets it (> 0) and JobConfigToYaml omits it when unset.
JobConfig DefaultJobConfig();

// Derives training.optimizer.total_steps (= steps) and .global_batch
// (= local_batch * workers * grad_accum_steps). ParseJobConfig calls it;
// callers that change fields afterwards (flag overrides) call it again.
void FinalizeJobConfig(JobConfig* config);

// Parses YAML text (see configs/*.yaml); absent keys keep their defaults.
// Unknown sections or keys, wrong types, negative counts, bad names and YAML
// syntax errors are INVALID_ARGUMENT errors naming the source, line and key
// path, e.g. "job.yaml:7: training.base_lr: expected a number, got 'fast'".
// `source_name` (a file name) prefixes messages. Cross-field checks are left
// to ValidateJobConfig.
absl::StatusOr<JobConfig> ParseJobConfig(const std::string& yaml_text,
                                         const std::string& source_name);

// Reads and parses a file; errors name the file (NOT_FOUND if missing).
absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path);

// Checks ranges and cross-field consistency (workers >= 1, dims match,
// lr > 0, ...). INVALID_ARGUMENT errors name the key, e.g. "job.workers: ...".
absl::Status ValidateJobConfig(const JobConfig& config);

// What a valid config allows but may not be what its author wants, as
// "key: what happens" lines (empty if nothing): network.wire_dtype: fp16
// saturates values beyond +-65504. Not errors: callers print them (psctl,
// a dry run) and go on.
std::vector<std::string> ConfigWarnings(const JobConfig& config);

// The Criteo display-ads layout (data.source criteo): a label, then this
// many integer columns, then this many categorical (hex) columns.
inline constexpr int64_t kCriteoNumeric = 13;
inline constexpr int64_t kCriteoCategorical = 26;

// network.push_streams: at most this many; 0 picks PushStreams' default.
inline constexpr int kMaxPushStreamsConfig = 8;
// The default: one stream per shard in every layout. A split over two
// streams (the default with one worker and one server until 2026-12-06)
// used the core a single stream leaves idle while the server ran where the
// scheduler put it; with the server on a core of its own (psctl run,
// common/cpu_placement.h) its two streams' work shares that core, and real
// 1 x 1 jobs pushed 1.12x (16 MB) and 1.04x (64 MB) faster as one stream
// (docs/performance-log.md, "One stream per push with the server on a core
// of its own").
inline constexpr int kDefaultPushStreams = 1;

// The streams a worker splits each shard's push over (PushHeader.parts):
// network.push_streams, or kDefaultPushStreams for 0 (docs/architecture.md,
// "One push over several streams").
int PushStreams(const JobConfig& config);

// The streams a worker splits each shard's pull over (PullRequest.parts):
// network.pull_streams, 1 for 0. Not split by default: on one worker and
// one server, real jobs pulled 1.05-1.12x slower over two streams, though
// in-process pulls were faster (docs/performance-log.md, "One pull over several
// streams").
int PullStreams(const JobConfig& config);

// Serialises back to YAML (round-trips through ParseJobConfig). Used to hand
// the effective config (after flag overrides) to every process.
std::string JobConfigToYaml(const JobConfig& config);

// The one parser of a staleness bound: "inf" (unbounded, -1) or an integer
// >= 0. INVALID_ARGUMENT "expected an integer >= 0 or 'inf', got '...'".
absl::StatusOr<int64_t> ParseStaleness(absl::string_view text);

// Every key as "section.key", in the order JobConfigToYaml writes them.
std::vector<std::string> ConfigKeys();

// One key of the reference that docs/configuration.md is generated from
// (`ps_report config-doc`), as its key table row states it.
struct ConfigKeyDoc {
  std::string section;  // "training"
  std::string name;     // "base_lr"
  // What the parser accepts, from the row's codec, in Markdown: "number >
  // 0", "integer >= 0 or `inf`", "`sgd`, `momentum`, ...".
  std::string type;
  // The default as JobConfigToYaml writes it ("0.1", "sync", "[64]", and
  // "" in quotes for an empty string); empty for an optional key that is
  // unset by default (training.epsilon).
  std::string default_value;
  // One line of Markdown: what the key does, and the checks beyond its type
  // (ValidateJobConfig's ranges and cross-field rules).
  std::string description;
};

// Every key, in ConfigKeys() order.
std::vector<ConfigKeyDoc> ConfigReference();

// Sets one key from its YAML value text ("20", "inf", "[64, 64]", "" for an
// empty string) through the same key table as ParseJobConfig. Errors are
// INVALID_ARGUMENT without a location: "unknown key 'wokers' in section
// 'job' (known: ...)", "training.base_lr: expected a number, got 'fast'",
// "'steps' is not a section", "bad YAML value: ...". Leaves derived fields
// and cross-field checks to FinalizeJobConfig and ValidateJobConfig. On
// error `config` is unchanged.
absl::Status ApplyConfigOverride(const std::string& key,
                                 const std::string& value, JobConfig* config);

// A command-line flag that sets one key, e.g. {"--workers", "job.workers",
// "4"}.
struct FlagOverride {
  std::string flag;
  std::string key;
  std::string value;
};

// Applies `overrides` in order, then finalizes and validates. Every error
// starts with the flag it is about: "--workers: job.workers: must be >= 1,
// got 0" (a cross-field error that names no overridden key is returned as
// ValidateJobConfig gives it).
absl::Status ApplyFlagOverrides(const std::vector<FlagOverride>& overrides,
                                JobConfig* config);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_CONFIG_H_
