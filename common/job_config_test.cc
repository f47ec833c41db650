#include "common/job_config.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace pstrain {
namespace {

using ::pstrain::v1::OptimizerConfig;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every field: a failure prints both configs as text, field by field.
void ExpectSameConfig(const JobConfig& a, const JobConfig& b) {
  EXPECT_EQ(a.DebugString(), b.DebugString());
}

TEST(JobConfigTest, DefaultsAreFinalizedAndValid) {
  JobConfig c = DefaultJobConfig();
  EXPECT_EQ(c.training().optimizer().kind(), OptimizerConfig::SGD);
  EXPECT_EQ(c.training().optimizer().base_lr(), 0.1);
  EXPECT_EQ(c.training().optimizer().schedule(), OptimizerConfig::CONSTANT);
  EXPECT_EQ(c.training().optimizer().reference_batch(), 256u);
  EXPECT_EQ(c.training().optimizer().total_steps(), 200u);
  EXPECT_EQ(c.training().optimizer().global_batch(),
            64u);  // 32 x 2 workers x 1
  EXPECT_TRUE(ValidateJobConfig(c).ok());
}

// A config that never went through DefaultJobConfig (e.g. a JobSpec without
// its config) has UNSPECIFIED enums and zero counts: validation rejects it.
TEST(JobConfigTest, BareMessageIsInvalid) {
  absl::Status status = ValidateJobConfig(JobConfig());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("job.workers"));
  JobConfig c = DefaultJobConfig();
  c.mutable_data()->clear_source();
  EXPECT_THAT(std::string(ValidateJobConfig(c).message()),
              HasSubstr("data.source: must be one of synthetic, digits"));
}

TEST(JobConfigTest, EmptyTextAndEmptySectionsGiveDefaults) {
  for (const char* text : {"", "# nothing\n", "job:\ntraining:\n"}) {
    absl::StatusOr<JobConfig> c = ParseJobConfig(text, "job.yaml");
    ASSERT_TRUE(c.ok()) << c.status();
    ExpectSameConfig(*c, DefaultJobConfig());
  }
}

TEST(JobConfigTest, ParsesEveryKey) {
  const char* text = R"(
job: {name: big, workers: 4, servers: 3}
training:
  mode: async
  staleness: inf
  optimizer: adamw
  base_lr: 0.002
  momentum: 0.8
  nesterov: true
  beta1: 0.85
  beta2: 0.99
  epsilon: 1e-6
  weight_decay: 0.01
  adagrad_init: 0.5
  lr_schedule: step
  warmup_steps: 5
  step_size: 30
  gamma: 0.5
  min_lr_ratio: 0.1
  lr_scaling: linear
  reference_batch: 128
  local_batch: 8
  grad_accum_steps: 3
  steps: 90
model: {type: softmax, input_dim: 10, num_classes: 3, hidden: [], activation: gelu, classifier: false, seed: 9, init_value: -1.5}
data: {source: synthetic, seed: 11, num_features: 10, num_classes: 3, noise: 0.25, test_examples: 100, targets: [1, 2.5],
       num_categorical: 2, categories: 3, missing_rate: 0.05, path: x.csv, dir: /d, label_column: y, test_fraction: 0.3,
       standardize: false}
worker: {device: cpu}
evaluation: {every_steps: 10}
server: {chunk_bytes: 4096}
network: {rpc_timeout_s: 5, barrier_timeout_s: 7.5, startup_timeout_s: 9}
)";
  absl::StatusOr<JobConfig> parsed = ParseJobConfig(text, "job.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const JobConfig& c = *parsed;
  const OptimizerConfig& o = c.training().optimizer();
  EXPECT_EQ(c.job().name(), "big");
  EXPECT_EQ(c.job().workers(), 4);
  EXPECT_EQ(c.job().servers(), 3);
  EXPECT_EQ(c.training().mode(), v1::MODE_ASYNC);
  EXPECT_EQ(c.training().staleness(), -1);
  EXPECT_EQ(o.kind(), OptimizerConfig::ADAMW);
  EXPECT_EQ(o.base_lr(), 0.002);
  EXPECT_EQ(o.momentum(), 0.8);
  EXPECT_TRUE(o.nesterov());
  EXPECT_EQ(o.beta1(), 0.85);
  EXPECT_EQ(o.beta2(), 0.99);
  EXPECT_EQ(o.epsilon(), 1e-6);
  EXPECT_EQ(o.weight_decay(), 0.01);
  EXPECT_EQ(o.adagrad_init(), 0.5);
  EXPECT_EQ(o.schedule(), OptimizerConfig::STEP);
  EXPECT_EQ(o.warmup_steps(), 5u);
  EXPECT_EQ(o.step_size(), 30u);
  EXPECT_EQ(o.gamma(), 0.5);
  EXPECT_EQ(o.min_lr_ratio(), 0.1);
  EXPECT_TRUE(o.linear_scaling());
  EXPECT_EQ(o.reference_batch(), 128u);
  EXPECT_EQ(c.training().local_batch(), 8);
  EXPECT_EQ(c.training().grad_accum_steps(), 3);
  EXPECT_EQ(c.training().steps(), 90);
  EXPECT_EQ(o.total_steps(), 90u);
  EXPECT_EQ(o.global_batch(), 96u);  // 8 x 4 workers x 3
  EXPECT_EQ(c.model().type(), ModelConfig::SOFTMAX);
  EXPECT_EQ(c.model().input_dim(), 10);
  EXPECT_EQ(c.model().num_classes(), 3);
  EXPECT_TRUE(c.model().hidden().empty());
  EXPECT_EQ(c.model().activation(), ModelConfig::GELU);
  EXPECT_FALSE(c.model().classifier());
  EXPECT_EQ(c.model().seed(), 9u);
  EXPECT_EQ(c.model().init_value(), -1.5f);
  EXPECT_EQ(c.data().seed(), 11u);
  EXPECT_EQ(c.data().num_features(), 10);
  EXPECT_EQ(c.data().num_classes(), 3);
  EXPECT_EQ(c.data().noise(), 0.25);
  EXPECT_EQ(c.data().test_examples(), 100);
  EXPECT_THAT(c.data().targets(), ElementsAre(1.0f, 2.5f));
  EXPECT_EQ(c.data().num_categorical(), 2);
  EXPECT_EQ(c.data().categories(), 3);
  EXPECT_EQ(c.data().missing_rate(), 0.05);
  EXPECT_EQ(c.data().path(), "x.csv");
  EXPECT_EQ(c.data().dir(), "/d");
  EXPECT_EQ(c.data().label_column(), "y");
  EXPECT_EQ(c.data().test_fraction(), 0.3);
  EXPECT_FALSE(c.data().standardize());
  EXPECT_EQ(c.worker().device(), WorkerConfig::CPU);
  EXPECT_EQ(c.evaluation().every_steps(), 10);
  EXPECT_EQ(c.server().chunk_bytes(), 4096);
  EXPECT_EQ(c.network().rpc_timeout_s(), 5);
  EXPECT_EQ(c.network().barrier_timeout_s(), 7.5);
  EXPECT_EQ(c.network().startup_timeout_s(), 9);
  // data.targets is read by the scalar model only: with softmax the job
  // could not start (the targets replace the synthetic features).
  EXPECT_THAT(ValidateJobConfig(c).message(), HasSubstr("data.targets:"));
  JobConfig runnable = c;
  runnable.mutable_data()->clear_targets();
  EXPECT_TRUE(ValidateJobConfig(runnable).ok()) << ValidateJobConfig(runnable);
}

TEST(JobConfigTest, FinalizeDerivesTotalStepsAndGlobalBatch) {
  JobConfig c = DefaultJobConfig();
  c.mutable_training()->set_steps(17);
  c.mutable_job()->set_workers(3);
  c.mutable_training()->set_local_batch(5);
  c.mutable_training()->set_grad_accum_steps(2);
  FinalizeJobConfig(&c);
  EXPECT_EQ(c.training().optimizer().total_steps(), 17u);
  EXPECT_EQ(c.training().optimizer().global_batch(), 30u);
}

TEST(JobConfigTest, YamlRoundTrips) {
  JobConfig c = DefaultJobConfig();
  c.mutable_job()->set_name("round trip: yes");
  c.mutable_job()->set_workers(5);
  c.mutable_job()->set_servers(3);
  c.mutable_training()->set_mode(v1::MODE_ASYNC);
  c.mutable_training()->set_staleness(-1);
  c.mutable_training()->mutable_optimizer()->set_kind(OptimizerConfig::ADAM);
  c.mutable_training()->mutable_optimizer()->set_base_lr(0.0123456789);
  c.mutable_training()->mutable_optimizer()->set_nesterov(true);
  c.mutable_training()->mutable_optimizer()->set_beta2(0.9999);
  c.mutable_training()->mutable_optimizer()->set_epsilon(1e-7);
  c.mutable_training()->mutable_optimizer()->set_weight_decay(1.0 / 3.0);
  c.mutable_training()->mutable_optimizer()->set_schedule(
      OptimizerConfig::COSINE);
  c.mutable_training()->mutable_optimizer()->set_warmup_steps(12);
  c.mutable_training()->mutable_optimizer()->set_min_lr_ratio(0.05);
  c.mutable_training()->mutable_optimizer()->set_linear_scaling(true);
  c.mutable_training()->mutable_optimizer()->set_reference_batch(512);
  c.mutable_training()->set_local_batch(7);
  c.mutable_training()->set_grad_accum_steps(4);
  c.mutable_training()->set_steps(1234);
  ModelConfig* m = c.mutable_model();
  m->set_type(ModelConfig::MLP);
  m->set_input_dim(20);
  m->set_num_classes(5);
  SetList(m->mutable_hidden(), {16, 8});
  m->set_activation(ModelConfig::TANH);
  m->set_classifier(true);
  m->set_seed(42);
  m->set_init_value(0.3f);
  c.mutable_data()->set_seed(99);
  c.mutable_data()->set_num_features(20);
  c.mutable_data()->set_num_classes(5);
  c.mutable_data()->set_noise(0.7);
  c.mutable_data()->set_test_examples(0);
  SetList(c.mutable_data()->mutable_targets(), {0.1f, -2.0f, 1e-3f});
  c.mutable_data()->set_num_categorical(3);
  c.mutable_data()->set_categories(7);
  c.mutable_data()->set_missing_rate(0.125);
  c.mutable_data()->set_path("/data/my table: v2.csv");
  c.mutable_data()->set_dir("");
  c.mutable_data()->set_label_column("# class");
  c.mutable_data()->set_test_fraction(1.0 / 3.0);
  c.mutable_data()->set_standardize(false);
  c.mutable_worker()->set_device(WorkerConfig::CUDA);
  c.mutable_evaluation()->set_every_steps(25);
  c.mutable_server()->set_chunk_bytes(1 << 20);
  c.mutable_network()->set_rpc_timeout_s(2.5);
  c.mutable_network()->set_barrier_timeout_s(0.1);
  c.mutable_network()->set_startup_timeout_s(600);
  c.mutable_checkpoint()->set_dir("/ckpt dir");
  c.mutable_checkpoint()->set_every_steps(10);
  c.mutable_checkpoint()->set_every_seconds(1.5);
  c.mutable_checkpoint()->set_keep(3);
  c.mutable_network()->set_lease_s(2.5);
  c.mutable_network()->set_wire_dtype(v1::DTYPE_BF16);
  FinalizeJobConfig(&c);

  const std::string yaml = JobConfigToYaml(c);
  absl::StatusOr<JobConfig> back = ParseJobConfig(yaml, "roundtrip");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  ExpectSameConfig(*back, c);
  EXPECT_THAT(yaml, HasSubstr("staleness: inf"));

  c.mutable_training()->set_staleness(3);
  back = ParseJobConfig(JobConfigToYaml(c), "roundtrip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training().staleness(), 3);

  back = ParseJobConfig(JobConfigToYaml(DefaultJobConfig()), "roundtrip");
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameConfig(*back, DefaultJobConfig());
}

struct BadYaml {
  const char* text;
  std::vector<std::string> expected;  // substrings of the error message
};

TEST(JobConfigTest, ParseErrorsNameSourceLineAndKey) {
  const std::vector<BadYaml> cases = {
      {"job:\n  workers: 2\ntraining:\n  mode: sync\n  steps: 3\n"
       "  local_batch: 4\n  base_lr: fast\n",
       {"job.yaml:7: training.base_lr: expected a number, got 'fast'"}},
      {"job:\n  name: x\n  wokers: 2\n",
       {"job.yaml:3: unknown key 'wokers' in section 'job'"}},
      {"job: {}\ntrainig:\n  steps: 3\n",
       {"job.yaml:2: unknown section 'trainig'", "training"}},
      {"job: 3\n", {"job.yaml:1: job: expected a map, got '3'"}},
      {"job: [1, 2]\n", {"job.yaml:1: job: expected a map, got a list"}},
      {"- job\n", {"job.yaml:1:", "expected a map of sections, got a list"}},
      {"job:\n  workers: {a: 1}\n",
       {"job.yaml:2: job.workers: expected an integer, got a map"}},
      {"job:\n  workers: 2.5\n",
       {"job.yaml:2: job.workers: expected an integer, got '2.5'"}},
      {"job:\n  servers: -1\n",
       {"job.yaml:2: job.servers: must be >= 0, got -1"}},
      {"training:\n  steps: -5\n",
       {"job.yaml:2: training.steps: must be >= 0, got -5"}},
      {"\ntraining:\n  warmup_steps: -5\n",
       {"job.yaml:3: training.warmup_steps: must be >= 0"}},
      {"training:\n  base_lr: 0\n",
       {"job.yaml:2: training.base_lr: must be > 0, got 0"}},
      {"training:\n  base_lr:\n",
       {"job.yaml:2", "training.base_lr: expected a number, got nothing"}},
      {"training:\n  mode: eventually\n",
       {"job.yaml:2: training.mode: expected one of sync, async, allreduce, "
        "got "
        "'eventually'"}},
      {"training:\n  optimizer: lamb\n",
       {"job.yaml:2: training.optimizer: expected one of sgd, momentum, adam, "
        "adamw, adagrad"}},
      {"training:\n  lr_schedule: linear\n",
       {"job.yaml:2: training.lr_schedule: expected one of constant, step, "
        "cosine"}},
      {"training:\n  lr_scaling: sqrt\n",
       {"job.yaml:2: training.lr_scaling: expected one of none, linear"}},
      {"training:\n  staleness: -2\n",
       {"job.yaml:2: training.staleness: expected an integer >= 0 or 'inf'"}},
      {"training:\n  staleness: forever\n",
       {"job.yaml:2: training.staleness:", "'forever'"}},
      {"training:\n  nesterov: maybe\n",
       {"job.yaml:2: training.nesterov: expected true or false, got 'maybe'"}},
      {"model:\n  type: cnn\n",
       {"job.yaml:2: model.type: expected one of scalar, linear, softmax, "
        "mlp"}},
      {"model:\n  activation: sigmoid\n",
       {"job.yaml:2: model.activation: expected one of relu, tanh, gelu"}},
      {"model:\n  hidden: 64\n",
       {"job.yaml:2: model.hidden: expected a list, got '64'"}},
      {"model:\n  hidden:\n    - 64\n    - wide\n",
       {"job.yaml:4: model.hidden[1]: expected an integer, got 'wide'"}},
      {"data:\n  targets: [1, x]\n",
       {"job.yaml:2: data.targets[1]: expected a number, got 'x'"}},
      {"data:\n  source: imagenet\n",
       {"job.yaml:2: data.source: expected one of synthetic"}},
      {"data:\n  noise: .nan\n", {"job.yaml:2: data.noise: expected a number"}},
      {"evaluation:\n  every: 5\n",
       {"job.yaml:2: unknown key 'every' in section 'evaluation'"}},
      {"server:\n  chunk_bytes: -64\n",
       {"job.yaml:2: server.chunk_bytes: must be >= 0"}},
      {"network:\n  rpc_timeout_s: 0\n",
       {"job.yaml:2: network.rpc_timeout_s: must be > 0"}},
      {"job:\n  workers: 1\n  workers: 2\n",
       {"job.yaml:3: duplicate key 'workers' in section 'job'"}},
      {"job:\n  name: x\n training: {\n", {"job.yaml:3:", "syntax error"}},
      {"job: {name: x\n", {"job.yaml:", "syntax error"}},
      // A CRLF file's last line without its newline keeps the '\r'.
      {"job:\n  name: bench\r",
       {"job.yaml:2: job.name: expected a string without control "
        "characters, got byte 0x0d at position 5"}},
      {"data:\n  path: \"a\\tb.csv\"\n",
       {"job.yaml:2: data.path: expected a string without control "
        "characters, got byte 0x09 at position 1"}},
  };
  for (const BadYaml& bad : cases) {
    SCOPED_TRACE(bad.text);
    absl::StatusOr<JobConfig> c = ParseJobConfig(bad.text, "job.yaml");
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& part : bad.expected) {
      EXPECT_THAT(std::string(c.status().message()), HasSubstr(part));
    }
  }
}

// model.type wide_deep with 3 synthetic categorical columns: a valid job.
void UseWideDeep(JobConfig* c) {
  c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
  c->mutable_model()->set_sparse_columns(3);
  c->mutable_data()->set_sparse_columns(3);
}

struct BadConfig {
  void (*mutate)(JobConfig*);
  const char* key;
};

TEST(JobConfigTest, ValidateErrorsNameTheKey) {
  const std::vector<BadConfig> cases = {
      {[](JobConfig* c) { c->mutable_job()->set_workers(0); }, "job.workers"},
      {[](JobConfig* c) { c->mutable_job()->set_servers(0); }, "job.servers"},
      {[](JobConfig* c) { c->mutable_training()->set_steps(0); },
       "training.steps"},
      {[](JobConfig* c) { c->mutable_training()->set_local_batch(0); },
       "training.local_batch"},
      {[](JobConfig* c) { c->mutable_training()->set_grad_accum_steps(0); },
       "training.grad_accum_steps"},
      {[](JobConfig* c) { c->mutable_training()->set_staleness(-2); },
       "training.staleness"},
      {[](JobConfig* c) {
         c->mutable_training()->set_mode(v1::MODE_UNSPECIFIED);
       },
       "training.mode"},
      {[](JobConfig* c) {
         c->mutable_training()->mutable_optimizer()->set_kind(
             OptimizerConfig::KIND_UNSPECIFIED);
       },
       "training.optimizer"},
      {[](JobConfig* c) {
         c->mutable_training()->mutable_optimizer()->set_base_lr(-1);
       },
       "training.base_lr"},
      {[](JobConfig* c) {
         c->mutable_training()->mutable_optimizer()->set_momentum(1.0);
       },
       "training.momentum"},
      {[](JobConfig* c) {
         c->mutable_training()->mutable_optimizer()->set_beta2(-0.1);
       },
       "training.beta2"},
      {[](JobConfig* c) {
         c->mutable_training()->mutable_optimizer()->set_epsilon(-1);
       },
       "training.epsilon"},
      {[](JobConfig* c) {
         c->mutable_training()->mutable_optimizer()->set_weight_decay(-1);
       },
       "training.weight_decay"},
      {[](JobConfig* c) {
         c->mutable_training()->mutable_optimizer()->set_schedule(
             OptimizerConfig::STEP);
         c->mutable_training()->mutable_optimizer()->set_step_size(0);
       },
       "training.step_size"},
      {[](JobConfig* c) {
         c->mutable_training()->mutable_optimizer()->set_min_lr_ratio(2);
       },
       "training.min_lr_ratio"},
      {[](JobConfig* c) {
         c->mutable_training()->mutable_optimizer()->set_linear_scaling(true);
         c->mutable_training()->mutable_optimizer()->set_reference_batch(0);
       },
       "training.reference_batch"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::MODEL_TYPE_UNSPECIFIED);
       },
       "model.type"},
      {[](JobConfig* c) {
         SetList(c->mutable_model()->mutable_hidden(), {64, 0});
       },
       "model.hidden[1]"},
      {[](JobConfig* c) { c->mutable_model()->set_input_dim(16); },
       "model.input_dim"},
      {[](JobConfig* c) { c->mutable_data()->set_num_features(16); },
       "data.num_features"},
      {[](JobConfig* c) { c->mutable_model()->set_num_classes(3); },
       "model.num_classes"},
      {[](JobConfig* c) { c->mutable_data()->set_num_classes(3); },
       "data.num_classes"},
      {[](JobConfig* c) { c->mutable_model()->set_type(ModelConfig::SCALAR); },
       "data.targets"},
      {[](JobConfig* c) { c->mutable_data()->set_noise(-0.5); }, "data.noise"},
      {[](JobConfig* c) { c->mutable_evaluation()->set_every_steps(-1); },
       "evaluation.every_steps"},
      {[](JobConfig* c) { c->mutable_server()->set_chunk_bytes(32); },
       "server.chunk_bytes"},
      {[](JobConfig* c) { c->mutable_checkpoint()->set_every_steps(-1); },
       "checkpoint.every_steps"},
      {[](JobConfig* c) { c->mutable_checkpoint()->set_every_seconds(-1); },
       "checkpoint.every_seconds"},
      {[](JobConfig* c) { c->mutable_checkpoint()->set_keep(-1); },
       "checkpoint.keep"},
      {[](JobConfig* c) { c->mutable_network()->set_lease_s(0); },
       "network.lease_s"},
      {[](JobConfig* c) {
         c->mutable_training()->set_on_failure(v1::TrainingConfig::RESTART);
         c->mutable_training()->set_mode(v1::MODE_ALLREDUCE);
         c->mutable_allreduce()->set_backend(v1::AllReduceConfig::NCCL);
       },
       "'restart' in mode allreduce needs allreduce.backend: grpc"},
      {[](JobConfig* c) { c->mutable_training()->set_restart_timeout_s(0); },
       "training.restart_timeout_s"},
      {[](JobConfig* c) { c->mutable_training()->set_max_restarts(-1); },
       "training.max_restarts"},
      {[](JobConfig* c) {
         c->mutable_training()->set_mode(v1::MODE_ALLREDUCE);
         c->mutable_training()->set_on_failure(v1::TrainingConfig::ELASTIC);
         c->mutable_allreduce()->set_backend(v1::AllReduceConfig::NCCL);
       },
       "'elastic' in mode allreduce needs allreduce.backend: grpc"},
      {[](JobConfig* c) {
         c->mutable_job()->set_workers(3);
         c->mutable_training()->set_on_failure(v1::TrainingConfig::ELASTIC);
         c->mutable_training()->set_backup_workers(1);
       },
       "'elastic' in mode sync needs training.backup_workers: 0"},
      {[](JobConfig* c) { c->mutable_training()->set_min_workers(0); },
       "training.min_workers"},
      {[](JobConfig* c) { c->mutable_training()->set_min_workers(3); },
       "training.min_workers"},
      {[](JobConfig* c) { c->mutable_server()->set_chunk_bytes(1002); },
       "server.chunk_bytes"},
      {[](JobConfig* c) {
         c->mutable_server()->set_chunk_bytes((4 << 20) + 4);
       },
       "server.chunk_bytes"},
      {[](JobConfig* c) { c->mutable_network()->set_rpc_timeout_s(0); },
       "network.rpc_timeout_s"},
      {[](JobConfig* c) { c->mutable_network()->set_barrier_timeout_s(-1); },
       "network.barrier_timeout_s"},
      {[](JobConfig* c) { c->mutable_network()->set_startup_timeout_s(0); },
       "network.startup_timeout_s"},
      // Sparse columns and the wide_deep model.
      {[](JobConfig* c) { c->mutable_data()->set_sparse_columns(2); },
       "data.sparse_columns: needs model.type wide_deep"},
      {[](JobConfig* c) { c->mutable_data()->set_sparse_cardinality(1); },
       "data.sparse_cardinality"},
      {[](JobConfig* c) { c->mutable_data()->set_zipf_exponent(0); },
       "data.zipf_exponent"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_input_dim(13);
         c->mutable_model()->set_sparse_columns(26);
         c->mutable_model()->set_num_classes(2);
         c->mutable_data()->set_source(DataConfig::CRITEO);
         c->mutable_data()->set_path("day_0.tsv");
         c->mutable_data()->set_sparse_columns(26);
       },
       "data.sparse_columns: applies to data.source synthetic only"},
      {[](JobConfig* c) {
         c->mutable_data()->set_source(DataConfig::CRITEO);
         c->mutable_data()->set_path("day_0.tsv");
       },
       "data.source: criteo needs model.type wide_deep"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_sparse_columns(3);
         c->mutable_data()->set_sparse_columns(2);
       },
       "model.sparse_columns: is 3 but data.sparse_columns is 2"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_sparse_columns(0);
       },
       "model.sparse_columns"},
      {[](JobConfig* c) {
         UseWideDeep(c);
         c->mutable_training()->set_mode(v1::MODE_ALLREDUCE);
         c->mutable_allreduce()->set_backend(v1::AllReduceConfig::NCCL);
       },
       "allreduce.backend: nccl does not carry row-sparse tables"},
      {[](JobConfig* c) {
         c->mutable_training()->set_mode(v1::MODE_ALLREDUCE);
         c->mutable_allreduce()->set_sparse(v1::AllReduceConfig::ALLGATHER);
       },
       "allreduce.sparse: allgather applies to models with a row-sparse "
       "table"},
      {[](JobConfig* c) {
         UseWideDeep(c);
         c->mutable_training()->set_mode(v1::MODE_ASYNC);
         c->mutable_training()->set_on_failure(v1::TrainingConfig::ELASTIC);
       },
       "training.on_failure: elastic with row-sparse tables (model.type "
       "wide_deep) needs training.mode sync"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_sparse_columns(2);
         c->mutable_data()->set_sparse_columns(2);
         c->mutable_model()->set_buckets(0);
       },
       "model.buckets"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_sparse_columns(2);
         c->mutable_data()->set_sparse_columns(2);
         c->mutable_model()->set_embedding_dim(0);
       },
       "model.embedding_dim"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_sparse_columns(2);
         c->mutable_data()->set_sparse_columns(2);
         c->mutable_model()->set_hashes(0);
       },
       "model.hashes"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_sparse_columns(2);
         c->mutable_data()->set_sparse_columns(2);
         c->mutable_model()->set_pooling(ModelConfig::POOLING_UNSPECIFIED);
       },
       "model.pooling"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_sparse_columns(2);
         c->mutable_data()->set_sparse_columns(2);
         SetList(c->mutable_model()->mutable_bottom_hidden(), {8, 0});
       },
       "model.bottom_hidden[1]"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_sparse_columns(2);
         c->mutable_data()->set_source(DataConfig::CSV);
         c->mutable_data()->set_path("x.csv");
       },
       "data.source: csv has no categorical columns"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_sparse_columns(26);
         c->mutable_model()->set_num_classes(2);
         c->mutable_data()->set_source(DataConfig::CRITEO);
         c->mutable_data()->set_path("day_0.tsv");
       },
       "model.input_dim: must be 13 with data.source criteo"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_input_dim(13);
         c->mutable_model()->set_sparse_columns(25);
         c->mutable_model()->set_num_classes(2);
         c->mutable_data()->set_source(DataConfig::CRITEO);
         c->mutable_data()->set_path("day_0.tsv");
       },
       "model.sparse_columns: must be 26 with data.source criteo"},
      {[](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::WIDE_DEEP);
         c->mutable_model()->set_input_dim(13);
         c->mutable_model()->set_sparse_columns(26);
         c->mutable_model()->set_num_classes(2);
         c->mutable_data()->set_source(DataConfig::CRITEO);
       },
       "data.path: is required with data.source criteo"},
  };
  for (const BadConfig& bad : cases) {
    SCOPED_TRACE(bad.key);
    JobConfig c = DefaultJobConfig();
    bad.mutate(&c);
    absl::Status status = ValidateJobConfig(c);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(bad.key));
  }
}

TEST(JobConfigTest, RestartPolicyIsAcceptedInModesSyncAndAsync) {
  JobConfig c = DefaultJobConfig();
  c.mutable_training()->set_on_failure(v1::TrainingConfig::RESTART);
  EXPECT_TRUE(ValidateJobConfig(c).ok());
  EXPECT_EQ(c.training().restart_timeout_s(), 60);
  EXPECT_EQ(c.training().max_restarts(), 3);
  // Async rolls back to the newest clock cut
  // (docs/failures-and-recovery.md).
  c.mutable_training()->set_mode(v1::MODE_ASYNC);
  c.mutable_training()->set_staleness(2);
  EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
}

// Mode allreduce checkpoints (rank 0 writes its replica), by steps and by
// time; the automatic restart with the gRPC ring (not with NCCL).
TEST(JobConfigTest, CheckpointsAreAcceptedInModeAllreduce) {
  JobConfig c = DefaultJobConfig();
  c.mutable_training()->set_mode(v1::MODE_ALLREDUCE);
  c.mutable_checkpoint()->set_every_steps(10);
  c.mutable_checkpoint()->set_every_seconds(30);
  c.mutable_checkpoint()->set_keep(2);
  EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
  c.mutable_training()->set_on_failure(v1::TrainingConfig::RESTART);
  EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
  c.mutable_allreduce()->set_backend(v1::AllReduceConfig::NCCL);
  EXPECT_THAT(std::string(ValidateJobConfig(c).message()),
              HasSubstr("training.on_failure: 'restart' in mode allreduce "
                        "needs allreduce.backend: grpc"));
}

TEST(JobConfigTest, ElasticPolicyIsAcceptedInModesSyncAndAsync) {
  for (v1::ConsistencyMode mode : {v1::MODE_SYNC, v1::MODE_ASYNC}) {
    JobConfig c = DefaultJobConfig();
    c.mutable_job()->set_workers(3);
    c.mutable_training()->set_mode(mode);
    c.mutable_training()->set_on_failure(v1::TrainingConfig::ELASTIC);
    c.mutable_training()->set_min_workers(2);
    EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
  }
}

// Row-sparse tables: stand-ins pull and push the dead rank's rows (sync).
TEST(JobConfigTest, ElasticPolicyIsAcceptedForWideDeepInModeSync) {
  JobConfig c = DefaultJobConfig();
  UseWideDeep(&c);
  c.mutable_training()->set_mode(v1::MODE_SYNC);
  c.mutable_training()->set_on_failure(v1::TrainingConfig::ELASTIC);
  EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
}

// Row-sparse tables: async checkpoints hold the row clocks at each cut.
TEST(JobConfigTest, AsyncCheckpointsAreAcceptedForWideDeep) {
  JobConfig c = DefaultJobConfig();
  UseWideDeep(&c);
  c.mutable_training()->set_mode(v1::MODE_ASYNC);
  c.mutable_checkpoint()->set_every_steps(10);
  c.mutable_checkpoint()->set_dir("ckpt");
  EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
}

// Mode allreduce: a live worker hosts a lost rank and every rank rolls
// back, as under restart: the gRPC ring only
// (docs/failures-and-recovery.md, "Elastic workers").
TEST(JobConfigTest, ElasticPolicyIsAcceptedInModeAllreduceWithTheGrpcRing) {
  JobConfig c = DefaultJobConfig();
  c.mutable_job()->set_workers(3);
  c.mutable_training()->set_mode(v1::MODE_ALLREDUCE);
  c.mutable_training()->set_on_failure(v1::TrainingConfig::ELASTIC);
  c.mutable_training()->set_min_workers(2);
  c.mutable_checkpoint()->set_every_steps(5);
  EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
  c.mutable_allreduce()->set_backend(v1::AllReduceConfig::NCCL);
  const absl::Status nccl = ValidateJobConfig(c);
  EXPECT_EQ(nccl.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(nccl.message()),
              HasSubstr("training.on_failure: 'elastic' in mode allreduce "
                        "needs allreduce.backend: grpc"));
}

TEST(JobConfigTest, ValidateAcceptsBoundaryValues) {
  JobConfig c = DefaultJobConfig();
  c.mutable_training()->set_staleness(-1);
  c.mutable_server()->set_chunk_bytes(64);
  EXPECT_TRUE(ValidateJobConfig(c).ok());
  c.mutable_server()->set_chunk_bytes(4 << 20);
  EXPECT_TRUE(ValidateJobConfig(c).ok());
  // A scalar model ignores input_dim / num_features.
  c.mutable_model()->set_type(ModelConfig::SCALAR);
  c.mutable_model()->set_input_dim(1);
  c.mutable_model()->set_num_classes(1);
  c.mutable_data()->set_num_classes(1);
  SetList(c.mutable_data()->mutable_targets(), {1, 3});
  EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
  // Async jobs checkpoint at clock cuts.
  JobConfig a = DefaultJobConfig();
  a.mutable_training()->set_mode(v1::MODE_ASYNC);
  a.mutable_checkpoint()->set_every_steps(5);
  EXPECT_TRUE(ValidateJobConfig(a).ok()) << ValidateJobConfig(a);
  // ... and at time cuts (the next clock the shards can hold).
  a.mutable_checkpoint()->set_every_seconds(30);
  EXPECT_TRUE(ValidateJobConfig(a).ok()) << ValidateJobConfig(a);
}

TEST(JobConfigTest, StragglerModelKeys) {
  absl::StatusOr<JobConfig> c = ParseJobConfig(R"(
job: {workers: 4}
training: {steps: 30}
worker: {compute_ms: 10, transient_straggler_p: 0.1,
         transient_straggler_factor: 3, pause_rank: 2, pause_at_step: 12,
         pause_s: 0.5}
)",
                                               "job.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->worker().transient_straggler_p(), 0.1);
  EXPECT_EQ(c->worker().transient_straggler_factor(), 3);
  EXPECT_EQ(c->worker().pause_rank(), 2);
  EXPECT_EQ(c->worker().pause_at_step(), 12);
  EXPECT_EQ(c->worker().pause_s(), 0.5);
  EXPECT_TRUE(ValidateJobConfig(*c).ok()) << ValidateJobConfig(*c);
  // Defaults: no transient stragglers, no pause.
  JobConfig d = DefaultJobConfig();
  EXPECT_EQ(d.worker().transient_straggler_p(), 0);
  EXPECT_EQ(d.worker().pause_rank(), -1);

  const std::vector<BadConfig> cases = {
      {[](JobConfig* c) {
         c->mutable_worker()->set_transient_straggler_p(1.5);
       },
       "worker.transient_straggler_p: must be in [0, 1], got 1.5"},
      {[](JobConfig* c) {
         c->mutable_worker()->set_transient_straggler_factor(0.5);
       },
       "worker.transient_straggler_factor: must be >= 1"},
      {[](JobConfig* c) { c->mutable_worker()->set_pause_rank(4); },
       "worker.pause_rank: must be -1 (none) or a rank below job.workers (4)"},
      {[](JobConfig* c) {
         c->mutable_worker()->set_pause_rank(1);
         c->mutable_worker()->set_pause_s(1);
         c->mutable_worker()->set_pause_at_step(30);
       },
       "worker.pause_at_step: must be in [0, training.steps (30))"},
      {[](JobConfig* c) {
         c->mutable_worker()->set_pause_rank(1);
         c->mutable_worker()->set_pause_at_step(3);
       },
       "worker.pause_s: must be > 0 and below network.barrier_timeout_s"},
      {[](JobConfig* c) {
         c->mutable_worker()->set_pause_rank(1);
         c->mutable_worker()->set_pause_at_step(3);
         c->mutable_worker()->set_pause_s(1000);
       },
       "worker.pause_s: must be > 0 and below network.barrier_timeout_s"},
      {[](JobConfig* c) { c->mutable_worker()->set_pause_s(2); },
       "worker.pause_s: needs worker.pause_rank set"},
  };
  for (const BadConfig& bad : cases) {
    SCOPED_TRACE(bad.key);
    JobConfig b = *c;
    b.mutable_worker()->set_pause_rank(-1);
    b.mutable_worker()->set_pause_s(0);
    bad.mutate(&b);
    absl::Status status = ValidateJobConfig(b);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(bad.key));
  }
}

TEST(JobConfigTest, AsyncLrPerPush) {
  absl::StatusOr<JobConfig> c = ParseJobConfig(
      "training: {mode: async, async_lr_per_push: scaled}\n", "job.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->training().async_lr_per_push(), v1::TrainingConfig::SCALED);
  EXPECT_TRUE(ValidateJobConfig(*c).ok()) << ValidateJobConfig(*c);
  EXPECT_THAT(JobConfigToYaml(*c), HasSubstr("async_lr_per_push: scaled"));
  EXPECT_EQ(DefaultJobConfig().training().async_lr_per_push(),
            v1::TrainingConfig::FULL);
  JobConfig sync = *c;
  sync.mutable_training()->set_mode(v1::MODE_SYNC);
  EXPECT_THAT(
      ValidateJobConfig(sync).message(),
      HasSubstr("training.async_lr_per_push: 'scaled' applies to mode async"));
  absl::StatusOr<JobConfig> bad = ParseJobConfig(
      "training: {mode: async, async_lr_per_push: half}\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("training.async_lr_per_push"));
}

// training.clock: model in async, and what it refuses before anything
// starts (the recovery paths, checkpoints, overlap, row-sparse tables).
TEST(JobConfigTest, ModelClock) {
  absl::StatusOr<JobConfig> c =
      ParseJobConfig("training: {mode: async, clock: model}\n", "job.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->training().clock(), v1::TrainingConfig::CLOCK_MODEL);
  EXPECT_TRUE(ValidateJobConfig(*c).ok()) << ValidateJobConfig(*c);
  EXPECT_THAT(JobConfigToYaml(*c), HasSubstr("clock: model"));
  EXPECT_EQ(DefaultJobConfig().training().clock(),
            v1::TrainingConfig::CLOCK_WORKER);
  // Sync follows the model already: accepted, and changes nothing.
  JobConfig sync = *c;
  sync.mutable_training()->set_mode(v1::MODE_SYNC);
  EXPECT_TRUE(ValidateJobConfig(sync).ok()) << ValidateJobConfig(sync);
  struct Bad {
    std::function<void(JobConfig*)> mutate;
    std::string says;
  };
  for (const Bad& bad : std::vector<Bad>{
           {[](JobConfig* b) {
              b->mutable_training()->set_on_failure(
                  v1::TrainingConfig::RESTART);
            },
            "model needs training.on_failure fail, got restart"},
           {[](JobConfig* b) {
              b->mutable_training()->set_on_failure(
                  v1::TrainingConfig::ELASTIC);
            },
            "got elastic"},
           {[](JobConfig* b) { b->mutable_checkpoint()->set_every_steps(5); },
            "model takes no checkpoints"},
           {[](JobConfig* b) { b->mutable_checkpoint()->set_every_seconds(5); },
            "model takes no checkpoints"},
           {[](JobConfig* b) {
              b->mutable_worker()->set_overlap(true);
              b->mutable_worker()->set_compute_ms(5);
            },
            "model does not overlap"},
           {[](JobConfig* b) { UseWideDeep(b); },
            "model does not take row-sparse tables"}}) {
    JobConfig b = *c;
    bad.mutate(&b);
    absl::Status status = ValidateJobConfig(b);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.says;
    EXPECT_THAT(std::string(status.message()), HasSubstr("training.clock"));
    EXPECT_THAT(std::string(status.message()), HasSubstr(bad.says));
  }
  absl::StatusOr<JobConfig> unknown =
      ParseJobConfig("training: {mode: async, clock: wall}\n", "job.yaml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("training.clock"));
}

TEST(JobConfigTest, LoadMissingFileIsNotFound) {
  absl::StatusOr<JobConfig> c = LoadJobConfig("/nonexistent/dir/job.yaml");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("/nonexistent/dir/job.yaml"));
}

TEST(JobConfigTest, LoadNamesTheFileInErrors) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/load_test.yaml";
  {
    std::ofstream out(path);
    out << "job:\n  workers: 3\n  servers: many\n";
  }
  absl::StatusOr<JobConfig> c = LoadJobConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr(path + ":3: job.servers: expected an integer"));
  {
    std::ofstream out(path);
    out << "job:\n  workers: 3\n";
  }
  c = LoadJobConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->job().workers(), 3);
  std::remove(path.c_str());
}

TEST(JobConfigTest, ExampleConfigsParseAndValidate) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("configs")) {
    if (entry.path().extension() == ".yaml") {
      names.push_back(entry.path().filename().string());
    }
  }
  EXPECT_THAT(names, testing::IsSupersetOf(
                         {"default.yaml", "async.yaml", "worked_example.yaml",
                          "digits.yaml", "breast_cancer.yaml"}));
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    absl::StatusOr<JobConfig> c = LoadJobConfig("configs/" + name);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(ValidateJobConfig(*c).ok()) << ValidateJobConfig(*c);
    // The effective config handed to workers must survive serialisation.
    absl::StatusOr<JobConfig> back = ParseJobConfig(JobConfigToYaml(*c), name);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSameConfig(*back, *c);
  }
}

TEST(JobConfigTest, WorkedExampleConfig) {
  absl::StatusOr<JobConfig> c = LoadJobConfig("configs/worked_example.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model().type(), ModelConfig::SCALAR);
  EXPECT_EQ(c->model().init_value(), 2.0f);
  EXPECT_THAT(c->data().targets(), ElementsAre(1, 3, 5, 7));
  EXPECT_EQ(c->job().workers(), 2);
  EXPECT_EQ(c->job().servers(), 1);
  EXPECT_EQ(c->training().local_batch(), 2);
  EXPECT_EQ(c->training().steps(), 1);
  EXPECT_EQ(c->training().optimizer().kind(), OptimizerConfig::SGD);
  EXPECT_EQ(c->training().optimizer().base_lr(), 0.1);
  EXPECT_EQ(c->training().optimizer().global_batch(), 4u);
}

TEST(JobConfigTest, RealDataConfigs) {
  absl::StatusOr<JobConfig> c = LoadJobConfig("configs/digits.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data().source(), DataConfig::DIGITS);
  EXPECT_EQ(c->data().dir(), ".cache/pstrain/datasets");
  EXPECT_EQ(c->training().mode(), v1::MODE_SYNC);
  EXPECT_EQ(c->job().workers(), 4);
  EXPECT_EQ(c->job().servers(), 2);
  EXPECT_EQ(c->model().input_dim(), 64);
  EXPECT_THAT(c->model().hidden(), ElementsAre(128));
  EXPECT_EQ(c->model().num_classes(), 10);
  EXPECT_EQ(c->training().optimizer().kind(), OptimizerConfig::MOMENTUM);
  EXPECT_EQ(c->training().optimizer().schedule(), OptimizerConfig::COSINE);
  EXPECT_GT(c->training().optimizer().warmup_steps(), 0u);
  EXPECT_EQ(c->training().optimizer().global_batch(), 128u);

  c = LoadJobConfig("configs/breast_cancer.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data().source(), DataConfig::BREAST_CANCER);
  EXPECT_EQ(c->model().input_dim(), 30);
  EXPECT_EQ(c->model().num_classes(), 2);
}

TEST(JobConfigTest, SparseConfig) {
  absl::StatusOr<JobConfig> c = LoadJobConfig("configs/sparse.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(ValidateJobConfig(*c).ok()) << ValidateJobConfig(*c);
  EXPECT_EQ(c->model().type(), ModelConfig::WIDE_DEEP);
  EXPECT_EQ(c->model().buckets(), 10000000);
  EXPECT_EQ(c->model().embedding_dim(), 16);
  EXPECT_EQ(c->model().pooling(), ModelConfig::SUM);
  EXPECT_EQ(c->model().sparse_columns(), c->data().sparse_columns());
  EXPECT_EQ(c->job().workers(), 4);
  EXPECT_EQ(c->job().servers(), 2);
  EXPECT_EQ(c->data().source(), DataConfig::SYNTHETIC);
  EXPECT_GT(c->data().zipf_exponent(), 0);

  // A criteo job: 13 numeric and 26 categorical columns, 2 classes.
  JobConfig criteo = *c;
  criteo.mutable_model()->set_input_dim(13);
  criteo.mutable_model()->set_sparse_columns(26);
  criteo.mutable_model()->set_num_classes(2);
  criteo.mutable_data()->set_source(DataConfig::CRITEO);
  criteo.mutable_data()->set_path("day_0.tsv");
  criteo.mutable_data()->set_sparse_columns(0);
  EXPECT_TRUE(ValidateJobConfig(criteo).ok()) << ValidateJobConfig(criteo);

  // Every sparse key parses.
  absl::StatusOr<JobConfig> keys = ParseJobConfig(
      "model: {type: wide_deep, sparse_columns: 3, buckets: 77, "
      "embedding_dim: 5, hashes: 2, pooling: mean, bottom_hidden: [6, 4]}\n"
      "data: {source: criteo, sparse_columns: 3, sparse_cardinality: 99, "
      "zipf_exponent: 0.8}\n",
      "s.yaml");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->model().type(), ModelConfig::WIDE_DEEP);
  EXPECT_EQ(keys->model().sparse_columns(), 3);
  EXPECT_EQ(keys->model().buckets(), 77);
  EXPECT_EQ(keys->model().embedding_dim(), 5);
  EXPECT_EQ(keys->model().hashes(), 2);
  EXPECT_EQ(keys->model().pooling(), ModelConfig::MEAN);
  EXPECT_THAT(keys->model().bottom_hidden(), ElementsAre(6, 4));
  EXPECT_EQ(keys->data().source(), DataConfig::CRITEO);
  EXPECT_EQ(keys->data().sparse_columns(), 3);
  EXPECT_EQ(keys->data().sparse_cardinality(), 99);
  EXPECT_EQ(keys->data().zipf_exponent(), 0.8);

  absl::StatusOr<JobConfig> parsed =
      ParseJobConfig("model: {type: wide_deep, pooling: average}\n", "s.yaml");
  EXPECT_THAT(std::string(parsed.status().message()),
              HasSubstr("model.pooling"));
}

TEST(JobConfigTest, AsyncConfigHasBoundedStaleness) {
  absl::StatusOr<JobConfig> c = LoadJobConfig("configs/async.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->training().mode(), v1::MODE_ASYNC);
  EXPECT_EQ(c->training().staleness(), 2);
}

// Issue 11 #6: AdaGrad's own epsilon default (1e-10) is what a job file
// without `epsilon` gets; `epsilon: 0` is rejected with a hint.
TEST(JobConfigTest, EpsilonUnsetMeansTheOptimizersDefault) {
  absl::StatusOr<JobConfig> c =
      ParseJobConfig("training:\n  optimizer: adagrad\n", "job.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->training().optimizer().epsilon(), 0);  // unset
  EXPECT_TRUE(ValidateJobConfig(*c).ok());
  absl::StatusOr<std::unique_ptr<Optimizer>> adagrad =
      Optimizer::Create(c->training().optimizer());
  ASSERT_TRUE(adagrad.ok()) << adagrad.status();
  EXPECT_EQ((*adagrad)->config().epsilon(), 1e-10);
  c->mutable_training()->mutable_optimizer()->set_kind(OptimizerConfig::ADAM);
  absl::StatusOr<std::unique_ptr<Optimizer>> adam =
      Optimizer::Create(c->training().optimizer());
  ASSERT_TRUE(adam.ok()) << adam.status();
  EXPECT_EQ((*adam)->config().epsilon(), 1e-8);
  // Unset is omitted from the emitted YAML and stays unset.
  EXPECT_THAT(JobConfigToYaml(*c), ::testing::Not(HasSubstr("epsilon")));

  absl::StatusOr<JobConfig> zero =
      ParseJobConfig("training:\n  epsilon: 0\n", "job.yaml");
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(std::string(zero.status().message()),
              HasSubstr("job.yaml:2: training.epsilon: must be > 0"));
  absl::StatusOr<JobConfig> explicit_default =
      ParseJobConfig("training:\n  epsilon: 1e-10\n", "job.yaml");
  ASSERT_TRUE(explicit_default.ok()) << explicit_default.status();
  EXPECT_EQ(explicit_default->training().optimizer().epsilon(), 1e-10);
  absl::StatusOr<JobConfig> back =
      ParseJobConfig(JobConfigToYaml(*explicit_default), "emitted");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training().optimizer().epsilon(), 1e-10);
}

TEST(ParseStalenessTest, CountsAndInf) {
  EXPECT_EQ(ParseStaleness("0").value_or(-2), 0);
  EXPECT_EQ(ParseStaleness("3").value_or(-2), 3);
  EXPECT_EQ(ParseStaleness("inf").value_or(-2), -1);
  for (const char* bad : {"-1", "x", "", "1.5", "Inf"}) {
    absl::StatusOr<int64_t> s = ParseStaleness(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(std::string(s.status().message()),
                HasSubstr("expected an integer >= 0 or 'inf'"));
  }
}

// The key table drives parsing, emission and overrides: every emitted key
// can be set back through ApplyConfigOverride with its emitted value.
TEST(ConfigOverrideTest, EveryEmittedKeyOverridesToItself) {
  JobConfig c = DefaultJobConfig();
  c.mutable_training()->mutable_optimizer()->set_epsilon(
      1e-7);  // optional key: present when set
  SetList(c.mutable_data()->mutable_targets(), {1, 3});
  SetList(c.mutable_model()->mutable_hidden(), {16, 8});
  const YAML::Node root = YAML::Load(JobConfigToYaml(c));
  size_t seen = 0;
  for (const std::string& key : ConfigKeys()) {
    const size_t dot = key.find('.');
    const YAML::Node value = root[key.substr(0, dot)][key.substr(dot + 1)];
    ASSERT_TRUE(value.IsDefined()) << key << " not emitted";
    YAML::Emitter text;
    text << YAML::Flow << value;
    JobConfig d = DefaultJobConfig();
    absl::Status st = ApplyConfigOverride(key, text.c_str(), &d);
    EXPECT_TRUE(st.ok()) << key << "=" << text.c_str() << ": " << st;
    ++seen;
  }
  EXPECT_EQ(seen, ConfigKeys().size());
  EXPECT_GT(seen, 60u);
}

// The reference (docs/configuration.md) states every key, and its default
// column is the defaults: setting each documented default on a bare message
// gives DefaultJobConfig().
TEST(ConfigReferenceTest, DocumentsEveryKeyWithItsDefault) {
  const std::vector<ConfigKeyDoc> reference = ConfigReference();
  ASSERT_EQ(reference.size(), ConfigKeys().size());
  JobConfig c;
  for (size_t i = 0; i < reference.size(); ++i) {
    const ConfigKeyDoc& key = reference[i];
    const std::string name = key.section + "." + key.name;
    EXPECT_EQ(name, ConfigKeys()[i]);
    EXPECT_FALSE(key.type.empty()) << name;
    EXPECT_FALSE(key.description.empty()) << name;
    EXPECT_EQ(key.description.find('\n'), std::string::npos) << name;
    if (key.default_value.empty()) {  // optional, unset by default
      EXPECT_EQ(name, "training.epsilon");
      continue;
    }
    absl::Status st = ApplyConfigOverride(name, key.default_value, &c);
    EXPECT_TRUE(st.ok()) << name << "=" << key.default_value << ": " << st;
  }
  FinalizeJobConfig(&c);
  ExpectSameConfig(c, DefaultJobConfig());
  EXPECT_EQ(reference[1].type, "integer >= 0");  // job.workers
  EXPECT_EQ(reference[3].type, "`sync`, `async`, `allreduce`");
}

TEST(JobConfigTest, WireDtype) {
  EXPECT_EQ(DefaultJobConfig().network().wire_dtype(), v1::DTYPE_F32);
  absl::StatusOr<JobConfig> c =
      ParseJobConfig("network:\n  wire_dtype: bf16\n", "job.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->network().wire_dtype(), v1::DTYPE_BF16);
  EXPECT_THAT(JobConfigToYaml(*c), HasSubstr("wire_dtype: bf16"));
  JobConfig d = DefaultJobConfig();
  ASSERT_TRUE(ApplyConfigOverride("network.wire_dtype", "fp16", &d).ok());
  EXPECT_EQ(d.network().wire_dtype(), v1::DTYPE_F16);
  absl::StatusOr<JobConfig> bad =
      ParseJobConfig("network:\n  wire_dtype: int8\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("job.yaml:2: network.wire_dtype"));
  // Mode allreduce: the ring takes bf16, not fp16; nccl takes neither.
  JobConfig ring = DefaultJobConfig();
  ring.mutable_training()->set_mode(v1::MODE_ALLREDUCE);
  ring.mutable_network()->set_wire_dtype(v1::DTYPE_BF16);
  EXPECT_TRUE(ValidateJobConfig(ring).ok()) << ValidateJobConfig(ring);
  ring.mutable_network()->set_wire_dtype(v1::DTYPE_F16);
  absl::Status fp16 = ValidateJobConfig(ring);
  EXPECT_EQ(fp16.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(fp16.message()),
              HasSubstr("network.wire_dtype: mode allreduce sends fp32 or "
                        "bf16, not fp16"));
  ring.mutable_network()->set_wire_dtype(v1::DTYPE_BF16);
  ring.mutable_allreduce()->set_backend(v1::AllReduceConfig::NCCL);
  EXPECT_THAT(std::string(ValidateJobConfig(ring).message()),
              HasSubstr("the nccl backend reduces in fp32"));
}

// fp16 on the wire is valid but saturates beyond +-65504: a warning, not an
// error; the other dtypes warn of nothing.
TEST(JobConfigTest, Fp16WireIsAWarning) {
  JobConfig c = DefaultJobConfig();
  EXPECT_THAT(ConfigWarnings(c), ElementsAre());
  c.mutable_network()->set_wire_dtype(v1::DTYPE_BF16);
  EXPECT_THAT(ConfigWarnings(c), ElementsAre());
  c.mutable_network()->set_wire_dtype(v1::DTYPE_F16);
  EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
  EXPECT_THAT(ConfigWarnings(c),
              ElementsAre(AllOf(HasSubstr("network.wire_dtype: fp16"),
                                HasSubstr("65504"), HasSubstr("saturated"))));
}

// network.tcp_congestion_control: a kernel name or "" (the host's), at most
// 15 characters; in mode allreduce, which has no servers, a warning. Errors
// name the key, and the file and line when parsed.
TEST(JobConfigTest, TcpCongestionControl) {
  JobConfig c = DefaultJobConfig();
  EXPECT_EQ(c.network().tcp_congestion_control(), "");
  for (const char* name : {"cubic", "bbr", "dctcp", "reno"}) {
    c.mutable_network()->set_tcp_congestion_control(name);
    EXPECT_TRUE(ValidateJobConfig(c).ok()) << name << ValidateJobConfig(c);
    EXPECT_THAT(ConfigWarnings(c), ElementsAre()) << name;
  }
  for (const char* name : {"cubic bbr", "bbr;", "sixteen_letters_"}) {
    c.mutable_network()->set_tcp_congestion_control(name);
    const absl::Status st = ValidateJobConfig(c);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(st.message(),
                HasSubstr(absl::StrCat("network.tcp_congestion_control: '",
                                       name, "'")));
  }
  c.mutable_network()->set_tcp_congestion_control("cubic");
  c.mutable_training()->set_mode(v1::MODE_ALLREDUCE);
  EXPECT_THAT(ConfigWarnings(c),
              ElementsAre(AllOf(HasSubstr("network.tcp_congestion_control"),
                                HasSubstr("no servers"))));
  absl::StatusOr<JobConfig> parsed =
      ParseJobConfig("network:\n  tcp_congestion_control: 3.5\n", "j.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();  // a string, as YAML reads it
  EXPECT_EQ(parsed->network().tcp_congestion_control(), "3.5");
  parsed =
      ParseJobConfig("network:\n  tcp_congestion_control: [a]\n", "j.yaml");
  EXPECT_THAT(parsed.status().message(),
              HasSubstr("j.yaml:2: network.tcp_congestion_control"));
}

// network.push_streams: 0 (the default) is one stream in every layout;
// more than 1 only in plain sync; at most 8; errors name the key (and the
// file and line when parsed).
TEST(JobConfigTest, PushStreams) {
  JobConfig c = DefaultJobConfig();
  EXPECT_EQ(c.network().push_streams(), 0);
  ASSERT_EQ(c.training().mode(), v1::MODE_SYNC);
  ASSERT_EQ(c.job().workers(), 2);
  EXPECT_EQ(PushStreams(c), 1);
  c.mutable_job()->set_workers(1);
  c.mutable_job()->set_servers(2);
  FinalizeJobConfig(&c);
  EXPECT_EQ(PushStreams(c), 1);
  c.mutable_job()->set_servers(1);
  FinalizeJobConfig(&c);
  EXPECT_EQ(PushStreams(c), 1);  // one worker, one server: one stream too
  EXPECT_EQ(kDefaultPushStreams, 1);
  JobConfig async = c;
  async.mutable_training()->set_mode(v1::MODE_ASYNC);
  EXPECT_EQ(PushStreams(async), 1);
  JobConfig backup = c;
  backup.mutable_job()->set_workers(3);
  backup.mutable_training()->set_backup_workers(1);
  FinalizeJobConfig(&backup);
  EXPECT_EQ(PushStreams(backup), 1);
  absl::StatusOr<JobConfig> four =
      ParseJobConfig("network:\n  push_streams: 4\n", "job.yaml");
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(PushStreams(*four), 4);
  EXPECT_TRUE(ValidateJobConfig(*four).ok()) << ValidateJobConfig(*four);
  EXPECT_THAT(JobConfigToYaml(*four), HasSubstr("push_streams: 4"));
  absl::StatusOr<JobConfig> negative =
      ParseJobConfig("network:\n  push_streams: -1\n", "job.yaml");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(std::string(negative.status().message()),
              HasSubstr("job.yaml:2: network.push_streams"));
  JobConfig many = c;
  many.mutable_network()->set_push_streams(9);
  EXPECT_THAT(std::string(ValidateJobConfig(many).message()),
              HasSubstr("network.push_streams: must be <= 8, got 9"));
  for (JobConfig other : {async, backup}) {
    other.mutable_network()->set_push_streams(2);
    const absl::Status st = ValidateJobConfig(other);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("network.push_streams: a push splits over several "
                          "streams in mode sync without backup workers only"));
    other.mutable_network()->set_push_streams(1);
    EXPECT_TRUE(ValidateJobConfig(other).ok()) << ValidateJobConfig(other);
  }
}

// network.pull_streams: 0 (the default) is one stream in every layout;
// more than 1 only in plain sync (where every part reads the same step); at
// most 8; errors name the key (file and line).
TEST(JobConfigTest, PullStreams) {
  JobConfig c = DefaultJobConfig();
  EXPECT_EQ(c.network().pull_streams(), 0);
  EXPECT_EQ(PullStreams(c), 1);
  c.mutable_job()->set_workers(1);
  c.mutable_job()->set_servers(1);
  FinalizeJobConfig(&c);
  EXPECT_EQ(PullStreams(c), 1);
  JobConfig three = c;
  three.mutable_network()->set_pull_streams(3);
  EXPECT_TRUE(ValidateJobConfig(three).ok()) << ValidateJobConfig(three);
  EXPECT_EQ(PullStreams(three), 3);
  JobConfig async = three;
  async.mutable_training()->set_mode(v1::MODE_ASYNC);
  JobConfig backup = three;
  backup.mutable_job()->set_workers(3);
  backup.mutable_training()->set_backup_workers(1);
  FinalizeJobConfig(&backup);
  for (JobConfig other : {async, backup}) {
    const absl::Status st = ValidateJobConfig(other);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("network.pull_streams: a pull splits over several "
                          "streams in mode sync without backup workers only"));
    other.mutable_network()->set_pull_streams(1);
    EXPECT_TRUE(ValidateJobConfig(other).ok()) << ValidateJobConfig(other);
  }
  absl::StatusOr<JobConfig> two =
      ParseJobConfig("network:\n  pull_streams: 2\n", "job.yaml");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(PullStreams(*two), 2);
  EXPECT_THAT(JobConfigToYaml(*two), HasSubstr("pull_streams: 2"));
  absl::StatusOr<JobConfig> negative =
      ParseJobConfig("network:\n  pull_streams: -1\n", "job.yaml");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(std::string(negative.status().message()),
              HasSubstr("job.yaml:2: network.pull_streams"));
  JobConfig many = c;
  many.mutable_network()->set_pull_streams(9);
  EXPECT_THAT(std::string(ValidateJobConfig(many).message()),
              HasSubstr("network.pull_streams: must be <= 8, got 9"));
}

TEST(ConfigOverrideTest, SetsTypedValues) {
  JobConfig c = DefaultJobConfig();
  ASSERT_TRUE(ApplyConfigOverride("training.staleness", "inf", &c).ok());
  EXPECT_EQ(c.training().staleness(), -1);
  ASSERT_TRUE(ApplyConfigOverride("training.mode", "allreduce", &c).ok());
  EXPECT_EQ(c.training().mode(), v1::MODE_ALLREDUCE);
  ASSERT_TRUE(ApplyConfigOverride("model.hidden", "[16, 8]", &c).ok());
  EXPECT_THAT(c.model().hidden(), ElementsAre(16, 8));
  ASSERT_TRUE(ApplyConfigOverride("job.name", "", &c).ok());
  EXPECT_EQ(c.job().name(), "");
}

TEST(ConfigOverrideTest, ErrorsNameTheKeyAndLeaveTheConfig) {
  const JobConfig before = DefaultJobConfig();
  struct Case {
    const char* key;
    const char* value;
    const char* message;
  };
  for (const Case& k : std::vector<Case>{
           {"job.wokers", "3", "unknown key 'wokers' in section 'job'"},
           {"trainig.mode", "sync", "unknown section 'trainig'"},
           {"training.base_lr", "fast",
            "training.base_lr: expected a number, got 'fast'"},
           {"training.staleness", "-1",
            "training.staleness: expected an integer >= 0 or 'inf'"},
           {"training.steps.x", "1", "'steps' is not a section"},
           {"training", "1", "expected section.key"},
           {"model.hidden", "[1, 2", "bad YAML value"},
       }) {
    JobConfig c = before;
    absl::Status st = ApplyConfigOverride(k.key, k.value, &c);
    ASSERT_FALSE(st.ok()) << k.key;
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr(k.message)) << k.key;
    ExpectSameConfig(c, before);
  }
}

// Issue 11 #8: an explicitly given flag is honoured or rejected by name.
TEST(ConfigOverrideTest, FlagErrorsNameTheFlag) {
  struct Case {
    FlagOverride flag;
    const char* message;
  };
  for (const Case& k : std::vector<Case>{
           {{"--workers", "job.workers", "0"},
            "--workers: job.workers: must be >= 1, got 0"},
           {{"--servers", "job.servers", "0"},
            "--servers: job.servers: must be >= 1, got 0"},
           {{"--steps", "training.steps", "0"},
            "--steps: training.steps: must be >= 1, got 0"},
           {{"--staleness", "training.staleness", "soon"},
            "--staleness: training.staleness: expected an integer >= 0 or "
            "'inf', got 'soon'"},
           {{"--mode", "training.mode", "bsp"},
            "--mode: training.mode: expected one of sync, async, allreduce"},
       }) {
    JobConfig c = DefaultJobConfig();
    absl::Status st = ApplyFlagOverrides({k.flag}, &c);
    ASSERT_FALSE(st.ok()) << k.flag.flag;
    EXPECT_THAT(std::string(st.message()), HasSubstr(k.message));
  }
  JobConfig c = DefaultJobConfig();
  ASSERT_TRUE(ApplyFlagOverrides({{"--workers", "job.workers", "3"},
                                  {"--steps", "training.steps", "7"}},
                                 &c)
                  .ok());
  EXPECT_EQ(c.job().workers(), 3);
  EXPECT_EQ(c.training().steps(), 7);
  EXPECT_EQ(c.training().optimizer().total_steps(), 7u);  // finalized
  EXPECT_EQ(c.training().optimizer().global_batch(),
            static_cast<uint64_t>(3 * c.training().local_batch() *
                                  c.training().grad_accum_steps()));
}

}  // namespace
}  // namespace pstrain
