// training.on_failure: elastic in mode sync, at the coordinator service
// (docs/failures-and-recovery.md, "Elastic workers"): a dead rank is offered to
// a live worker in its heartbeat answers; the stand-in registers with `adopt`
// and `adopt_from_step`, gets a new session and starts at the step whose
// weights it holds; the dead process's unreported steps before it are excused
// (rows complete without them), its session is refused, and the job ends with
// every step a row. The handover (coordinator/elastic.h): a new worker for a
// stood-in rank waits until the stand-in released it and starts at the first
// step the stand-in did not push.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/job_config.h"
#include "coordinator/coordinator_service.h"

namespace pstrain {
namespace {

constexpr int kSteps = 10;

class TakeoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.config = DefaultJobConfig();
    options.config.mutable_job()->set_workers(2);
    options.config.mutable_job()->set_servers(1);
    options.config.mutable_training()->set_steps(kSteps);
    options.config.mutable_training()->set_mode(v1::MODE_SYNC);
    options.config.mutable_training()->set_on_failure(
        v1::TrainingConfig::ELASTIC);
    FinalizeJobConfig(&options.config);
    ASSERT_TRUE(ValidateJobConfig(options.config).ok());
    options.progress = false;
    options.wait_cap = absl::Milliseconds(300);  // a registration's wait
    notes_path_ =
        std::string(std::getenv("TEST_TMPDIR")) + "/" +
        ::testing::UnitTest::GetInstance()->current_test_info()->name() +
        ".supervision.txt";
    options.supervision_file = notes_path_;
    auto c = CoordinatorService::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    grpc::ServerContext ctx;
    v1::RegisterServerRequest rs;
    rs.set_address("127.0.0.1:1");
    rs.set_requested_shard(-1);
    v1::RegisterServerResponse rsr;
    ASSERT_TRUE(coord_->RegisterServer(&ctx, &rs, &rsr).ok());
    server_session_ = rsr.session_id();
    v1::ServerReadyRequest ready;
    ready.set_session_id(rsr.session_id());
    v1::ServerReadyResponse ready_resp;
    ASSERT_TRUE(coord_->ServerReady(&ctx, &ready, &ready_resp).ok());
    for (int w = 0; w < 2; ++w) {
      v1::RegisterWorkerRequest rw;
      rw.set_requested_rank(w);
      v1::RegisterWorkerResponse rwr;
      ASSERT_TRUE(coord_->RegisterWorker(&ctx, &rw, &rwr).ok());
      sessions_.push_back(rwr.session_id());
    }
  }

  grpc::Status Report(uint32_t worker, uint64_t session, uint64_t from,
                      uint64_t to, bool done) {
    grpc::ServerContext ctx;
    v1::ReportRequest req;
    req.set_worker(worker);
    req.set_session_id(session);
    req.set_done(done);
    for (uint64_t s = from; s < to; ++s) {
      v1::StepMetrics* m = req.add_steps();
      m->set_worker(worker);
      m->set_step(s);
      m->set_loss(0.5);
      m->set_samples(s < kSteps ? 8 : 0);
    }
    v1::ReportResponse resp;
    return coord_->Report(&ctx, &req, &resp);
  }

  grpc::Status Heartbeat(const std::string& process, int id, uint64_t session,
                         v1::JobStatusResponse* resp) {
    grpc::ServerContext ctx;
    v1::JobStatusRequest req;
    req.set_process(process);
    req.set_id(id);
    req.set_session_id(session);
    resp->Clear();
    return coord_->JobStatus(&ctx, &req, resp);
  }

  // 50 ms pass, the server and worker 0 heartbeat (no rank is offered to
  // worker 0 yet), then the leases (5 s) are checked as if they ran out
  // just after those heartbeats: worker 1 is dead, the job goes on.
  void LeasesRunOutForAllButWorker0() {
    absl::SleepFor(absl::Milliseconds(50));
    v1::JobStatusResponse resp;
    ASSERT_TRUE(Heartbeat("server", 0, server_session_, &resp).ok());
    ASSERT_TRUE(Heartbeat("worker", 0, sessions_[0], &resp).ok());
    EXPECT_EQ(resp.adopt_ranks_size(), 0);
    EXPECT_FALSE(coord_->CheckLeases(absl::Now() + absl::Seconds(5) -
                                     absl::Milliseconds(20)));
  }

  // A live worker's registration as the stand-in for `rank`, holding the
  // weights of `from_step`; the stand-in names itself as `adopter` (the
  // live worker 0 here; -1: it names nobody).
  grpc::Status Adopt(int rank, uint64_t from_step,
                     v1::RegisterWorkerResponse* reg, int adopter = 0) {
    grpc::ServerContext ctx;
    v1::RegisterWorkerRequest req;
    req.set_requested_rank(rank);
    req.set_adopt(true);
    req.set_adopt_from_step(from_step);
    if (adopter >= 0) req.set_adopter(adopter);
    return coord_->RegisterWorker(&ctx, &req, reg);
  }

  // Worker 1 reported steps 0..1 and dies; worker 0 (at step 4) takes it
  // over from step 4. Returns the stand-in's session for rank 1.
  uint64_t TakeOverRank1() {
    EXPECT_TRUE(Report(0, sessions_[0], 0, 4, false).ok());
    EXPECT_TRUE(Report(1, sessions_[1], 0, 2, false).ok());
    LeasesRunOutForAllButWorker0();
    v1::RegisterWorkerResponse reg;
    EXPECT_TRUE(Adopt(1, 4, &reg).ok());
    EXPECT_EQ(reg.start_step(), 4u);
    return reg.session_id();
  }

  grpc::Status Release(uint32_t rank, uint64_t session, uint64_t next_step) {
    grpc::ServerContext ctx;
    v1::ReleaseRankRequest req;
    req.set_rank(rank);
    req.set_session_id(session);
    req.set_next_step(next_step);
    v1::ReleaseRankResponse resp;
    return coord_->ReleaseRank(&ctx, &req, &resp);
  }

  grpc::Status Join(int rank, v1::RegisterWorkerResponse* reg) {
    grpc::ServerContext ctx;
    v1::RegisterWorkerRequest req;
    req.set_requested_rank(rank);
    return coord_->RegisterWorker(&ctx, &req, reg);
  }

  // Rank 1 (session `rank1_session`, from step `rank1_from`) and worker 0
  // (from step 4) report the rest of the job and finish: it succeeds with
  // every step a row, and only steps 2 and 3 (the dead process's,
  // unreported) miss rank 1's samples.
  void FinishWithEveryStep(uint64_t rank1_session, uint64_t rank1_from) {
    ASSERT_TRUE(Report(1, rank1_session, rank1_from, kSteps + 1, true).ok());
    ASSERT_TRUE(Report(0, sessions_[0], 4, kSteps + 1, true).ok());
    ASSERT_TRUE(coord_->WaitForEnd(absl::Now() + absl::Seconds(5)));
    const JobOutcome o = coord_->Outcome();
    EXPECT_FALSE(o.failed) << o.message;
    EXPECT_EQ(o.steps, static_cast<uint64_t>(kSteps));
    EXPECT_EQ(o.samples, static_cast<uint64_t>(2 * 8 * kSteps - 2 * 8));
  }

  // The coordinator's notes for its supervisor (supervision.txt).
  std::string Notes() const {
    std::ifstream in(notes_path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string notes_path_;
  uint64_t server_session_ = 0;  // shard 0's
  std::unique_ptr<CoordinatorService> coord_;
  std::vector<uint64_t> sessions_;
};

TEST_F(TakeoverTest, StandInStartsAtItsHeldStepAndTheJobCountsEveryStep) {
  // Worker 1 reported steps 0..1, worker 0 steps 0..3; worker 1 falls
  // silent (it had pushed steps 2 and 3 unreported).
  ASSERT_TRUE(Report(0, sessions_[0], 0, 4, false).ok());
  ASSERT_TRUE(Report(1, sessions_[1], 0, 2, false).ok());
  ASSERT_NO_FATAL_FAILURE(LeasesRunOutForAllButWorker0());
  v1::JobStatusResponse resp;
  ASSERT_TRUE(Heartbeat("worker", 0, sessions_[0], &resp).ok());
  EXPECT_FALSE(resp.failed());
  ASSERT_EQ(resp.adopt_ranks_size(), 1);
  EXPECT_EQ(resp.adopt_ranks(0), 1u);
  // The dead process's session is refused from now on.
  EXPECT_EQ(Heartbeat("worker", 1, sessions_[1], &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // Worker 0 holds the weights of step 4: it stands in from there.
  v1::RegisterWorkerResponse reg;
  ASSERT_TRUE(Adopt(1, 4, &reg).ok());
  EXPECT_EQ(reg.rank(), 1u);
  EXPECT_EQ(reg.start_step(), 4u);
  EXPECT_NE(reg.session_id(), sessions_[1]);
  ASSERT_TRUE(Heartbeat("worker", 0, sessions_[0], &resp).ok());
  EXPECT_EQ(resp.adopt_ranks_size(), 0);
  // A second adoption of the rank is refused.
  v1::RegisterWorkerResponse again;
  EXPECT_EQ(Adopt(1, 4, &again).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Report(1, sessions_[1], 2, 4, false).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // The stand-in reports rank 1 from step 4, both finish.
  FinishWithEveryStep(reg.session_id(), 4);
  // The notes name the stand-in and each rank's end, once each (worker 0
  // itself and its stand-in for rank 1; not the refused adoption).
  EXPECT_EQ(Notes(),
            "registered worker 0\nregistered worker 1\n"
            "dead worker 1\ntaken over worker 1 from step 4 by worker 0\n"
            "done worker 1\ndone worker 0\n");
}

TEST_F(TakeoverTest, BadAdopterIsRefusedAndChangesNothing) {
  ASSERT_TRUE(Report(0, sessions_[0], 0, 4, false).ok());
  ASSERT_TRUE(Report(1, sessions_[1], 0, 2, false).ok());
  ASSERT_NO_FATAL_FAILURE(LeasesRunOutForAllButWorker0());
  const std::string before = Notes();
  v1::RegisterWorkerResponse reg;
  // The adopted rank itself, and a rank the job does not have.
  for (int adopter : {1, 2}) {
    const grpc::Status st = Adopt(1, 4, &reg, adopter);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << adopter;
    EXPECT_NE(st.error_message().find("adopter"), std::string::npos)
        << st.error_message();
  }
  // An adopter without `adopt`.
  {
    grpc::ServerContext ctx;
    v1::RegisterWorkerRequest req;
    req.set_requested_rank(1);
    req.set_adopter(0);
    const grpc::Status st = coord_->RegisterWorker(&ctx, &req, &reg);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("adopter is only for"), std::string::npos)
        << st.error_message();
  }
  EXPECT_EQ(Notes(), before);
  // The rank is still there to take over; a stand-in naming nobody is
  // noted without an adopter.
  ASSERT_TRUE(Adopt(1, 4, &reg, /*adopter=*/-1).ok());
  EXPECT_EQ(Notes(), before + "taken over worker 1 from step 4\n");
}

TEST_F(TakeoverTest, NewWorkerGetsTheRankWhenTheStandInReleasesIt) {
  const uint64_t stand_in = TakeOverRank1();
  // The notes: both first registrations, worker 1's death and its
  // takeover from step 4 (the stand-in's adoption is no registration).
  const std::string first =
      "registered worker 0\nregistered worker 1\n"
      "dead worker 1\ntaken over worker 1 from step 4 by worker 0\n";
  EXPECT_EQ(Notes(), first);
  v1::JobStatusResponse resp;
  ASSERT_TRUE(Heartbeat("worker", 1, stand_in, &resp).ok());
  EXPECT_FALSE(resp.release_rank());
  // Nobody asked for the rank: a release is refused, nothing changes.
  EXPECT_EQ(Release(1, stand_in, 5).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // A new worker for the live rank 0 is refused at once.
  v1::RegisterWorkerResponse reg;
  const grpc::Status live = Join(0, &reg);
  EXPECT_EQ(live.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(live.error_message().find("held by a live worker"),
            std::string::npos)
      << live.error_message();
  // A new worker for rank 1 waits (bounded: wait_cap), then UNAVAILABLE
  // (retry) while the stand-in has not released it.
  const absl::Time t0 = absl::Now();
  const grpc::Status waited = Join(1, &reg);
  EXPECT_EQ(waited.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(waited.error_message().find("being handed over"), std::string::npos)
      << waited.error_message();
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(250));
  EXPECT_EQ(Notes(), first);  // not registered yet
  // The stand-in's heartbeat for the rank now asks for it back; its own
  // heartbeat does not.
  ASSERT_TRUE(Heartbeat("worker", 1, stand_in, &resp).ok());
  EXPECT_TRUE(resp.release_rank());
  ASSERT_TRUE(Heartbeat("worker", 0, sessions_[0], &resp).ok());
  EXPECT_FALSE(resp.release_rank());
  // It pushed and reported steps 4 and 5, then releases: the new worker,
  // waiting meanwhile, starts at step 6 with a session of its own.
  ASSERT_TRUE(Report(1, stand_in, 4, 6, false).ok());
  EXPECT_EQ(Release(1, sessions_[1], 6).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);  // the dead process's
  grpc::Status joined;
  std::thread newcomer([&] { joined = Join(1, &reg); });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(Release(1, stand_in, 6).ok());
  newcomer.join();
  ASSERT_TRUE(joined.ok()) << joined.error_message();
  EXPECT_EQ(reg.rank(), 1u);
  EXPECT_EQ(reg.start_step(), 6u);
  EXPECT_TRUE(reg.rejoined());
  EXPECT_NE(reg.session_id(), stand_in);
  EXPECT_EQ(Notes(), first +
                         "released worker 1 before step 6\n"
                         "rejoined worker 1 from step 6\n"
                         "registered worker 1\n");
  // The stand-in's session for the rank has ended; the rank is live again.
  EXPECT_EQ(Report(1, stand_in, 6, 7, false).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Release(1, stand_in, 7).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::RegisterWorkerResponse second;
  EXPECT_EQ(Join(1, &second).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  ASSERT_TRUE(Heartbeat("worker", 1, reg.session_id(), &resp).ok());
  EXPECT_FALSE(resp.release_rank());

  FinishWithEveryStep(reg.session_id(), 6);
}

TEST_F(TakeoverTest, ReleasedRankWhoseNewWorkerNeverComesIsTakenOverAgain) {
  const uint64_t stand_in = TakeOverRank1();
  v1::RegisterWorkerResponse reg;
  EXPECT_EQ(Join(1, &reg).error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(Report(1, stand_in, 4, 5, false).ok());
  ASSERT_TRUE(Release(1, stand_in, 5).ok());
  // Nobody registers: after lease_s the released rank departs again and
  // worker 0 is asked to take it over (an ordinary takeover, from step 5).
  ASSERT_NO_FATAL_FAILURE(LeasesRunOutForAllButWorker0());
  v1::JobStatusResponse resp;
  ASSERT_TRUE(Heartbeat("worker", 0, sessions_[0], &resp).ok());
  ASSERT_EQ(resp.adopt_ranks_size(), 1);
  EXPECT_EQ(resp.adopt_ranks(0), 1u);
  v1::RegisterWorkerResponse again;
  ASSERT_TRUE(Adopt(1, 5, &again).ok());
  EXPECT_EQ(again.start_step(), 5u);
  ASSERT_TRUE(Heartbeat("worker", 1, again.session_id(), &resp).ok());
  EXPECT_FALSE(resp.release_rank());  // nobody waits for it any more
  EXPECT_EQ(Notes(),
            "registered worker 0\nregistered worker 1\n"
            "dead worker 1\ntaken over worker 1 from step 4 by worker 0\n"
            "released worker 1 before step 5\n"
            "dead worker 1\ntaken over worker 1 from step 5 by worker 0\n");
}

TEST_F(TakeoverTest, NewWorkerForAFinishedRankIsRefused) {
  const uint64_t stand_in = TakeOverRank1();
  ASSERT_TRUE(Report(1, stand_in, 4, kSteps + 1, true).ok());
  v1::RegisterWorkerResponse reg;
  const grpc::Status st = Join(1, &reg);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("has finished"), std::string::npos)
      << st.error_message();
}

}  // namespace
}  // namespace pstrain
