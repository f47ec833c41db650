#include "coordinator/checkpoint_orderer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "coordinator/job_spec.h"
#include "server/shard.h"

namespace pstrain {
namespace {

TEST(CheckpointRootTest, DirOrOutOrNothing) {
  JobConfig c = DefaultJobConfig();
  EXPECT_EQ(*CheckpointRoot(c, "/runs/a"), "");  // off
  c.mutable_checkpoint()->set_every_steps(10);
  EXPECT_EQ(*CheckpointRoot(c, "/runs/a"), "/runs/a/ckpt");
  c.mutable_checkpoint()->set_dir("/shared/ckpt");
  EXPECT_EQ(*CheckpointRoot(c, "/runs/a"), "/shared/ckpt");
  c.mutable_checkpoint()->set_dir("");
  absl::StatusOr<std::string> none = CheckpointRoot(c, "");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("checkpoint.dir"), std::string::npos)
      << none.status();
}

TEST(ResolveResumeTest, BadRequestsAreNamed) {
  const std::string tmp = ::testing::TempDir();
  JobConfig c = DefaultJobConfig();
  absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(c);
  ASSERT_TRUE(job.ok()) << job.status();
  struct Case {
    std::string resume, root;
    absl::StatusCode code;
  };
  for (const Case& k : {
           Case{"latest", "", absl::StatusCode::kInvalidArgument},
           Case{"latest", tmp + "/no-such-root", absl::StatusCode::kNotFound},
           Case{tmp + "/no-such-checkpoint", "", absl::StatusCode::kNotFound},
       }) {
    absl::StatusOr<ResumePoint> r =
        ResolveResume(CheckpointEnv::Default(), k.resume, k.root, *job);
    ASSERT_FALSE(r.ok()) << k.resume;
    EXPECT_EQ(r.status().code(), k.code) << r.status();
    EXPECT_EQ(r.status().message().rfind("--resume", 0), 0u) << r.status();
  }
  // All-reduce jobs resume from their own checkpoints
  // (worker/allreduce/checkpointing.h; tests:allreduce_checkpoint_test):
  // none here.
  c.mutable_training()->set_mode(pstrain::v1::MODE_ALLREDUCE);
  absl::StatusOr<pstrain::v1::JobSpec> ring = MakeJobSpec(c);
  ASSERT_TRUE(ring.ok()) << ring.status();
  absl::StatusOr<ResumePoint> r = ResolveResume(
      CheckpointEnv::Default(), "latest", tmp + "/no-such-root", *ring);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_EQ(r.status().message().rfind("--resume latest", 0), 0u) << r.status();
}

// Writes a complete checkpoint of `job` (its initial shards) at cut `step`.
void SaveAt(const std::string& root, const pstrain::v1::JobSpec& job,
            uint64_t step) {
  std::vector<ShardState> states;
  for (uint32_t k = 0; k < job.num_servers(); ++k) {
    absl::StatusOr<std::unique_ptr<Shard>> shard =
        Shard::Create(ShardOptionsFromJob(job, k));
    ASSERT_TRUE(shard.ok()) << shard.status();
    absl::StatusOr<ShardState> state = (*shard)->Snapshot();
    ASSERT_TRUE(state.ok()) << state.status();
    state->cut = step;
    states.push_back(std::move(*state));
  }
  absl::StatusOr<CheckpointManifest> manifest = ManifestForJob(job, step);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_TRUE(
      SaveCheckpoint(CheckpointEnv::Default(), root, *manifest, states, 0)
          .ok());
}

// Flips a byte in the middle of shard 0's file of checkpoint `step`.
void Corrupt(const std::string& root, uint64_t step, uint32_t num_shards) {
  const std::string path =
      CheckpointDir(root, step) + "/" + ShardFileName(0, num_shards);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(0, std::ios::end);
  const std::streamoff mid = f.tellg() / 2;
  f.seekg(mid);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(mid);
  f.write(&c, 1);
}

// Issue 22: a damaged newest checkpoint made --resume latest fail (exit 2)
// although an older complete one was fine. It is skipped, named, for the
// newest one that reads back whole.
TEST(ResolveResumeTest, DamagedNewestFallsBackToThePreviousOne) {
  const std::string root = ::testing::TempDir() + "/fallback";
  std::filesystem::remove_all(root);
  JobConfig c = DefaultJobConfig();
  c.mutable_training()->set_steps(10);
  FinalizeJobConfig(&c);
  absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(c);
  ASSERT_TRUE(job.ok()) << job.status();
  SaveAt(root, *job, 2);
  SaveAt(root, *job, 4);
  SaveAt(root, *job, 6);
  Corrupt(root, 6, job->num_servers());
  Corrupt(root, 4, job->num_servers());
  for (const std::string& resume : {std::string("latest"), root}) {
    absl::StatusOr<ResumePoint> r = ResolveResume(
        CheckpointEnv::Default(), resume, resume == "latest" ? root : "", *job);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->step, 2u);
    EXPECT_EQ(r->dir, CheckpointDir(root, 2));
    ASSERT_EQ(r->skipped.size(), 2u);
    EXPECT_EQ(r->skipped[0].rfind(CheckpointDir(root, 6) + ": ", 0), 0u)
        << r->skipped[0];
    EXPECT_NE(r->skipped[0].find("CRC-32C"), std::string::npos)
        << r->skipped[0];
    EXPECT_EQ(r->skipped[1].rfind(CheckpointDir(root, 4) + ": ", 0), 0u);
  }
  // A damaged checkpoint named itself is not replaced by another.
  absl::StatusOr<ResumePoint> named =
      ResolveResume(CheckpointEnv::Default(), CheckpointDir(root, 6), "", *job);
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.status().code(), absl::StatusCode::kDataLoss);
  // None whole: DATA_LOSS naming every damaged one.
  Corrupt(root, 2, job->num_servers());
  absl::StatusOr<ResumePoint> none =
      ResolveResume(CheckpointEnv::Default(), "latest", root, *job);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDataLoss);
  for (uint64_t step : {2, 4, 6}) {
    EXPECT_NE(none.status().message().find(CheckpointDir(root, step)),
              std::string::npos)
        << none.status();
  }
}

}  // namespace
}  // namespace pstrain
