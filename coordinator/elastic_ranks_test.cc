// ElasticRanks on plain values (no service, no processes): a departure, the
// job failing below training.min_workers, abandoned ranks, and an async
// rejoin starting at the slowest live worker's step.
#include "coordinator/elastic_ranks.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/run_record.h"
#include "coordinator/failure_policy.h"
#include "coordinator/fake_job_events.h"
#include "coordinator/supervision_notes.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

constexpr int kWorkers = 3;
const absl::Time kNow = absl::FromUnixSeconds(1000);

StepLogOptions LogOptions() {
  StepLogOptions o;
  o.num_workers = kWorkers;
  o.steps = 20;
  return o;
}

class ElasticRanksTest : public ::testing::Test {
 protected:
  void Start(pstrain::v1::ConsistencyMode mode, int min_workers) {
    pstrain::v1::TrainingConfig training;
    training.set_mode(mode);
    training.set_on_failure(pstrain::v1::TrainingConfig::ELASTIC);
    training.set_max_restarts(3);
    training.set_min_workers(min_workers);
    policy_ = FailurePolicy::ForJob(training);
    std::optional<ElasticOptions> options = policy_->Elastic(kWorkers);
    ASSERT_TRUE(options.has_value());
    ranks_ = std::make_unique<ElasticRanks>(
        *options, policy_.get(), &members_, &leases_, &step_log_, &recovery_,
        &events_, &notes_, &mu_, absl::Milliseconds(100));
    // Every rank registered; they work on steps 7, 5 and 6.
    const uint64_t steps[kWorkers] = {7, 5, 6};
    for (int r = 0; r < kWorkers; ++r) {
      ASSERT_TRUE(members_.RegisterWorker(r, "").ok());
      leases_.Hold(LeaseHolder::kWorker, r, kNow, "peer");
      leases_.Renew(LeaseHolder::kWorker, r, kNow, steps[r]);
    }
  }

  std::string Notes() const { return ReadFileText(notes_path_).value_or(""); }

  ExpiredLease Dead(int rank) {
    ExpiredLease dead;
    dead.holder = LeaseHolder::kWorker;
    dead.id = rank;
    dead.silent = absl::Seconds(6);
    return dead;
  }

  Membership members_{1, kWorkers, false};
  LeaseTable leases_{1, kWorkers, absl::Seconds(5)};
  StepLog step_log_{LogOptions()};
  Recovery recovery_{3, absl::Seconds(30)};
  FakeJobEvents events_;
  const std::string notes_path_ =
      std::string(std::getenv("TEST_TMPDIR")) + "/" +
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  SupervisionNotes notes_{notes_path_};
  absl::Mutex mu_;
  std::unique_ptr<FailurePolicy> policy_;
  std::unique_ptr<ElasticRanks> ranks_;
};

TEST_F(ElasticRanksTest,
       AsyncDepartureIsAbandonedAndARejoinStartsAtTheSlowest) {
  ASSERT_NO_FATAL_FAILURE(Start(pstrain::v1::MODE_ASYNC, 1));
  const uint64_t old_session = members_.worker_session(2);
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(ranks_->Depart(Dead(2)), ElasticRanks::Departure::kGoesOn);
  EXPECT_TRUE(events_.failures.empty());
  EXPECT_FALSE(leases_.Held(LeaseHolder::kWorker, 2));
  EXPECT_EQ(ranks_->workers().state(2), ElasticWorkers::State::kDeparted);
  // Rank 2 reported nothing: the job goes on without it from step 0.
  EXPECT_EQ(Notes(), "dropped worker 2 from step 0\n");
  ranks_->AbandonStranded();
  EXPECT_EQ(ranks_->workers().state(2), ElasticWorkers::State::kAbandoned);

  EXPECT_TRUE(ranks_->Handles(2));
  grpc::ServerContext context;
  pstrain::v1::RegisterWorkerRequest request;
  request.set_requested_rank(2);
  auto joined = ranks_->Rejoin(context, request, /*job_start_step=*/0);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->rank, 2);
  EXPECT_EQ(joined->start_step, 5u);  // worker 1's, the slowest live one
  EXPECT_NE(joined->session, old_session);
  EXPECT_EQ(joined->session, members_.worker_session(2));
  EXPECT_TRUE(leases_.Held(LeaseHolder::kWorker, 2));
  EXPECT_EQ(ranks_->workers().state(2), ElasticWorkers::State::kLive);
  // A live rank is not given away.
  EXPECT_EQ(ranks_->Rejoin(context, request, 0).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Notes(),
            "dropped worker 2 from step 0\n"
            "rejoined worker 2 from step 5\n");
}

TEST_F(ElasticRanksTest, DepartureBelowMinWorkersFailsTheJobNamingIt) {
  ASSERT_NO_FATAL_FAILURE(Start(pstrain::v1::MODE_SYNC, 3));
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(ranks_->Depart(Dead(1)), ElasticRanks::Departure::kJobFailed);
  ASSERT_EQ(events_.failures.size(), 1u);
  EXPECT_EQ(events_.failures[0].process, "worker");
  EXPECT_EQ(events_.failures[0].rank, 1);
  EXPECT_NE(events_.failures[0].message.find("min_workers"), std::string::npos)
      << events_.failures[0].message;
  EXPECT_TRUE(events_.lost.empty());
  EXPECT_EQ(Notes(), "");  // the job failed: nothing departed
}

TEST_F(ElasticRanksTest, SyncHandoverWaitIsBoundedAndAsksForARetry) {
  ASSERT_NO_FATAL_FAILURE(Start(pstrain::v1::MODE_SYNC, 1));
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(ranks_->Depart(Dead(2)), ElasticRanks::Departure::kGoesOn);
  // Nobody has taken rank 2 over yet: a new worker for it waits (wait_cap)
  // and is told to retry; nothing is given away.
  grpc::ServerContext context;
  pstrain::v1::RegisterWorkerRequest request;
  request.set_requested_rank(2);
  EXPECT_EQ(ranks_->Rejoin(context, request, 0).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(leases_.Held(LeaseHolder::kWorker, 2));
  EXPECT_NE(ranks_->workers().state(2), ElasticWorkers::State::kLive);
  // Sync: a departed rank is taken over, never dropped; nothing happened.
  EXPECT_EQ(Notes(), "");
}

}  // namespace
}  // namespace pstrain
