#include "common/job_config.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace pstrain {
namespace {

using ::pstrain::v1::OptimizerConfig;
using ::testing::HasSubstr;

// Field-by-field equality, so a failure names the field that differs.
void ExpectSameConfig(const JobConfig& a, const JobConfig& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.workers, b.workers);
  EXPECT_EQ(a.servers, b.servers);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.staleness, b.staleness);
  EXPECT_EQ(a.optimizer.DebugString(), b.optimizer.DebugString());
  EXPECT_EQ(a.local_batch, b.local_batch);
  EXPECT_EQ(a.grad_accum_steps, b.grad_accum_steps);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.model.type, b.model.type);
  EXPECT_EQ(a.model.input_dim, b.model.input_dim);
  EXPECT_EQ(a.model.num_classes, b.model.num_classes);
  EXPECT_EQ(a.model.hidden, b.model.hidden);
  EXPECT_EQ(a.model.activation, b.model.activation);
  EXPECT_EQ(a.model.classifier, b.model.classifier);
  EXPECT_EQ(a.model.seed, b.model.seed);
  EXPECT_EQ(a.model.init_value, b.model.init_value);
  EXPECT_EQ(a.data.source, b.data.source);
  EXPECT_EQ(a.data.seed, b.data.seed);
  EXPECT_EQ(a.data.num_features, b.data.num_features);
  EXPECT_EQ(a.data.num_classes, b.data.num_classes);
  EXPECT_EQ(a.data.noise, b.data.noise);
  EXPECT_EQ(a.data.test_examples, b.data.test_examples);
  EXPECT_EQ(a.data.targets, b.data.targets);
  EXPECT_EQ(a.data.num_categorical, b.data.num_categorical);
  EXPECT_EQ(a.data.categories, b.data.categories);
  EXPECT_EQ(a.data.missing_rate, b.data.missing_rate);
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.data.dir, b.data.dir);
  EXPECT_EQ(a.data.label_column, b.data.label_column);
  EXPECT_EQ(a.data.test_fraction, b.data.test_fraction);
  EXPECT_EQ(a.data.standardize, b.data.standardize);
  EXPECT_EQ(a.worker.device, b.worker.device);
  EXPECT_EQ(a.eval_every, b.eval_every);
  EXPECT_EQ(a.chunk_bytes, b.chunk_bytes);
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.every_steps, b.checkpoint.every_steps);
  EXPECT_EQ(a.checkpoint.every_seconds, b.checkpoint.every_seconds);
  EXPECT_EQ(a.checkpoint.keep, b.checkpoint.keep);
  EXPECT_EQ(a.rpc_timeout_s, b.rpc_timeout_s);
  EXPECT_EQ(a.barrier_timeout_s, b.barrier_timeout_s);
  EXPECT_EQ(a.startup_timeout_s, b.startup_timeout_s);
  EXPECT_EQ(a.lease_s, b.lease_s);
  EXPECT_EQ(a.on_failure, b.on_failure);
}

TEST(JobConfigTest, DefaultsAreFinalizedAndValid) {
  JobConfig c = DefaultJobConfig();
  EXPECT_EQ(c.optimizer.kind(), OptimizerConfig::SGD);
  EXPECT_EQ(c.optimizer.base_lr(), 0.1);
  EXPECT_EQ(c.optimizer.schedule(), OptimizerConfig::CONSTANT);
  EXPECT_EQ(c.optimizer.reference_batch(), 256u);
  EXPECT_EQ(c.optimizer.total_steps(), 200u);
  EXPECT_EQ(c.optimizer.global_batch(), 64u);  // 32 x 2 workers x 1
  EXPECT_TRUE(ValidateJobConfig(c).ok());
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
  const OptimizerConfig& o = c.optimizer;
  EXPECT_EQ(c.name, "big");
  EXPECT_EQ(c.workers, 4);
  EXPECT_EQ(c.servers, 3);
  EXPECT_EQ(c.mode, v1::MODE_ASYNC);
  EXPECT_EQ(c.staleness, -1);
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
  EXPECT_EQ(c.local_batch, 8);
  EXPECT_EQ(c.grad_accum_steps, 3);
  EXPECT_EQ(c.steps, 90);
  EXPECT_EQ(o.total_steps(), 90u);
  EXPECT_EQ(o.global_batch(), 96u);  // 8 x 4 workers x 3
  EXPECT_EQ(c.model.type, "softmax");
  EXPECT_EQ(c.model.input_dim, 10);
  EXPECT_EQ(c.model.num_classes, 3);
  EXPECT_TRUE(c.model.hidden.empty());
  EXPECT_EQ(c.model.activation, "gelu");
  EXPECT_FALSE(c.model.classifier);
  EXPECT_EQ(c.model.seed, 9u);
  EXPECT_EQ(c.model.init_value, -1.5f);
  EXPECT_EQ(c.data.seed, 11u);
  EXPECT_EQ(c.data.num_features, 10);
  EXPECT_EQ(c.data.num_classes, 3);
  EXPECT_EQ(c.data.noise, 0.25);
  EXPECT_EQ(c.data.test_examples, 100);
  EXPECT_EQ(c.data.targets, (std::vector<float>{1.0f, 2.5f}));
  EXPECT_EQ(c.data.num_categorical, 2);
  EXPECT_EQ(c.data.categories, 3);
  EXPECT_EQ(c.data.missing_rate, 0.05);
  EXPECT_EQ(c.data.path, "x.csv");
  EXPECT_EQ(c.data.dir, "/d");
  EXPECT_EQ(c.data.label_column, "y");
  EXPECT_EQ(c.data.test_fraction, 0.3);
  EXPECT_FALSE(c.data.standardize);
  EXPECT_EQ(c.worker.device, "cpu");
  EXPECT_EQ(c.eval_every, 10);
  EXPECT_EQ(c.chunk_bytes, 4096);
  EXPECT_EQ(c.rpc_timeout_s, 5);
  EXPECT_EQ(c.barrier_timeout_s, 7.5);
  EXPECT_EQ(c.startup_timeout_s, 9);
  EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
}

TEST(JobConfigTest, FinalizeDerivesTotalStepsAndGlobalBatch) {
  JobConfig c = DefaultJobConfig();
  c.steps = 17;
  c.workers = 3;
  c.local_batch = 5;
  c.grad_accum_steps = 2;
  FinalizeJobConfig(&c);
  EXPECT_EQ(c.optimizer.total_steps(), 17u);
  EXPECT_EQ(c.optimizer.global_batch(), 30u);
}

TEST(JobConfigTest, YamlRoundTrips) {
  JobConfig c = DefaultJobConfig();
  c.name = "round trip: yes";
  c.workers = 5;
  c.servers = 3;
  c.mode = v1::MODE_ASYNC;
  c.staleness = -1;
  c.optimizer.set_kind(OptimizerConfig::ADAM);
  c.optimizer.set_base_lr(0.0123456789);
  c.optimizer.set_nesterov(true);
  c.optimizer.set_beta2(0.9999);
  c.optimizer.set_epsilon(1e-7);
  c.optimizer.set_weight_decay(1.0 / 3.0);
  c.optimizer.set_schedule(OptimizerConfig::COSINE);
  c.optimizer.set_warmup_steps(12);
  c.optimizer.set_min_lr_ratio(0.05);
  c.optimizer.set_linear_scaling(true);
  c.optimizer.set_reference_batch(512);
  c.local_batch = 7;
  c.grad_accum_steps = 4;
  c.steps = 1234;
  c.model = ModelConfig{"mlp", 20, 5, {16, 8}, "tanh", true, 42, 0.3f};
  c.data.seed = 99;
  c.data.num_features = 20;
  c.data.num_classes = 5;
  c.data.noise = 0.7;
  c.data.test_examples = 0;
  c.data.targets = {0.1f, -2.0f, 1e-3f};
  c.data.num_categorical = 3;
  c.data.categories = 7;
  c.data.missing_rate = 0.125;
  c.data.path = "/data/my table: v2.csv";
  c.data.dir = "";
  c.data.label_column = "# class";
  c.data.test_fraction = 1.0 / 3.0;
  c.data.standardize = false;
  c.worker.device = "cuda";
  c.eval_every = 25;
  c.chunk_bytes = 1 << 20;
  c.checkpoint.dir = "/ckpt dir";
  c.checkpoint.every_steps = 10;
  c.checkpoint.every_seconds = 1.5;
  c.checkpoint.keep = 3;
  c.rpc_timeout_s = 2.5;
  c.barrier_timeout_s = 0.1;
  c.startup_timeout_s = 600;
  FinalizeJobConfig(&c);

  const std::string yaml = JobConfigToYaml(c);
  absl::StatusOr<JobConfig> back = ParseJobConfig(yaml, "roundtrip");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  ExpectSameConfig(*back, c);
  EXPECT_THAT(yaml, HasSubstr("staleness: inf"));

  c.staleness = 3;
  back = ParseJobConfig(JobConfigToYaml(c), "roundtrip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->staleness, 3);

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

struct BadConfig {
  void (*mutate)(JobConfig*);
  const char* key;
};

TEST(JobConfigTest, ValidateErrorsNameTheKey) {
  const std::vector<BadConfig> cases = {
      {[](JobConfig* c) { c->workers = 0; }, "job.workers"},
      {[](JobConfig* c) { c->servers = 0; }, "job.servers"},
      {[](JobConfig* c) { c->steps = 0; }, "training.steps"},
      {[](JobConfig* c) { c->local_batch = 0; }, "training.local_batch"},
      {[](JobConfig* c) { c->grad_accum_steps = 0; },
       "training.grad_accum_steps"},
      {[](JobConfig* c) { c->staleness = -2; }, "training.staleness"},
      {[](JobConfig* c) { c->mode = v1::MODE_UNSPECIFIED; }, "training.mode"},
      {[](JobConfig* c) {
         c->optimizer.set_kind(OptimizerConfig::KIND_UNSPECIFIED);
       },
       "training.optimizer"},
      {[](JobConfig* c) { c->optimizer.set_base_lr(-1); }, "training.base_lr"},
      {[](JobConfig* c) { c->optimizer.set_momentum(1.0); },
       "training.momentum"},
      {[](JobConfig* c) { c->optimizer.set_beta2(-0.1); }, "training.beta2"},
      {[](JobConfig* c) { c->optimizer.set_epsilon(-1); }, "training.epsilon"},
      {[](JobConfig* c) { c->optimizer.set_weight_decay(-1); },
       "training.weight_decay"},
      {[](JobConfig* c) {
         c->optimizer.set_schedule(OptimizerConfig::STEP);
         c->optimizer.set_step_size(0);
       },
       "training.step_size"},
      {[](JobConfig* c) { c->optimizer.set_min_lr_ratio(2); },
       "training.min_lr_ratio"},
      {[](JobConfig* c) {
         c->optimizer.set_linear_scaling(true);
         c->optimizer.set_reference_batch(0);
       },
       "training.reference_batch"},
      {[](JobConfig* c) { c->model.type = "cnn"; }, "model.type"},
      {[](JobConfig* c) {
         c->model.hidden = {64, 0};
       },
       "model.hidden[1]"},
      {[](JobConfig* c) { c->model.input_dim = 16; }, "model.input_dim"},
      {[](JobConfig* c) { c->data.num_features = 16; }, "data.num_features"},
      {[](JobConfig* c) { c->model.num_classes = 3; }, "model.num_classes"},
      {[](JobConfig* c) { c->data.num_classes = 3; }, "data.num_classes"},
      {[](JobConfig* c) { c->model.type = "scalar"; }, "data.targets"},
      {[](JobConfig* c) { c->data.noise = -0.5; }, "data.noise"},
      {[](JobConfig* c) { c->eval_every = -1; }, "evaluation.every_steps"},
      {[](JobConfig* c) { c->chunk_bytes = 32; }, "server.chunk_bytes"},
      {[](JobConfig* c) { c->chunk_bytes = 1002; }, "server.chunk_bytes"},
      {[](JobConfig* c) { c->chunk_bytes = (4 << 20) + 4; },
       "server.chunk_bytes"},
      {[](JobConfig* c) { c->checkpoint.every_steps = -1; },
       "checkpoint.every_steps"},
      {[](JobConfig* c) { c->checkpoint.every_seconds = -1; },
       "checkpoint.every_seconds"},
      {[](JobConfig* c) { c->checkpoint.keep = -1; }, "checkpoint.keep"},
      {[](JobConfig* c) {
         c->mode = pstrain::v1::MODE_ASYNC;
         c->checkpoint.every_steps = 5;
       },
       "checkpoints in mode async are not supported yet"},
      {[](JobConfig* c) {
         c->mode = pstrain::v1::MODE_ALLREDUCE;
         c->checkpoint.every_seconds = 5;
       },
       "checkpoint.every_seconds"},
      {[](JobConfig* c) { c->rpc_timeout_s = 0; }, "network.rpc_timeout_s"},
      {[](JobConfig* c) { c->barrier_timeout_s = -1; },
       "network.barrier_timeout_s"},
      {[](JobConfig* c) { c->startup_timeout_s = 0; },
       "network.startup_timeout_s"},
      {[](JobConfig* c) { c->lease_s = 0; }, "network.lease_s"},
      {[](JobConfig* c) { c->on_failure = "retry"; }, "training.on_failure"},
      // Not implemented yet: a clear error rather than a silent "fail".
      {[](JobConfig* c) { c->on_failure = "restart"; }, "training.on_failure"},
      {[](JobConfig* c) { c->on_failure = "elastic"; }, "training.on_failure"},
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

TEST(JobConfigTest, ValidateAcceptsBoundaryValues) {
  JobConfig c = DefaultJobConfig();
  c.staleness = -1;
  c.chunk_bytes = 64;
  EXPECT_TRUE(ValidateJobConfig(c).ok());
  c.chunk_bytes = 4 << 20;
  EXPECT_TRUE(ValidateJobConfig(c).ok());
  // A scalar model ignores input_dim / num_features.
  c.model.type = "scalar";
  c.model.input_dim = 1;
  c.model.num_classes = c.data.num_classes = 1;
  c.data.targets = {1, 3};
  EXPECT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
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
  EXPECT_EQ(c->workers, 3);
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
  EXPECT_EQ(c->model.type, "scalar");
  EXPECT_EQ(c->model.init_value, 2.0f);
  EXPECT_EQ(c->data.targets, (std::vector<float>{1, 3, 5, 7}));
  EXPECT_EQ(c->workers, 2);
  EXPECT_EQ(c->servers, 1);
  EXPECT_EQ(c->local_batch, 2);
  EXPECT_EQ(c->steps, 1);
  EXPECT_EQ(c->optimizer.kind(), OptimizerConfig::SGD);
  EXPECT_EQ(c->optimizer.base_lr(), 0.1);
  EXPECT_EQ(c->optimizer.global_batch(), 4u);
}

TEST(JobConfigTest, RealDataConfigs) {
  absl::StatusOr<JobConfig> c = LoadJobConfig("configs/digits.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.source, "digits");
  EXPECT_EQ(c->data.dir, ".cache/pstrain/datasets");
  EXPECT_EQ(c->mode, v1::MODE_SYNC);
  EXPECT_EQ(c->workers, 4);
  EXPECT_EQ(c->servers, 2);
  EXPECT_EQ(c->model.input_dim, 64);
  EXPECT_EQ(c->model.hidden, (std::vector<int64_t>{128}));
  EXPECT_EQ(c->model.num_classes, 10);
  EXPECT_EQ(c->optimizer.kind(), OptimizerConfig::MOMENTUM);
  EXPECT_EQ(c->optimizer.schedule(), OptimizerConfig::COSINE);
  EXPECT_GT(c->optimizer.warmup_steps(), 0u);
  EXPECT_EQ(c->optimizer.global_batch(), 128u);

  c = LoadJobConfig("configs/breast_cancer.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.source, "breast_cancer");
  EXPECT_EQ(c->model.input_dim, 30);
  EXPECT_EQ(c->model.num_classes, 2);
}

TEST(JobConfigTest, AsyncConfigHasBoundedStaleness) {
  absl::StatusOr<JobConfig> c = LoadJobConfig("configs/async.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mode, v1::MODE_ASYNC);
  EXPECT_EQ(c->staleness, 2);
}

// Issue 11 #6: AdaGrad's own epsilon default (1e-10) is what a job file
// without `epsilon` gets; `epsilon: 0` is rejected with a hint.
TEST(JobConfigTest, EpsilonUnsetMeansTheOptimizersDefault) {
  absl::StatusOr<JobConfig> c =
      ParseJobConfig("training:\n  optimizer: adagrad\n", "job.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->optimizer.epsilon(), 0);  // unset
  EXPECT_TRUE(ValidateJobConfig(*c).ok());
  absl::StatusOr<std::unique_ptr<Optimizer>> adagrad =
      Optimizer::Create(c->optimizer);
  ASSERT_TRUE(adagrad.ok()) << adagrad.status();
  EXPECT_EQ((*adagrad)->config().epsilon(), 1e-10);
  c->optimizer.set_kind(OptimizerConfig::ADAM);
  absl::StatusOr<std::unique_ptr<Optimizer>> adam =
      Optimizer::Create(c->optimizer);
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
  EXPECT_EQ(explicit_default->optimizer.epsilon(), 1e-10);
  absl::StatusOr<JobConfig> back =
      ParseJobConfig(JobConfigToYaml(*explicit_default), "emitted");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->optimizer.epsilon(), 1e-10);
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
  c.optimizer.set_epsilon(1e-7);  // optional key: present when set
  c.data.targets = {1, 3};
  c.model.hidden = {16, 8};
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

TEST(JobConfigTest, WireDtype) {
  EXPECT_EQ(DefaultJobConfig().wire_dtype, v1::DTYPE_F32);
  absl::StatusOr<JobConfig> c =
      ParseJobConfig("network:\n  wire_dtype: bf16\n", "job.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->wire_dtype, v1::DTYPE_BF16);
  EXPECT_THAT(JobConfigToYaml(*c), HasSubstr("wire_dtype: bf16"));
  JobConfig d = DefaultJobConfig();
  ASSERT_TRUE(ApplyConfigOverride("network.wire_dtype", "fp16", &d).ok());
  EXPECT_EQ(d.wire_dtype, v1::DTYPE_F16);
  absl::StatusOr<JobConfig> bad =
      ParseJobConfig("network:\n  wire_dtype: int8\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("job.yaml:2: network.wire_dtype"));
}

TEST(ConfigOverrideTest, SetsTypedValues) {
  JobConfig c = DefaultJobConfig();
  ASSERT_TRUE(ApplyConfigOverride("training.staleness", "inf", &c).ok());
  EXPECT_EQ(c.staleness, -1);
  ASSERT_TRUE(ApplyConfigOverride("training.mode", "allreduce", &c).ok());
  EXPECT_EQ(c.mode, v1::MODE_ALLREDUCE);
  ASSERT_TRUE(ApplyConfigOverride("model.hidden", "[16, 8]", &c).ok());
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{16, 8}));
  ASSERT_TRUE(ApplyConfigOverride("job.name", "", &c).ok());
  EXPECT_EQ(c.name, "");
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
  EXPECT_EQ(c.workers, 3);
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.optimizer.total_steps(), 7u);  // finalized
  EXPECT_EQ(c.optimizer.global_batch(),
            static_cast<uint64_t>(3 * c.local_batch * c.grad_accum_steps));
}

}  // namespace
}  // namespace pstrain
