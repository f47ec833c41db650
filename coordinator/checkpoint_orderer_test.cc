#include "coordinator/checkpoint_orderer.h"

#include <gtest/gtest.h>

#include <string>

#include "coordinator/job_spec.h"

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

}  // namespace
}  // namespace pstrain
