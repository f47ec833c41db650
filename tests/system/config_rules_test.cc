// ValidateJobConfig is the one check a job passes before anything is
// launched (psctl run's dry run, ps_worker --check_config). Every rule that a
// process enforces when it starts must be in it: a job it accepts must build
// what the coordinator builds (MakeJobSpec), what each server builds
// (Shard::Create on ShardOptionsFromJob: the optimizer and the consistency
// rule), the optimizer of an all-reduce worker, and a worker's synthetic
// data. The sweep below varies the keys those rules read, one and two at a
// time, from two bases; the table checks that each cross-field rule is
// refused naming its key, by ValidateJobConfig and by the process too.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_config.h"
#include "common/model_spec.h"
#include "common/optimizer.h"
#include "coordinator/job_spec.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "worker/data/data_check.h"

namespace pstrain {
namespace {

using ::pstrain::v1::OptimizerConfig;

// What the processes build at start-up from a job `ValidateJobConfig`
// accepted; the first error, prefixed with who refused it.
absl::Status StartProcesses(const JobConfig& c) {
  absl::StatusOr<v1::JobSpec> job = MakeJobSpec(c);
  if (!job.ok()) {
    return absl::Status(job.status().code(),
                        absl::StrCat("coordinator: ", job.status().message()));
  }
  if (c.training().mode() == v1::MODE_ALLREDUCE) {
    absl::StatusOr<std::unique_ptr<Optimizer>> opt =
        Optimizer::Create(c.training().optimizer());
    if (!opt.ok()) {
      return absl::Status(opt.status().code(),
                          absl::StrCat("worker: ", opt.status().message()));
    }
  } else {
    for (uint32_t k = 0; k < job->num_servers(); ++k) {
      absl::StatusOr<std::unique_ptr<Shard>> shard =
          Shard::Create(ShardOptionsFromJob(*job, k));
      if (!shard.ok()) {
        return absl::Status(
            shard.status().code(),
            absl::StrCat("server ", k, ": ", shard.status().message()));
      }
    }
  }
  if (c.data().source() == DataConfig::SYNTHETIC) {
    absl::StatusOr<std::unique_ptr<DataSource>> data = LoadJobData(c);
    if (!data.ok()) {
      return absl::Status(data.status().code(),
                          absl::StrCat("worker: ", data.status().message()));
    }
  }
  return absl::OkStatus();
}

struct Variation {
  std::string name;
  std::function<void(JobConfig*)> apply;
};

std::vector<Variation> Variations() {
  std::vector<Variation> v;
  auto add = [&v](std::string name, std::function<void(JobConfig*)> f) {
    v.push_back({std::move(name), std::move(f)});
  };
  auto opt = [](JobConfig* c) {
    return c->mutable_training()->mutable_optimizer();
  };
  for (int steps : {1, 5, 10, 11, 40}) {
    add(absl::StrCat("steps=", steps),
        [steps](JobConfig* c) { c->mutable_training()->set_steps(steps); });
  }
  for (int warmup : {0, 10, 20, 40}) {
    add(absl::StrCat("warmup_steps=", warmup),
        [=](JobConfig* c) { opt(c)->set_warmup_steps(warmup); });
  }
  for (auto s : {OptimizerConfig::CONSTANT, OptimizerConfig::STEP,
                 OptimizerConfig::COSINE}) {
    add(absl::StrCat("lr_schedule=", OptimizerConfig::Schedule_Name(s)),
        [=](JobConfig* c) { opt(c)->set_schedule(s); });
  }
  add("step_size=0", [=](JobConfig* c) { opt(c)->set_step_size(0); });
  add("gamma=0", [=](JobConfig* c) { opt(c)->set_gamma(0); });
  add("min_lr_ratio=1", [=](JobConfig* c) { opt(c)->set_min_lr_ratio(1); });
  for (auto k :
       {OptimizerConfig::SGD, OptimizerConfig::MOMENTUM, OptimizerConfig::ADAM,
        OptimizerConfig::ADAMW, OptimizerConfig::ADAGRAD}) {
    add(absl::StrCat("optimizer=", OptimizerConfig::Kind_Name(k)),
        [=](JobConfig* c) { opt(c)->set_kind(k); });
  }
  add("epsilon=0", [=](JobConfig* c) { opt(c)->set_epsilon(0); });
  add("lr_scaling linear, reference_batch 0", [=](JobConfig* c) {
    opt(c)->set_linear_scaling(true);
    opt(c)->set_reference_batch(0);
  });
  add("lr_scaling linear", [=](JobConfig* c) {
    opt(c)->set_linear_scaling(true);
    opt(c)->set_reference_batch(64);
  });
  for (auto t : {ModelConfig::SCALAR, ModelConfig::LINEAR, ModelConfig::SOFTMAX,
                 ModelConfig::MLP}) {
    add(absl::StrCat("model.type=", ModelConfig::ModelType_Name(t)),
        [=](JobConfig* c) { c->mutable_model()->set_type(t); });
  }
  add("classifier=false",
      [](JobConfig* c) { c->mutable_model()->set_classifier(false); });
  for (int classes : {1, 2, 4}) {
    add(absl::StrCat("num_classes=", classes), [=](JobConfig* c) {
      c->mutable_model()->set_num_classes(classes);
      c->mutable_data()->set_num_classes(classes);
    });
  }
  add("model.num_classes=1 only",
      [](JobConfig* c) { c->mutable_model()->set_num_classes(1); });
  for (double noise : {0.0, 1.0, 1.5}) {
    add(absl::StrCat("noise=", noise),
        [=](JobConfig* c) { c->mutable_data()->set_noise(noise); });
  }
  for (int features : {4, 12}) {
    add(absl::StrCat("num_features=", features), [=](JobConfig* c) {
      c->mutable_data()->set_num_features(features);
      c->mutable_model()->set_input_dim(features);
    });
  }
  add("num_categorical=3",
      [](JobConfig* c) { c->mutable_data()->set_num_categorical(3); });
  add("categories=2",
      [](JobConfig* c) { c->mutable_data()->set_categories(2); });
  add("categories=12",
      [](JobConfig* c) { c->mutable_data()->set_categories(12); });
  add("missing_rate=0.3",
      [](JobConfig* c) { c->mutable_data()->set_missing_rate(0.3); });
  add("targets=[1, 2]", [](JobConfig* c) {
    SetList(c->mutable_data()->mutable_targets(), {1, 2});
  });
  add("targets=[nan]", [](JobConfig* c) {
    SetList(c->mutable_data()->mutable_targets(),
            {std::numeric_limits<float>::quiet_NaN()});
  });
  for (auto m : {v1::MODE_SYNC, v1::MODE_ASYNC, v1::MODE_ALLREDUCE}) {
    add(absl::StrCat("mode=", v1::ConsistencyMode_Name(m)),
        [=](JobConfig* c) { c->mutable_training()->set_mode(m); });
  }
  add("backup_workers=1",
      [](JobConfig* c) { c->mutable_training()->set_backup_workers(1); });
  add("staleness_aware_lr", [](JobConfig* c) {
    c->mutable_training()->set_staleness_aware_lr(true);
  });
  add("dc_lambda=0.5",
      [](JobConfig* c) { c->mutable_training()->set_dc_lambda(0.5); });
  add("workers=1", [](JobConfig* c) { c->mutable_job()->set_workers(1); });
  add("servers=3", [](JobConfig* c) { c->mutable_job()->set_servers(3); });
  add("chunk_bytes=64",
      [](JobConfig* c) { c->mutable_server()->set_chunk_bytes(64); });
  return v;
}

std::vector<std::pair<std::string, JobConfig>> Bases() {
  JobConfig defaults = DefaultJobConfig();
  // configs/default.yaml's schedule: cosine after a 10-step warm-up.
  JobConfig cosine = DefaultJobConfig();
  cosine.mutable_training()->set_steps(20);
  cosine.mutable_training()->mutable_optimizer()->set_schedule(
      OptimizerConfig::COSINE);
  cosine.mutable_training()->mutable_optimizer()->set_warmup_steps(10);
  return {{"defaults", defaults}, {"cosine", cosine}};
}

TEST(ConfigRulesTest, EveryJobTheValidationAcceptsStartsEveryProcess) {
  const std::vector<Variation> vars = Variations();
  int accepted = 0, refused = 0;
  for (const auto& [base_name, base] : Bases()) {
    for (size_t i = 0; i < vars.size(); ++i) {
      for (size_t j = i; j < vars.size(); ++j) {
        JobConfig c = base;
        vars[i].apply(&c);
        if (j != i) vars[j].apply(&c);
        FinalizeJobConfig(&c);
        if (!ValidateJobConfig(c).ok()) {
          ++refused;
          continue;
        }
        ++accepted;
        const absl::Status started = StartProcesses(c);
        EXPECT_TRUE(started.ok())
            << base_name << " + " << vars[i].name
            << (j != i ? " + " + vars[j].name : std::string())
            << ": ValidateJobConfig accepts it but a process refuses it at "
               "start-up: "
            << started;
      }
    }
  }
  // The sweep exercises both outcomes.
  EXPECT_GT(accepted, 500);
  EXPECT_GT(refused, 100);
}

struct Rule {
  std::string name;
  std::function<void(JobConfig*)> apply;
  std::string key;  // ValidateJobConfig's error starts with "key:"
};

// Each cross-field rule a process enforces at start-up, broken alone.
TEST(ConfigRulesTest, EachStartupRuleIsRefusedNamingItsKey) {
  const std::vector<Rule> rules = {
      {"cosine with warmup_steps >= steps",
       [](JobConfig* c) {
         c->mutable_training()->set_steps(5);
         auto* o = c->mutable_training()->mutable_optimizer();
         o->set_schedule(OptimizerConfig::COSINE);
         o->set_warmup_steps(20);
       },
       "training.steps"},
      {"softmax with one class",
       [](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::SOFTMAX);
         c->mutable_model()->set_num_classes(1);
         c->mutable_data()->set_num_classes(1);
       },
       "model.num_classes"},
      {"mlp classifier with one class",
       [](JobConfig* c) {
         c->mutable_model()->set_num_classes(1);
         c->mutable_data()->set_num_classes(1);
       },
       "model.num_classes"},
      {"noise above 1 with classes",
       [](JobConfig* c) { c->mutable_data()->set_noise(1.5); }, "data.noise"},
      {"categorical columns wider than the features",
       [](JobConfig* c) {
         c->mutable_data()->set_num_features(12);
         c->mutable_model()->set_input_dim(12);
         c->mutable_data()->set_num_categorical(3);
         c->mutable_data()->set_categories(4);
         c->mutable_data()->set_missing_rate(0.3);
       },
       "data.num_features"},
      {"a target that is not finite",
       [](JobConfig* c) {
         c->mutable_model()->set_type(ModelConfig::SCALAR);
         SetList(c->mutable_data()->mutable_targets(),
                 {1, std::numeric_limits<float>::infinity()});
       },
       "data.targets"},
      {"targets with a model other than scalar",
       [](JobConfig* c) {
         SetList(c->mutable_data()->mutable_targets(), {1, 2});
       },
       "data.targets"},
  };
  for (const Rule& rule : rules) {
    JobConfig c = DefaultJobConfig();
    rule.apply(&c);
    FinalizeJobConfig(&c);
    const absl::Status valid = ValidateJobConfig(c);
    EXPECT_EQ(valid.code(), absl::StatusCode::kInvalidArgument) << rule.name;
    EXPECT_TRUE(absl::StartsWith(valid.message(), rule.key + ":"))
        << rule.name << ": " << valid;
    // The rule is the process's: without the validation, it refuses too.
    EXPECT_FALSE(StartProcesses(c).ok()) << rule.name;
  }
}

// psctl run --steps 5 on a job with a 20-step warm-up (the report of issue
// 22): refused by the flag's name before anything starts.
TEST(ConfigRulesTest, StepsFlagBelowWarmupIsRefusedNamingTheFlag) {
  JobConfig c = DefaultJobConfig();
  auto* o = c.mutable_training()->mutable_optimizer();
  o->set_schedule(OptimizerConfig::COSINE);
  o->set_warmup_steps(20);
  const absl::Status st =
      ApplyFlagOverrides({{"--steps", "training.steps", "5"}}, &c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(st.message(), "--steps: training.steps:")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "warmup_steps (20)")) << st;
}

// network.tcp_congestion_control is a host's matter: ValidateJobConfig
// checks the name's shape, ps_worker --check_config (psctl run's check
// before anything starts) asks this host's kernel, naming the key and the
// file's line.
TEST(ConfigRulesTest, CongestionControlIsCheckedOnTheHost) {
  JobConfig c = DefaultJobConfig();
  c.mutable_network()->set_tcp_congestion_control("cubic bbr");
  const absl::Status shape = ValidateJobConfig(c);
  EXPECT_TRUE(absl::StartsWith(shape.message(),
                               "network.tcp_congestion_control: 'cubic bbr' "
                               "is not a congestion control's name"))
      << shape;

  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/cc_job.yaml");
  std::ofstream(path, std::ios::trunc)
      << "network:\n  tcp_congestion_control: no_such_cc\n";
  const absl::Status refused = CheckJobFile(path);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "network.tcp_congestion_control: this host's "
                                "kernel has no congestion control "
                                "'no_such_cc'"))
      << refused;
  std::ofstream(path, std::ios::trunc) << "network:\n  tcp_congestion_control: "
                                       << "reno\n";  // the kernel's own
  EXPECT_TRUE(CheckJobFile(path).ok()) << CheckJobFile(path);
  std::ofstream(path, std::ios::trunc)
      << "network:\n  tcp_congestion_control: [cubic]\n";
  const absl::Status typed = CheckJobFile(path);
  EXPECT_TRUE(absl::StrContains(typed.message(), "cc_job.yaml:2")) << typed;
}

}  // namespace
}  // namespace pstrain
