// Exact recovery from checkpoints (docs/checkpoints.md): a sync
// job that checkpoints every few steps, and the same job resumed from one of
// its checkpoints (all later state gone, as after a crash), end with
// bit-identical weights, optimizer slots and final checkpoint files; also
// when the resumed job runs on another number of servers. Whole jobs run
// in-process on loopback (tests/harness/in_process_job.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "common/job_config.h"
#include "tests/harness/checkpoint_jobs.h"
#include "tests/harness/in_process_job.h"
#include "tests/harness/test_files.h"

namespace pstrain {
namespace {

constexpr int64_t kSteps = 12;

JobConfig MakeConfig(const std::string& dir, int servers) {
  JobConfig c = checkpoint_jobs::SmallAdamJob(
      "checkpoint-resume", pstrain::v1::MODE_SYNC, kSteps, dir, 4);
  c.mutable_job()->set_servers(servers);
  c.mutable_server()->set_chunk_bytes(256);  // several chunks per shard
  // Steps of at least 10 ms: the coordinator's orderer (a thread) keeps up
  // with the shards' standing cuts (at most 2 held) even on a loaded machine.
  c.mutable_worker()->set_compute_ms(10);
  c.mutable_network()->set_rpc_timeout_s(10);
  c.mutable_network()->set_barrier_timeout_s(20);
  c.mutable_network()->set_startup_timeout_s(20);
  FinalizeJobConfig(&c);
  return c;
}

using checkpoint_jobs::AllState;
using checkpoint_jobs::CopyCheckpoint;
using checkpoint_jobs::ExpectSameFinals;
using checkpoint_jobs::ExpectSameState;
using test_files::BitEqual;
using test_files::ReadBytes;
using test_files::TempDir;

class CheckpointResumeTest
    : public checkpoint_jobs::UndisturbedJobTest<CheckpointResumeTest> {
 public:
  static JobConfig UndisturbedConfig(const std::string& dir) {
    return MakeConfig(dir, 2);
  }
};

TEST_F(CheckpointResumeTest, TheJobCheckpointsEveryKStepsAndAtTheEnd) {
  ASSERT_NE(full_, nullptr);
  auto listing = ListCheckpoints(CheckpointEnv::Default(), *full_dir_);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_EQ(listing->complete, (std::vector<uint64_t>{4, 8, 12}));
  EXPECT_TRUE(listing->torn.empty());
  // The final checkpoint holds the weights every worker ended with.
  const auto state = AllState(CheckpointDir(*full_dir_, kSteps));
  ASSERT_EQ(state.size(), 2 * full_->finals[0].size());
  for (size_t t = 0; t < full_->finals[0].size(); ++t) {
    EXPECT_TRUE(BitEqual(state[2 * t], full_->finals[0][t])) << "tensor " << t;
  }
}

TEST_F(CheckpointResumeTest, ResumedJobEndsBitIdentical) {
  ASSERT_NE(full_, nullptr);
  const std::string dir = TempDir("resumed");
  CopyCheckpoint(*full_dir_, 8, dir);
  auto resumed = RunInProcessJob(MakeConfig(dir, 2), "latest");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->summary.steps, kSteps);
  // Same weights on every worker, bit for bit.
  ExpectSameFinals(*resumed, *full_);
  // Same final checkpoint, byte for byte (weights, slots, version, clocks,
  // schedule step, exponents).
  for (uint32_t k = 0; k < 2; ++k) {
    const std::string name = ShardFileName(k, 2);
    EXPECT_EQ(ReadBytes(CheckpointDir(dir, kSteps) + "/" + name),
              ReadBytes(CheckpointDir(*full_dir_, kSteps) + "/" + name))
        << name;
  }
  EXPECT_EQ(resumed->summary.final_accuracy, full_->summary.final_accuracy);
}

TEST_F(CheckpointResumeTest, ResumedOnMoreServersEndsBitIdentical) {
  ASSERT_NE(full_, nullptr);
  // K = 2 -> K' = 3 with the same server.chunk_bytes: the chunks move to
  // other shards, every chunk keeps its saved sync exponent.
  const std::string dir = TempDir("resharded");
  CopyCheckpoint(*full_dir_, 4, dir);
  auto resumed = RunInProcessJob(MakeConfig(dir, 3), dir);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (size_t t = 0; t < full_->finals[0].size(); ++t) {
    EXPECT_TRUE(BitEqual(resumed->finals[0][t], full_->finals[0][t]))
        << "tensor " << t;
  }
  ExpectSameState(AllState(CheckpointDir(dir, kSteps)),
                  AllState(CheckpointDir(*full_dir_, kSteps)));
}

// checkpoint.every_seconds: cuts chosen by time (the next step the shards
// can reach) are consistent cuts too: a job resumed from one ends
// bit-identical to the job that wrote it.
TEST(CheckpointTimeTest, TimedCheckpointsResumeBitIdentical) {
  const std::string dir = TempDir("timed");
  JobConfig c = MakeConfig(dir, 2);
  c.mutable_checkpoint()->set_every_steps(0);
  c.mutable_checkpoint()->set_every_seconds(0.1);
  c.mutable_training()->set_steps(30);
  c.mutable_worker()->set_compute_ms(15);
  FinalizeJobConfig(&c);
  auto full = RunInProcessJob(c);
  ASSERT_TRUE(full.ok()) << full.status();
  auto listing = ListCheckpoints(CheckpointEnv::Default(), dir);
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_GE(listing->complete.size(), 2u) << "no checkpoint before the end";
  EXPECT_EQ(listing->complete.back(), 30u);
  const uint64_t first = listing->complete.front();
  ASSERT_LT(first, 30u);

  const std::string again = TempDir("timed-resumed");
  CopyCheckpoint(dir, first, again);
  c.mutable_checkpoint()->set_dir(again);
  auto resumed = RunInProcessJob(c, "latest");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (size_t t = 0; t < full->finals[0].size(); ++t) {
    EXPECT_TRUE(BitEqual(resumed->finals[0][t], full->finals[0][t]))
        << "resumed at step " << first << ", tensor " << t;
  }
  ExpectSameState(AllState(CheckpointDir(again, 30)),
                  AllState(CheckpointDir(dir, 30)));
}

TEST_F(CheckpointResumeTest, ResumeRefusesACheckpointThatDoesNotFit) {
  ASSERT_NE(full_, nullptr);
  const std::string dir = TempDir("misfit");
  CopyCheckpoint(*full_dir_, 4, dir);
  JobConfig other = MakeConfig(dir, 2);
  SetList(other.mutable_model()->mutable_hidden(),
          {16});  // other tensor shapes
  auto job = RunInProcessJob(other, "latest");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition)
      << job.status();
  EXPECT_NE(job.status().message().find("--resume latest"), std::string::npos)
      << job.status();
  // Nothing to resume from: NOT_FOUND naming the flag.
  auto none = RunInProcessJob(MakeConfig(TempDir("empty"), 2), "latest");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
}

}  // namespace
}  // namespace pstrain
