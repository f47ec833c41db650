#include "tests/checkpoint_jobs.h"

namespace pstrain::checkpoint_jobs {

JobConfig SmallAdamJob(const std::string& name,
                       pstrain::v1::ConsistencyMode mode, int64_t steps,
                       const std::string& dir, int64_t every_steps) {
  JobConfig c = DefaultJobConfig();
  c.mutable_job()->set_name(name);
  c.mutable_training()->set_mode(mode);
  c.mutable_job()->set_workers(2);
  c.mutable_training()->set_local_batch(8);
  c.mutable_training()->set_steps(steps);
  auto* optimizer = c.mutable_training()->mutable_optimizer();
  optimizer->set_kind(pstrain::v1::OptimizerConfig::ADAM);
  optimizer->set_base_lr(0.01);
  optimizer->set_schedule(pstrain::v1::OptimizerConfig::COSINE);
  optimizer->set_warmup_steps(3);
  c.mutable_model()->set_type(ModelConfig::MLP);
  c.mutable_model()->set_input_dim(16);
  SetList(c.mutable_model()->mutable_hidden(), {24});
  c.mutable_model()->set_num_classes(4);
  c.mutable_model()->set_seed(5);
  c.mutable_data()->set_source(DataConfig::SYNTHETIC);
  c.mutable_data()->set_num_features(16);
  c.mutable_data()->set_num_classes(4);
  c.mutable_data()->set_seed(9);
  c.mutable_data()->set_test_examples(64);
  c.mutable_checkpoint()->set_dir(dir);
  c.mutable_checkpoint()->set_every_steps(every_steps);
  return c;
}

}  // namespace pstrain::checkpoint_jobs
