// training.on_failure: elastic in mode allreduce, at the coordinator
// service (docs/failures-and-recovery.md, "Elastic workers"): a rank declared
// dead starts a new generation and is offered to the (d mod count)-th live
// rank, whose second ring member registers for it with `adopt`; then the
// rollback is due, the ring has N members again, and the job rolls every rank
// back as under restart. A new worker for a hosted rank takes it back with one
// more generation; a host's death offers both its ranks to another live worker;
// fewer live workers than training.min_workers fail the job.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job_config.h"
#include "coordinator/coordinator_service.h"

namespace pstrain {
namespace {

class ElasticRingTest : public ::testing::Test {
 protected:
  // Three ranks of a gRPC ring, all registered.
  void Start(int min_workers = 1) {
    CoordinatorOptions options;
    options.config = DefaultJobConfig();
    options.config.mutable_job()->set_workers(3);
    options.config.mutable_training()->set_steps(10);
    options.config.mutable_training()->set_mode(v1::MODE_ALLREDUCE);
    options.config.mutable_training()->set_on_failure(
        v1::TrainingConfig::ELASTIC);
    options.config.mutable_training()->set_min_workers(min_workers);
    // Not a bound here: a ring rolls back once per loss whatever its value.
    options.config.mutable_training()->set_max_restarts(0);
    FinalizeJobConfig(&options.config);
    ASSERT_TRUE(ValidateJobConfig(options.config).ok());
    options.progress = false;
    options.wait_cap = absl::Milliseconds(200);
    auto c = CoordinatorService::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    sessions_.assign(3, 0);
    for (int w = 0; w < 3; ++w) {
      v1::RegisterWorkerResponse reg;
      ASSERT_TRUE(Register(w, false, Peer(w), &reg).ok());
      sessions_[w] = reg.session_id();
    }
  }

  static std::string Peer(int port) { return absl::StrCat("127.0.0.1:", port); }

  grpc::Status Register(int rank, bool adopt, const std::string& peer,
                        v1::RegisterWorkerResponse* reg) {
    grpc::ServerContext ctx;
    v1::RegisterWorkerRequest req;
    req.set_requested_rank(rank);
    req.set_adopt(adopt);
    req.set_peer_address(peer);
    return coord_->RegisterWorker(&ctx, &req, reg);
  }

  grpc::Status Heartbeat(int rank, uint64_t session,
                         v1::JobStatusResponse* resp) {
    grpc::ServerContext ctx;
    v1::JobStatusRequest req;
    req.set_process("worker");
    req.set_id(rank);
    req.set_session_id(session);
    resp->Clear();
    return coord_->JobStatus(&ctx, &req, resp);
  }

  grpc::Status Report(uint32_t worker, uint64_t session, uint64_t generation) {
    grpc::ServerContext ctx;
    v1::ReportRequest req;
    req.set_worker(worker);
    req.set_session_id(session);
    req.set_generation(generation);
    v1::StepMetrics* m = req.add_steps();
    m->set_worker(worker);
    m->set_step(0);
    m->set_loss(0.5);
    m->set_samples(8);
    v1::ReportResponse resp;
    return coord_->Report(&ctx, &req, &resp);
  }

  // Every rank but those in `dead` heartbeats now; then the leases of
  // `dead` run out (one per CheckLeases). Returns whether the job failed.
  bool Expire(const std::vector<int>& dead) {
    absl::SleepFor(absl::Milliseconds(50));
    for (int r = 0; r < 3; ++r) {
      if (std::find(dead.begin(), dead.end(), r) != dead.end()) continue;
      v1::JobStatusResponse resp;
      Heartbeat(r, sessions_[r], &resp).ok();  // a departed rank: refused
    }
    bool failed = false;
    for (size_t i = 0; i < dead.size(); ++i) {
      failed = coord_->CheckLeases(absl::Now() + absl::Seconds(5) -
                                   absl::Milliseconds(20)) ||
               failed;
    }
    return failed;
  }

  std::vector<uint32_t> Offered(int rank) {
    v1::JobStatusResponse resp;
    EXPECT_TRUE(Heartbeat(rank, sessions_[rank], &resp).ok());
    return {resp.adopt_ranks().begin(), resp.adopt_ranks().end()};
  }

  v1::JobStatusResponse Status() {
    grpc::ServerContext ctx;
    v1::JobStatusRequest req;
    v1::JobStatusResponse resp;
    EXPECT_TRUE(coord_->JobStatus(&ctx, &req, &resp).ok());
    return resp;
  }

  std::vector<std::string> Ring(int rank) {
    grpc::ServerContext ctx;
    v1::GetPeersRequest req;
    req.set_rank(rank);
    req.set_session_id(sessions_[rank]);
    v1::GetPeersResponse resp;
    EXPECT_TRUE(coord_->GetPeers(&ctx, &req, &resp).ok());
    return {resp.peer_addresses().begin(), resp.peer_addresses().end()};
  }

  // Rank 2 dies; rank 0 (2 mod 2 live ranks) hosts it at peer :9 and the
  // rollback of generation 1 ends at step 0. Returns the member's session.
  uint64_t HostRank2() {
    EXPECT_FALSE(Expire({2}));
    v1::RegisterWorkerResponse reg;
    EXPECT_TRUE(Register(2, true, Peer(9), &reg).ok());
    EXPECT_EQ(reg.job().generation(), 1u);
    const std::optional<CoordinatorService::RollbackOrder> due =
        coord_->RollbackDue();
    EXPECT_TRUE(due.has_value());
    EXPECT_TRUE(coord_->FinishRollback(1, "", 0));
    return reg.session_id();
  }

  std::unique_ptr<CoordinatorService> coord_;
  std::vector<uint64_t> sessions_;
};

TEST_F(ElasticRingTest, ADeadRankIsHostedByALiveOneAndEveryRankRollsBack) {
  Start();
  ASSERT_TRUE(Report(2, sessions_[2], 0).ok());
  EXPECT_EQ(Status().generation(), 0u);
  EXPECT_FALSE(Expire({2}));  // the job goes on
  v1::JobStatusResponse status = Status();
  EXPECT_FALSE(status.finished());
  EXPECT_EQ(status.generation(), 1u);  // a new generation, as under restart
  EXPECT_TRUE(status.recovering());
  // Departed rank 2 goes to the (2 mod 2)-th live rank: rank 0.
  EXPECT_EQ(Offered(0), std::vector<uint32_t>{2});
  EXPECT_TRUE(Offered(1).empty());
  // No rollback until a member holds rank 2; the dead process is refused.
  EXPECT_FALSE(coord_->RollbackDue().has_value());
  EXPECT_EQ(Report(2, sessions_[2], 0).error_code(),
            grpc::StatusCode::NOT_FOUND);
  {
    grpc::ServerContext ctx;
    v1::GetJobRequest req;
    req.set_wait_for_generation(1);
    v1::JobSpec job;
    EXPECT_EQ(coord_->GetJob(&ctx, &req, &job).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // Rank 0's second ring member registers for rank 2.
  v1::RegisterWorkerResponse reg;
  ASSERT_TRUE(Register(2, true, Peer(9), &reg).ok());
  EXPECT_EQ(reg.rank(), 2u);
  EXPECT_EQ(reg.job().generation(), 1u);
  EXPECT_NE(reg.session_id(), sessions_[2]);
  sessions_[2] = reg.session_id();
  EXPECT_TRUE(Offered(0).empty());
  // Nobody else may host it now.
  v1::RegisterWorkerResponse again;
  EXPECT_EQ(Register(2, true, Peer(10), &again).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  // Every rank rolls back; the ring has its 3 members, rank 2 at :9.
  const std::optional<CoordinatorService::RollbackOrder> due =
      coord_->RollbackDue();
  ASSERT_TRUE(due.has_value());
  EXPECT_EQ(due->generation, 1u);
  ASSERT_TRUE(coord_->FinishRollback(1, "", 0));
  EXPECT_FALSE(Status().recovering());
  EXPECT_EQ(Ring(1), (std::vector<std::string>{Peer(0), Peer(1), Peer(9)}));
  // A report of generation 0 is stale; the member's of generation 1 counts.
  EXPECT_EQ(Report(0, sessions_[0], 0).error_code(), grpc::StatusCode::ABORTED);
  EXPECT_TRUE(Report(2, sessions_[2], 1).ok());
}

TEST_F(ElasticRingTest, LiveRanksAreNeitherHostedNorReplaced) {
  Start();
  v1::RegisterWorkerResponse reg;
  for (bool adopt : {true, false}) {
    const grpc::Status st = Register(1, adopt, Peer(9), &reg);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    EXPECT_NE(st.error_message().find("held by a live worker"),
              std::string::npos)
        << st.error_message();
  }
  EXPECT_EQ(Status().generation(), 0u);  // nothing was lost
  // The same ring peer registering again is a retry: its own rank back.
  ASSERT_TRUE(Register(1, false, Peer(1), &reg).ok());
  EXPECT_EQ(reg.rank(), 1u);
  EXPECT_EQ(Status().generation(), 0u);
}

TEST_F(ElasticRingTest, ANewWorkerTakesAHostedRankBackWithOneMoreRollback) {
  Start();
  const uint64_t member = HostRank2();
  v1::RegisterWorkerResponse reg;
  ASSERT_TRUE(Register(2, false, Peer(12), &reg).ok());
  EXPECT_EQ(reg.job().generation(), 2u);
  EXPECT_TRUE(Status().recovering());
  // The hosting member's session ended: its calls are refused.
  EXPECT_EQ(Report(2, member, 1).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  const std::optional<CoordinatorService::RollbackOrder> due =
      coord_->RollbackDue();
  ASSERT_TRUE(due.has_value());
  EXPECT_EQ(due->generation, 2u);
  ASSERT_TRUE(coord_->FinishRollback(2, "", 0));
  EXPECT_EQ(Ring(0), (std::vector<std::string>{Peer(0), Peer(1), Peer(12)}));
  // The rank is its own worker's again.
  v1::RegisterWorkerResponse other;
  EXPECT_EQ(Register(2, false, Peer(13), &other).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
}

TEST_F(ElasticRingTest, AHostsDeathOffersBothItsRanksToAnotherLiveWorker) {
  Start();
  sessions_[2] = HostRank2();
  // Rank 0's process dies: its own rank and the member it hosted.
  EXPECT_FALSE(Expire({0, 2}));
  EXPECT_EQ(Status().generation(), 3u);
  EXPECT_EQ(Offered(1), (std::vector<uint32_t>{0, 2}));
  v1::RegisterWorkerResponse reg;
  ASSERT_TRUE(Register(0, true, Peer(20), &reg).ok());
  EXPECT_FALSE(coord_->RollbackDue().has_value());  // rank 2 still missing
  ASSERT_TRUE(Register(2, true, Peer(22), &reg).ok());
  ASSERT_TRUE(coord_->RollbackDue().has_value());
}

TEST_F(ElasticRingTest, FewerLiveWorkersThanMinWorkersFailTheJob) {
  Start(/*min_workers=*/3);
  EXPECT_TRUE(Expire({1}));
  const JobOutcome outcome = coord_->Outcome();
  EXPECT_TRUE(outcome.failed);
  ASSERT_TRUE(outcome.failure.has_value());
  EXPECT_EQ(outcome.failure->rank, 1);
  EXPECT_NE(outcome.message.find("training.min_workers = 3"), std::string::npos)
      << outcome.message;
}

}  // namespace
}  // namespace pstrain
