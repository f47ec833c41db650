// Checkpoints in mode async (docs/checkpoints.md): the shards
// hold reads at each cut clock until every worker reached it, so every
// checkpoint is one consistent cut (server/shard.h, "Checkpoints"), and a
// job resumed from it with `--resume` completes.
//  * One worker: async is deterministic (one push order), so the resumed
//    job ends bit-identical to the undisturbed one, also on another number
//    of servers with another chunk size (async updates are element-wise,
//    so the chunk layout cannot change a bit).
//  * Three workers, staleness 2: push orders differ from run to run, so the
//    resumed job is held to completion, consistent checkpoints (every
//    shard's clocks at the cut) and the undisturbed run's accuracy within a
//    stated tolerance.
// Whole jobs run in-process on loopback (tests/harness/in_process_job.h).
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

// Tolerances of the multi-worker test: the resumed job's test accuracy and
// final training loss at most this far from the undisturbed job's. Two
// undisturbed async runs differ by their push orders alone: over 16 runs
// here, accuracy 0.789-0.801 (256 test examples), loss 0.648-0.655.
constexpr double kAccuracyTolerance = 0.05;
constexpr double kLossTolerance = 0.05;

JobConfig MakeConfig(const std::string& dir, int workers, int servers,
                     int64_t staleness, int64_t steps, int64_t every) {
  JobConfig c = checkpoint_jobs::SmallAdamJob(
      "async-checkpoint-resume", pstrain::v1::MODE_ASYNC, steps, dir, every);
  c.mutable_training()->set_staleness(staleness);
  c.mutable_job()->set_workers(workers);
  c.mutable_job()->set_servers(servers);
  c.mutable_training()->set_local_batch(16);
  c.mutable_data()->set_test_examples(256);
  c.mutable_server()->set_chunk_bytes(256);  // several chunks per shard
  // Steps of at least 5 ms: the coordinator's orderer (a thread) keeps up
  // with the shards' standing cuts (at most 2 held) on a loaded machine.
  c.mutable_worker()->set_compute_ms(5);
  c.mutable_network()->set_rpc_timeout_s(10);
  c.mutable_network()->set_barrier_timeout_s(20);
  c.mutable_network()->set_startup_timeout_s(20);
  FinalizeJobConfig(&c);
  return c;
}

using checkpoint_jobs::CopyCheckpoint;
using checkpoint_jobs::ExpectSameFinals;
using checkpoint_jobs::ExpectSameState;
using test_files::ReadBytes;
using test_files::TempDir;

// AllState of checkpoint `dir`, after checking that it is an async
// checkpoint whose shard files are one cut (StateFor: the same version on
// every shard) with every worker's clock at the step.
std::vector<std::vector<float>> CheckedState(const std::string& dir) {
  auto reader = CheckpointReader::Open(CheckpointEnv::Default(), dir);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return {};
  const CheckpointManifest& m = (*reader)->manifest();
  EXPECT_EQ(m.mode, "async");
  // StateFor checks that the shards agree on version and clocks.
  auto state = (*reader)->StateFor({});
  EXPECT_TRUE(state.ok()) << dir << ": " << state.status();
  if (state.ok()) {
    EXPECT_EQ(state->clocks, std::vector<uint64_t>(m.num_workers, m.step))
        << dir;
  }
  return checkpoint_jobs::AllState(dir);
}

// One worker: deterministic, so resuming is exact.
TEST(AsyncCheckpointResumeTest, OneWorkerResumesBitIdentical) {
  const std::string full_dir = TempDir("one-full");
  auto full = RunInProcessJob(MakeConfig(full_dir, 1, 2, 0, 12, 4));
  ASSERT_TRUE(full.ok()) << full.status();
  auto listing = ListCheckpoints(CheckpointEnv::Default(), full_dir);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_EQ(listing->complete, (std::vector<uint64_t>{4, 8, 12}));
  const auto want = CheckedState(CheckpointDir(full_dir, 12));
  ASSERT_FALSE(want.empty());

  // Same layout, resumed at step 8: same final checkpoint, byte for byte.
  const std::string dir = TempDir("one-resumed");
  CopyCheckpoint(full_dir, 8, dir);
  auto resumed = RunInProcessJob(MakeConfig(dir, 1, 2, 0, 12, 4), "latest");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->summary.steps, 12);
  ExpectSameFinals(*resumed, *full);
  for (uint32_t k = 0; k < 2; ++k) {
    const std::string name = ShardFileName(k, 2);
    EXPECT_EQ(ReadBytes(CheckpointDir(dir, 12) + "/" + name),
              ReadBytes(CheckpointDir(full_dir, 12) + "/" + name))
        << name;
  }

  // K = 2 -> K' = 3 servers and another chunk size, resumed at step 4.
  const std::string resharded = TempDir("one-resharded");
  CopyCheckpoint(full_dir, 4, resharded);
  JobConfig other = MakeConfig(resharded, 1, 3, 0, 12, 4);
  other.mutable_server()->set_chunk_bytes(512);
  auto moved = RunInProcessJob(other, resharded);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ExpectSameFinals(*moved, *full);
  ExpectSameState(CheckedState(CheckpointDir(resharded, 12)), want);
}

// Several workers, staleness 2: every checkpoint is at a cut, and a job
// resumed from one (on another number of servers) completes with the
// undisturbed job's accuracy within kAccuracyTolerance.
TEST(AsyncCheckpointResumeTest, ThreeWorkersResumeAndReachTheAccuracy) {
  constexpr int64_t kSteps = 40;
  const std::string full_dir = TempDir("three-full");
  auto full = RunInProcessJob(MakeConfig(full_dir, 3, 2, 2, kSteps, 10));
  ASSERT_TRUE(full.ok()) << full.status();
  auto listing = ListCheckpoints(CheckpointEnv::Default(), full_dir);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_EQ(listing->complete, (std::vector<uint64_t>{10, 20, 30, 40}));
  for (uint64_t step : listing->complete) {
    CheckedState(CheckpointDir(full_dir, step));  // checks the clocks
  }
  ASSERT_TRUE(full->summary.final_accuracy.has_value());
  // The job learned something, so the comparison below means something.
  EXPECT_GT(*full->summary.final_accuracy, 0.5);

  const std::string dir = TempDir("three-resumed");
  CopyCheckpoint(full_dir, 20, dir);
  auto resumed =
      RunInProcessJob(MakeConfig(dir, 3, 3, 2, kSteps, 10), "latest");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->summary.steps, kSteps);
  auto after = ListCheckpoints(CheckpointEnv::Default(), dir);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->complete, (std::vector<uint64_t>{20, 30, 40}));
  CheckedState(CheckpointDir(dir, kSteps));
  ASSERT_TRUE(resumed->summary.final_accuracy.has_value());
  EXPECT_NEAR(*resumed->summary.final_accuracy, *full->summary.final_accuracy,
              kAccuracyTolerance);
  EXPECT_NEAR(resumed->summary.final_loss, full->summary.final_loss,
              kLossTolerance);
}

// A sync job refuses an async checkpoint (the cuts mean different things).
TEST(AsyncCheckpointResumeTest, ASyncJobRefusesAnAsyncCheckpoint) {
  const std::string full_dir = TempDir("mode-full");
  auto full = RunInProcessJob(MakeConfig(full_dir, 1, 1, 0, 4, 4));
  ASSERT_TRUE(full.ok()) << full.status();
  JobConfig sync = MakeConfig(full_dir, 1, 1, 0, 8, 4);
  sync.mutable_training()->set_mode(pstrain::v1::MODE_SYNC);
  FinalizeJobConfig(&sync);
  auto job = RunInProcessJob(sync, "latest");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition)
      << job.status();
  EXPECT_NE(job.status().message().find("in mode async, not sync"),
            std::string::npos)
      << job.status();
}

}  // namespace
}  // namespace pstrain
