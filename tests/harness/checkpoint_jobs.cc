#include "tests/harness/checkpoint_jobs.h"

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"

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

void CopyCheckpoint(const std::string& from, uint64_t step,
                    const std::string& to) {
  std::filesystem::copy(CheckpointDir(from, step), CheckpointDir(to, step));
}

std::vector<std::vector<float>> AllState(const std::string& dir) {
  auto reader = CheckpointReader::Open(CheckpointEnv::Default(), dir);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return {};
  const CheckpointManifest& m = (*reader)->manifest();
  std::vector<std::vector<float>> out;
  for (const auto& t : m.shard_map.tensors()) {
    uint64_t n = 1;
    for (int64_t d : t.shape()) n *= d;
    std::vector<float> w(n), slots(n * m.num_slots);
    EXPECT_TRUE(
        (*reader)->ReadRange(t.name(), 0, n, w.data(), slots.data()).ok());
    out.push_back(std::move(w));
    out.push_back(std::move(slots));
  }
  return out;
}

void ExpectSameState(const std::vector<std::vector<float>>& got,
                     const std::vector<std::vector<float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(test_files::BitEqual(got[i], want[i])) << "tensor/slots " << i;
  }
}

void ExpectSameFinals(const InProcessJob& got, const InProcessJob& want) {
  ASSERT_EQ(got.finals.size(), want.finals.size());
  for (size_t r = 0; r < want.finals.size(); ++r) {
    ASSERT_EQ(got.finals[r].size(), want.finals[r].size());
    for (size_t t = 0; t < want.finals[r].size(); ++t) {
      EXPECT_TRUE(test_files::BitEqual(got.finals[r][t], want.finals[r][t]))
          << "worker " << r << " tensor " << t;
    }
  }
}

}  // namespace pstrain::checkpoint_jobs
