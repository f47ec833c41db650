// The failure policies, decided from plain values (no processes): the
// table in failure_policy.h, row by row.
#include "coordinator/failure_policy.h"

#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

using pstrain::v1::AllReduceConfig;
using pstrain::v1::JobConfig;
using pstrain::v1::ModelConfig;
using pstrain::v1::TrainingConfig;

std::unique_ptr<FailurePolicy> Policy(TrainingConfig::OnFailure on_failure,
                                      pstrain::v1::ConsistencyMode mode,
                                      int64_t max_restarts = 3,
                                      int64_t min_workers = 2) {
  TrainingConfig t;
  t.set_on_failure(on_failure);
  t.set_mode(mode);
  t.set_max_restarts(max_restarts);
  t.set_min_workers(min_workers);
  return FailurePolicy::ForJob(t);
}

TEST(FailurePolicyTest, FailEndsTheJobOnAnyLoss) {
  for (auto on_failure :
       {TrainingConfig::FAIL, TrainingConfig::ON_FAILURE_UNSPECIFIED}) {
    auto p = Policy(on_failure, pstrain::v1::MODE_SYNC);
    EXPECT_STREQ(p->name(), "fail");
    EXPECT_EQ(p->OnLost(LeaseHolder::kServer), LossResponse::kFailJob);
    EXPECT_EQ(p->OnLost(LeaseHolder::kWorker), LossResponse::kFailJob);
    EXPECT_EQ(p->FailureNote(LeaseHolder::kWorker),
              " (training.on_failure: fail)");
    EXPECT_FALSE(p->NewcomerReplacesHolder());
    EXPECT_FALSE(p->Elastic(4).has_value());
    EXPECT_FALSE(p->Rejoins() || p->HandsOver() || p->RingMembers());
    EXPECT_EQ(p->max_rollbacks(), 0);
    EXPECT_EQ(p->max_shard_generation(), 0u);
    EXPECT_FALSE(p->RollsBack() || p->StandsIn() || p->HostsRanks());
  }
}

TEST(FailurePolicyTest, RestartRollsBackInEveryMode) {
  for (auto mode : {pstrain::v1::MODE_SYNC, pstrain::v1::MODE_ASYNC,
                    pstrain::v1::MODE_ALLREDUCE}) {
    auto p = Policy(TrainingConfig::RESTART, mode, /*max_restarts=*/5);
    EXPECT_STREQ(p->name(), "restart");
    EXPECT_EQ(p->OnLost(LeaseHolder::kServer), LossResponse::kRollBack);
    EXPECT_EQ(p->OnLost(LeaseHolder::kWorker), LossResponse::kRollBack);
    EXPECT_TRUE(p->NewcomerReplacesHolder());
    EXPECT_FALSE(p->Elastic(4).has_value());
    EXPECT_EQ(p->max_rollbacks(), 5);
    EXPECT_EQ(p->max_shard_generation(), 5u);
    EXPECT_TRUE(p->RollsBack());
    EXPECT_FALSE(p->StandsIn() || p->HostsRanks() || p->RingMembers());
  }
  // A negative bound gives shards no generation to roll back to.
  EXPECT_EQ(Policy(TrainingConfig::RESTART, pstrain::v1::MODE_SYNC, -1)
                ->max_shard_generation(),
            0u);
}

TEST(FailurePolicyTest, ElasticSyncTakesRanksOverAndHandsThemBack) {
  auto p = Policy(TrainingConfig::ELASTIC, pstrain::v1::MODE_SYNC,
                  /*max_restarts=*/3, /*min_workers=*/2);
  EXPECT_STREQ(p->name(), "elastic");
  EXPECT_EQ(p->OnLost(LeaseHolder::kWorker), LossResponse::kTakeOver);
  EXPECT_EQ(p->OnLost(LeaseHolder::kServer), LossResponse::kFailJob);
  EXPECT_EQ(p->FailureNote(LeaseHolder::kServer),
            " (training.on_failure: elastic covers workers only)");
  EXPECT_FALSE(p->NewcomerReplacesHolder());
  ASSERT_TRUE(p->Elastic(4).has_value());
  EXPECT_EQ(p->Elastic(4)->num_workers, 4);
  EXPECT_EQ(p->Elastic(4)->min_workers, 2);
  EXPECT_TRUE(p->Elastic(4)->takeover);
  EXPECT_TRUE(p->Rejoins() && p->HandsOver() && p->StandsIn());
  EXPECT_FALSE(p->RingMembers() || p->RollsBack() || p->HostsRanks());
  EXPECT_EQ(p->max_shard_generation(), 0u);
}

TEST(FailurePolicyTest, ElasticAsyncGoesOnWithoutTheRank) {
  auto p = Policy(TrainingConfig::ELASTIC, pstrain::v1::MODE_ASYNC,
                  /*max_restarts=*/3, /*min_workers=*/0);
  EXPECT_EQ(p->OnLost(LeaseHolder::kWorker), LossResponse::kTakeOver);
  ASSERT_TRUE(p->Elastic(3).has_value());
  EXPECT_FALSE(p->Elastic(3)->takeover);
  EXPECT_EQ(p->Elastic(3)->min_workers, 1);  // at least one worker
  EXPECT_TRUE(p->Rejoins());
  EXPECT_FALSE(p->HandsOver() || p->StandsIn() || p->RollsBack());
}

TEST(FailurePolicyTest, ElasticRingHostsTheRankAndRollsBack) {
  auto p = Policy(TrainingConfig::ELASTIC, pstrain::v1::MODE_ALLREDUCE,
                  /*max_restarts=*/1);
  EXPECT_STREQ(p->name(), "elastic");
  EXPECT_EQ(p->OnLost(LeaseHolder::kWorker), LossResponse::kHostAndRollBack);
  ASSERT_TRUE(p->Elastic(4).has_value());
  EXPECT_TRUE(p->Elastic(4)->takeover);
  EXPECT_TRUE(p->RingMembers() && p->RollsBack() && p->HostsRanks());
  EXPECT_FALSE(p->Rejoins() || p->HandsOver() || p->StandsIn());
  // Bounded by training.min_workers, not by training.max_restarts.
  EXPECT_EQ(p->max_rollbacks(), std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(p->NewcomerReplacesHolder());
}

// psctl run's questions (tools/launch/supervisor.h), for each policy and
// mode: the table in failure_policy.h.
TEST(FailurePolicyTest, FailNeverStartsAProcessAgain) {
  for (auto mode : {pstrain::v1::MODE_SYNC, pstrain::v1::MODE_ASYNC,
                    pstrain::v1::MODE_ALLREDUCE}) {
    auto p = Policy(TrainingConfig::FAIL, mode, /*max_restarts=*/3);
    EXPECT_EQ(p->Described(), "training.on_failure: fail");
    for (LeaseHolder h : {LeaseHolder::kServer, LeaseHolder::kWorker}) {
      EXPECT_EQ(p->RelaunchOnExit(h), Relaunch::kNever);
      EXPECT_FALSE(p->GoesOnWithout(h));
    }
    EXPECT_EQ(p->max_relaunches(), 0);
    EXPECT_FALSE(p->EndsLostProcesses());
  }
}

TEST(FailurePolicyTest, RestartStartsAnyProcessAgainAtOnce) {
  for (auto mode : {pstrain::v1::MODE_SYNC, pstrain::v1::MODE_ASYNC,
                    pstrain::v1::MODE_ALLREDUCE}) {
    auto p = Policy(TrainingConfig::RESTART, mode, /*max_restarts=*/4);
    EXPECT_EQ(p->Described(), "training.on_failure: restart");
    for (LeaseHolder h : {LeaseHolder::kServer, LeaseHolder::kWorker}) {
      EXPECT_EQ(p->RelaunchOnExit(h), Relaunch::kNow);
      // Out of restarts, the job fails: its rollback awaits the process.
      EXPECT_FALSE(p->GoesOnWithout(h));
    }
    EXPECT_EQ(p->RelaunchDelay(absl::Seconds(5)), absl::ZeroDuration());
    EXPECT_EQ(p->max_relaunches(), 4);
    EXPECT_TRUE(p->EndsLostProcesses());
  }
}

TEST(FailurePolicyTest, ElasticStartsAWorkerAgainToRejoinInEveryMode) {
  for (auto mode : {pstrain::v1::MODE_SYNC, pstrain::v1::MODE_ASYNC,
                    pstrain::v1::MODE_ALLREDUCE}) {
    auto p = Policy(TrainingConfig::ELASTIC, mode, /*max_restarts=*/2,
                    /*min_workers=*/1);
    EXPECT_EQ(p->Described(), "training.on_failure: elastic");
    EXPECT_EQ(p->RelaunchOnExit(LeaseHolder::kWorker), Relaunch::kToRejoin);
    EXPECT_EQ(p->RelaunchOnExit(LeaseHolder::kServer), Relaunch::kNever);
    // Once its lease has run out, and a second more.
    EXPECT_EQ(p->RelaunchDelay(absl::Seconds(7)), absl::Seconds(8));
    EXPECT_EQ(p->max_relaunches(), 2);
    EXPECT_TRUE(p->GoesOnWithout(LeaseHolder::kWorker));
    EXPECT_FALSE(p->GoesOnWithout(LeaseHolder::kServer));
    EXPECT_FALSE(p->EndsLostProcesses());
  }
}

// Job validation (common/job_config.cc asks CheckJob): each rule a policy
// adds, its exact error, and the same job under the policies it allows.
JobConfig Job(TrainingConfig::OnFailure on_failure,
              pstrain::v1::ConsistencyMode mode) {
  JobConfig c;
  c.mutable_training()->set_on_failure(on_failure);
  c.mutable_training()->set_mode(mode);
  return c;
}

absl::Status Check(const JobConfig& c) {
  return FailurePolicy::ForJob(c.training())->CheckJob(c);
}

void ExpectRefused(const JobConfig& c, const std::string& message) {
  const absl::Status s = Check(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(std::string(s.message()), message);
  // The same job under on_failure fail is fine: the rule is the policy's.
  JobConfig fail = c;
  fail.mutable_training()->set_on_failure(TrainingConfig::FAIL);
  EXPECT_TRUE(Check(fail).ok()) << Check(fail);
}

TEST(FailurePolicyCheckJobTest, EveryPolicyAcceptsPlainJobsInEveryMode) {
  for (auto on_failure :
       {TrainingConfig::ON_FAILURE_UNSPECIFIED, TrainingConfig::FAIL,
        TrainingConfig::RESTART, TrainingConfig::ELASTIC}) {
    for (auto mode : {pstrain::v1::MODE_SYNC, pstrain::v1::MODE_ASYNC,
                      pstrain::v1::MODE_ALLREDUCE}) {
      const JobConfig c = Job(on_failure, mode);
      EXPECT_TRUE(Check(c).ok()) << Check(c);
    }
  }
}

TEST(FailurePolicyCheckJobTest, RingRollbacksNeedTheGrpcRing) {
  for (auto on_failure : {TrainingConfig::RESTART, TrainingConfig::ELASTIC}) {
    JobConfig c = Job(on_failure, pstrain::v1::MODE_ALLREDUCE);
    c.mutable_allreduce()->set_backend(AllReduceConfig::NCCL);
    const std::string name =
        on_failure == TrainingConfig::RESTART ? "restart" : "elastic";
    ExpectRefused(c, "training.on_failure: '" + name +
                         "' in mode allreduce needs allreduce.backend: grpc "
                         "(a NCCL communicator is not re-formed after a "
                         "loss); use 'fail' and resume from a checkpoint "
                         "(psctl run --resume latest)");
    // NCCL outside mode allreduce is not read.
    c.mutable_training()->set_mode(pstrain::v1::MODE_SYNC);
    EXPECT_TRUE(Check(c).ok()) << Check(c);
  }
}

TEST(FailurePolicyCheckJobTest, RingRollbacksRefuseRowSparseTables) {
  for (auto on_failure : {TrainingConfig::RESTART, TrainingConfig::ELASTIC}) {
    JobConfig c = Job(on_failure, pstrain::v1::MODE_ALLREDUCE);
    c.mutable_model()->set_type(ModelConfig::WIDE_DEEP);
    const std::string name =
        on_failure == TrainingConfig::RESTART ? "restart" : "elastic";
    ExpectRefused(c, "training.on_failure: " + name +
                         " in mode allreduce needs checkpoints, which "
                         "row-sparse tables (model.type wide_deep) do not "
                         "have there yet: use fail");
  }
  // Restart rolls row-sparse shards back in both parameter-server modes.
  for (auto mode : {pstrain::v1::MODE_SYNC, pstrain::v1::MODE_ASYNC}) {
    JobConfig c = Job(TrainingConfig::RESTART, mode);
    c.mutable_model()->set_type(ModelConfig::WIDE_DEEP);
    EXPECT_TRUE(Check(c).ok()) << Check(c);
  }
}

TEST(FailurePolicyCheckJobTest, ElasticRowSparseTablesNeedModeSync) {
  JobConfig c = Job(TrainingConfig::ELASTIC, pstrain::v1::MODE_ASYNC);
  c.mutable_model()->set_type(ModelConfig::WIDE_DEEP);
  ExpectRefused(c,
                "training.on_failure: elastic with row-sparse tables "
                "(model.type wide_deep) needs training.mode sync: the row "
                "clocks do not follow the elastic membership in async; use "
                "fail or restart");
  c.mutable_training()->set_mode(pstrain::v1::MODE_SYNC);
  EXPECT_TRUE(Check(c).ok()) << Check(c);
}

TEST(FailurePolicyCheckJobTest, ElasticSyncNeedsNoBackupWorkers) {
  JobConfig c = Job(TrainingConfig::ELASTIC, pstrain::v1::MODE_SYNC);
  c.mutable_training()->set_backup_workers(1);
  ExpectRefused(c,
                "training.on_failure: 'elastic' in mode sync needs "
                "training.backup_workers: 0 (a taken-over rank's steps are "
                "exact only when every step waits for every rank)");
  // Async steps wait for nobody: backup workers change nothing there.
  c.mutable_training()->set_mode(pstrain::v1::MODE_ASYNC);
  EXPECT_TRUE(Check(c).ok()) << Check(c);
  // Restart rolls back to a checkpoint: no takeover to keep exact.
  c = Job(TrainingConfig::RESTART, pstrain::v1::MODE_SYNC);
  c.mutable_training()->set_backup_workers(1);
  EXPECT_TRUE(Check(c).ok()) << Check(c);
}

}  // namespace
}  // namespace pstrain
