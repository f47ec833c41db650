// checkpoint.every_seconds in mode async (docs/checkpoints.md):
// the coordinator orders a time cut at the next clock the shards can still
// hold (the largest worker clock + 1), and every checkpoint it writes is a
// consistent cut: on every shard, every worker clock at the cut and the
// version (pushes applied) = workers x cut. A whole job in-process
// (tests/harness/in_process_job.h): three workers, one a 2x straggler,
// staleness 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "common/job_config.h"
#include "tests/harness/in_process_job.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;

TEST(AsyncTimeCutTest, EveryTimeCutIsAConsistentClockCut) {
  const fs::path dir = fs::path(::testing::TempDir()) / "time-cuts";
  fs::remove_all(dir);
  fs::create_directories(dir);
  constexpr int kWorkers = 3;
  constexpr int64_t kSteps = 60;
  JobConfig c = DefaultJobConfig();
  c.mutable_job()->set_workers(kWorkers);
  c.mutable_job()->set_servers(2);
  c.mutable_training()->set_mode(pstrain::v1::MODE_ASYNC);
  c.mutable_training()->set_staleness(2);
  c.mutable_training()->set_steps(kSteps);
  c.mutable_training()->set_local_batch(16);
  c.mutable_model()->set_type(ModelConfig::MLP);
  c.mutable_model()->set_input_dim(16);
  SetList(c.mutable_model()->mutable_hidden(), {24});
  c.mutable_model()->set_num_classes(4);
  c.mutable_data()->set_source(DataConfig::SYNTHETIC);
  c.mutable_data()->set_num_features(16);
  c.mutable_data()->set_num_classes(4);
  c.mutable_data()->set_test_examples(64);
  c.mutable_server()->set_chunk_bytes(256);
  c.mutable_worker()->set_compute_ms(10);  // about 1.2 s in all
  c.mutable_worker()->set_straggler_rank(2);
  c.mutable_worker()->set_straggler_factor(2);
  c.mutable_network()->set_rpc_timeout_s(10);
  c.mutable_network()->set_barrier_timeout_s(20);
  c.mutable_network()->set_startup_timeout_s(20);
  c.mutable_checkpoint()->set_dir(dir.string());
  c.mutable_checkpoint()->set_every_seconds(0.2);
  FinalizeJobConfig(&c);
  ASSERT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);

  absl::StatusOr<InProcessJob> job = RunInProcessJob(c);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->summary.steps, kSteps);

  std::vector<uint64_t> cuts;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    auto reader =
        CheckpointReader::Open(CheckpointEnv::Default(), e.path().string());
    if (!reader.ok()) continue;  // torn (a missed cut's files): ignored
    const uint64_t cut = (*reader)->manifest().step;
    cuts.push_back(cut);
    for (const CheckpointReader::ShardHeader& h : (*reader)->shard_headers()) {
      EXPECT_EQ(h.cut, cut);
      EXPECT_EQ(h.clocks, std::vector<uint64_t>(kWorkers, cut))
          << e.path() << " is not a consistent clock cut";
      EXPECT_EQ(h.version, kWorkers * cut) << e.path();
    }
  }
  std::sort(cuts.begin(), cuts.end());
  ASSERT_FALSE(cuts.empty());
  EXPECT_EQ(cuts.back(), static_cast<uint64_t>(kSteps));  // the final cut
  // Time cuts before the end: the job lasts at least 60 x 20 ms (the
  // straggler), several periods of 0.2 s, and each cut is the next clock
  // (a cut placed further ahead, e.g. at the push count, would leave one
  // time cut at most).
  EXPECT_GE(cuts.size(), 3u) << "fewer than two time cuts were taken";
  std::string list;
  for (uint64_t cut : cuts) list += std::to_string(cut) + " ";
  std::cerr << "complete checkpoints at steps " << list << "\n";
}

}  // namespace
}  // namespace pstrain
