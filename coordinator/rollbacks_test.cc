// Rollbacks on plain values (no service, no processes): a lost worker
// starts a generation and is noted for the supervisor; the rollback is due
// once its replacement is in and ends with Finish; a job with a finished
// worker or an overdue replacement fails instead.
#include "coordinator/rollbacks.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/run_record.h"
#include "coordinator/fake_job_events.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

StepLogOptions LogOptions() {
  StepLogOptions o;
  o.num_workers = 2;
  o.steps = 20;
  return o;
}

class RollbacksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    training_.set_on_failure(pstrain::v1::TrainingConfig::RESTART);
    training_.set_max_restarts(3);
    training_.set_restart_timeout_s(30);
    policy_ = FailurePolicy::ForJob(training_);
    notes_path_ =
        std::string(std::getenv("TEST_TMPDIR")) + "/" +
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    notes_ = std::make_unique<SupervisionNotes>(notes_path_);
    rollbacks_ = std::make_unique<Rollbacks>(
        policy_.get(), training_, &recovery_, &members_, &leases_, &step_log_,
        &job_, notes_.get(), &events_);
    ASSERT_TRUE(members_.RegisterServer("127.0.0.1:1", -1).ok());
    ASSERT_TRUE(members_.MarkServerReady(0).ok());
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(members_.RegisterWorker(r, "").ok());
      leases_.Hold(LeaseHolder::kWorker, r, absl::Now(), "peer");
    }
  }

  std::string Notes() const { return ReadFileText(notes_path_).value_or(""); }

  pstrain::v1::TrainingConfig training_;
  std::unique_ptr<FailurePolicy> policy_;
  Recovery recovery_{3, absl::Seconds(30)};
  Membership members_{1, 2, false};
  LeaseTable leases_{1, 2, absl::Seconds(5)};
  StepLog step_log_{LogOptions()};
  pstrain::v1::JobSpec job_;
  std::string notes_path_;
  std::unique_ptr<SupervisionNotes> notes_;
  FakeJobEvents events_;
  std::unique_ptr<Rollbacks> rollbacks_;
};

TEST_F(RollbacksTest, ALostWorkerRollsBackOnceItsReplacementIsIn) {
  rollbacks_->Lose(LeaseHolder::kWorker, 1, "dead");
  EXPECT_TRUE(events_.failures.empty());
  EXPECT_EQ(job_.generation(), 1u);
  EXPECT_EQ(Notes(), "lost 1 worker 1\n");
  EXPECT_FALSE(members_.WorkerHeld(1));
  EXPECT_FALSE(leases_.Held(LeaseHolder::kWorker, 1));
  EXPECT_FALSE(rollbacks_->Due());
  EXPECT_FALSE(rollbacks_->Recovered(1));
  EXPECT_FALSE(rollbacks_->Overdue(absl::Now()).has_value());
  EXPECT_FALSE(rollbacks_->Finish(1, "ckpt-4", 4));  // replacement missing

  ASSERT_TRUE(members_.RegisterWorker(1, "").ok());
  recovery_.Filled(LeaseHolder::kWorker, 1);
  EXPECT_TRUE(rollbacks_->Due());
  EXPECT_FALSE(rollbacks_->Finish(2, "ckpt-4", 4));  // not this generation
  ASSERT_TRUE(rollbacks_->Finish(1, "ckpt-4", 4));
  EXPECT_TRUE(rollbacks_->Recovered(1));
  EXPECT_FALSE(rollbacks_->Due());
  EXPECT_EQ(job_.resume_from(), "ckpt-4");
  EXPECT_EQ(job_.start_step(), 4u);
  EXPECT_FALSE(rollbacks_->Finish(1, "ckpt-4", 4));  // once
  // The refused Finish calls noted nothing; the rollback is noted once.
  EXPECT_EQ(Notes(), "lost 1 worker 1\nrolled back generation 1 to step 4\n");
}

TEST_F(RollbacksTest, AnOverdueReplacementFailsTheJobNamingIt) {
  rollbacks_->Lose(LeaseHolder::kServer, 0, "dead");
  const std::optional<RunFailure> overdue =
      rollbacks_->Overdue(absl::Now() + absl::Seconds(31));
  ASSERT_TRUE(overdue.has_value());
  EXPECT_EQ(overdue->process, "server");
  EXPECT_EQ(overdue->shard, 0);
  EXPECT_NE(overdue->message.find("training.restart_timeout_s = 30"),
            std::string::npos)
      << overdue->message;
}

TEST_F(RollbacksTest, NoRollbackOnceAWorkerFinished) {
  members_.MarkWorkerDone(0);
  rollbacks_->Lose(LeaseHolder::kWorker, 1, "dead");
  ASSERT_EQ(events_.failures.size(), 1u);
  EXPECT_EQ(events_.failures[0].rank, 1);
  EXPECT_NE(events_.failures[0].message.find("already finished"),
            std::string::npos);
  EXPECT_EQ(job_.generation(), 0u);
  EXPECT_EQ(Notes(), "");
  EXPECT_TRUE(members_.WorkerHeld(1));
}

}  // namespace
}  // namespace pstrain
