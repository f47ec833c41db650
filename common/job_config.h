// The job configuration: one YAML file read by psctl and every binary, with
// command-line flags overriding individual keys (see README "Configuration").
#ifndef PSTRAIN_COMMON_JOB_CONFIG_H_
#define PSTRAIN_COMMON_JOB_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// What the workers train. Tensor names and shapes derive from it
// (common/model_spec.h), so servers and workers agree without talking.
struct ModelConfig {
  // "scalar": one weight w, per-example loss (w - y)^2 (the worked example).
  // "linear": linear regression, mean squared error.
  // "softmax": softmax regression (multinomial logistic).
  // "mlp": multi-layer perceptron with `hidden` widths.
  std::string type = "mlp";
  int64_t input_dim = 32;
  int64_t num_classes = 4;  // output width; 1 for regressors
  std::vector<int64_t> hidden = {64};
  std::string activation = "relu";  // relu | tanh | gelu
  bool classifier = true;           // softmax cross-entropy head vs MSE head
  uint64_t seed = 1;                // weight initialisation seed
  float init_value = 0.0f;          // "scalar": initial w
};

// Where examples come from. Examples are addressed by a global id, so the
// global batch of step t is the same whatever the number of workers.
struct DataConfig {
  // synthetic: generated on the fly from `seed` (any worker, any example).
  // digits, breast_cancer: the data sets shipped in Debian's python3-sklearn,
  //   extracted by `psctl setup` into `dir`.
  // csv: `path`, a header row, label in column `label_column`.
  // libsvm: `path`, "label idx:value ..." rows (1-based indices).
  std::string source = "synthetic";
  uint64_t seed = 7;          // task, example, split and shuffle seed
  int64_t num_features = 32;  // must equal model.input_dim
  int64_t num_classes = 4;    // must equal model.num_classes (1 = regression)
  double noise = 0.1;         // label noise / target noise
  int64_t test_examples = 2000;  // synthetic: held-out examples
  // "scalar" model only: the targets cycled through, e.g. [1, 3, 5, 7].
  std::vector<float> targets;
  // Synthetic tables: how many of num_features are categorical (one-hot
  // encoded into the features), categories per such column, and the share of
  // values missing (encoded as 0 plus a missing-indicator feature).
  int64_t num_categorical = 0;
  int64_t categories = 4;
  double missing_rate = 0.0;
  // File data.
  std::string path;                             // csv / libsvm file
  std::string dir = ".cache/pstrain/datasets";  // built-in data sets
  std::string label_column = "label";           // csv
  double test_fraction = 0.2;  // seeded train/test split of file data
  bool standardize = true;     // z-score features with train statistics
};

// Per-worker process settings carried in the job file.
struct WorkerConfig {
  std::string device = "auto";  // auto | cpu | cuda (ps_worker --device wins)
  // Emulated compute: each step's gradient computation is stretched to at
  // least compute_ms (the math still runs). 0 = off.
  double compute_ms = 0;
  // One straggler: rank straggler_rank's compute takes straggler_factor times
  // as long (-1 = none).
  int64_t straggler_rank = -1;
  double straggler_factor = 1;
};

// Ring all-reduce (training.mode allreduce): workers only.
struct AllReduceConfig {
  int64_t segment_bytes = 1 << 20;  // pipelined ring segment, 64 KiB..4 MiB
  std::string backend = "grpc";     // grpc | nccl (every worker on a GPU)
  double timeout_s = 60;            // any single ring step
};

struct JobConfig {
  // job:
  std::string name = "pstrain";
  int workers = 2;
  int servers = 2;
  // training:
  pstrain::v1::ConsistencyMode mode = pstrain::v1::MODE_SYNC;
  int64_t staleness = 0;       // SSP bound in clocks; -1 = unbounded ("inf")
  int64_t backup_workers = 0;  // sync: steps use the first N - b pushes
  bool staleness_aware_lr = false;         // async: lr / max(staleness, 1)
  double dc_lambda = 0;                    // async: DC-ASGD delay compensation
  pstrain::v1::OptimizerConfig optimizer;  // kind, base_lr, schedule, ...
  int64_t local_batch = 32;
  int64_t grad_accum_steps = 1;
  int64_t steps = 200;
  // A NaN or infinite loss fails the job (else it is only marked diverged).
  bool fail_on_divergence = true;
  // What a dead process (lease expired, see network.lease_s) does to the
  // job: "fail" ends it at once; "restart" and "elastic" are not
  // implemented yet (rejected by validation).
  std::string on_failure = "fail";
  // model:, data:, worker:
  ModelConfig model;
  DataConfig data;
  // worker:
  WorkerConfig worker;
  // allreduce:
  AllReduceConfig allreduce;
  // evaluation:
  int64_t eval_every = 0;  // steps between evaluations; 0 = only at the end
  // server:
  int64_t chunk_bytes = 0;  // bytes per chunk; 0 = automatic; max 4 MiB
  // checkpoint: (server/checkpoint.h; sync mode only for now)
  struct Checkpoint {
    // Root of the step-NNN directories; "" = the coordinator's --out + /ckpt
    // when every_* is set.
    std::string dir;
    int64_t every_steps = 0;   // a cut every k steps; 0 = off
    double every_seconds = 0;  // a cut when this much time passed; 0 = off
    int64_t keep = 0;          // newest k complete checkpoints; 0 = all
  } checkpoint;
  // network:
  double rpc_timeout_s = 30;       // deadline of every unary call / stream
  double barrier_timeout_s = 300;  // longest a pull may block on a barrier
  double startup_timeout_s = 60;   // waiting for peers at start-up
  // Gradients (push) and weights (pull) between workers and servers travel
  // as fp32, bf16 or fp16 (round to nearest even); servers keep fp32 master
  // weights and optimizer state. The ring all-reduce stays fp32.
  pstrain::v1::DType wire_dtype = pstrain::v1::DTYPE_F32;
  // A registered process silent this long is dead (the coordinator's view);
  // the coordinator silent this long ends every server and worker.
  double lease_s = 5;
  // TLS for every gRPC connection when tls_cert/tls_key (servers) or tls_ca
  // (clients) are set; PEM file paths. Flags of the same name override.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  // Job token file (common/job_token.h); --token_file overrides.
  std::string token_file;
};

// Returns the defaults listed above with an SGD optimizer (lr 0.1, constant
// schedule, reference batch 256), already finalized. optimizer.epsilon is 0
// (unset): the optimizer's own default, 1e-8 (AdaGrad 1e-10); YAML
// `training.epsilon` sets it (> 0) and JobConfigToYaml omits it when unset.
JobConfig DefaultJobConfig();

// Derives optimizer.total_steps (= steps) and optimizer.global_batch
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

// Serialises back to YAML (round-trips through ParseJobConfig). Used to hand
// the effective config (after flag overrides) to every process.
std::string JobConfigToYaml(const JobConfig& config);

// The one parser of a staleness bound: "inf" (unbounded, -1) or an integer
// >= 0. INVALID_ARGUMENT "expected an integer >= 0 or 'inf', got '...'".
absl::StatusOr<int64_t> ParseStaleness(absl::string_view text);

// Every key as "section.key", in the order JobConfigToYaml writes them.
std::vector<std::string> ConfigKeys();

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
