// training.on_failure: restart in the coordinator service: losses start
// generations, replacements fill slots, stale reports are refused, the
// rollback ends the recovery, and the bounds (restart_timeout_s,
// max_restarts) fail the job naming what was missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/run_record.h"
#include "coordinator/coordinator_service.h"

namespace pstrain {
namespace {

class RestartTest : public ::testing::Test {
 protected:
  // Two workers, two shards, every member registered and ready.
  void Start(int64_t max_restarts = 3, double restart_timeout_s = 60) {
    CoordinatorOptions options;
    options.config = DefaultJobConfig();
    options.config.mutable_job()->set_workers(2);
    options.config.mutable_job()->set_servers(2);
    options.config.mutable_training()->set_steps(10);
    options.config.mutable_training()->set_on_failure(
        v1::TrainingConfig::RESTART);
    options.config.mutable_training()->set_max_restarts(max_restarts);
    options.config.mutable_training()->set_restart_timeout_s(restart_timeout_s);
    FinalizeJobConfig(&options.config);
    options.progress = false;
    options.wait_cap = absl::Milliseconds(200);
    options.supervision_file = notes_path_;
    auto c = CoordinatorService::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    for (int s = 0; s < 2; ++s) ASSERT_TRUE(AddServer(s, 1 + s).ok());
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(AddWorker(w).ok());
  }

  grpc::Status AddServer(int shard, int port) {
    grpc::ServerContext ctx;
    v1::RegisterServerRequest rs;
    rs.set_address(absl::StrCat("127.0.0.1:", port));
    rs.set_requested_shard(shard);
    v1::RegisterServerResponse rsr;
    grpc::Status st = coord_->RegisterServer(&ctx, &rs, &rsr);
    if (!st.ok()) return st;
    v1::ServerReadyRequest ready;
    ready.set_shard(rsr.shard());
    ready.set_session_id(rsr.session_id());
    v1::ServerReadyResponse ready_resp;
    return coord_->ServerReady(&ctx, &ready, &ready_resp);
  }

  grpc::Status AddWorker(int rank) {
    grpc::ServerContext ctx;
    v1::RegisterWorkerRequest rw;
    rw.set_requested_rank(rank);
    v1::RegisterWorkerResponse rwr;
    grpc::Status st = coord_->RegisterWorker(&ctx, &rw, &rwr);
    if (st.ok()) {
      sessions_.resize(2);
      sessions_[rank] = rwr.session_id();
      generation_at_registration_ = rwr.job().generation();
    }
    return st;
  }

  // `resumed_at`: the report says the worker resumed in-process there.
  grpc::Status Report(uint32_t worker, uint64_t step, uint64_t generation,
                      std::optional<uint64_t> resumed_at = std::nullopt) {
    grpc::ServerContext ctx;
    v1::ReportRequest req;
    req.set_worker(worker);
    req.set_session_id(sessions_[worker]);
    req.set_generation(generation);
    if (resumed_at.has_value()) req.set_resumed_at_step(*resumed_at);
    auto* m = req.add_steps();
    m->set_worker(worker);
    m->set_step(step);
    m->set_loss(1.0);
    m->set_samples(32);
    v1::ReportResponse resp;
    return coord_->Report(&ctx, &req, &resp);
  }

  v1::JobStatusResponse Status() {
    grpc::ServerContext ctx;
    v1::JobStatusRequest req;
    v1::JobStatusResponse resp;
    EXPECT_TRUE(coord_->JobStatus(&ctx, &req, &resp).ok());
    return resp;
  }

  std::string Notes() const { return ReadFileText(notes_path_).value_or(""); }

  std::string notes_path_;  // supervision.txt when set before Start
  std::unique_ptr<CoordinatorService> coord_;
  std::vector<uint64_t> sessions_;
  uint64_t generation_at_registration_ = 0;
};

// A survivor's first report of a generation says where it resumed
// in-process: noted when it is the generation's start step; refused
// (INVALID_ARGUMENT, nothing noted or counted) otherwise and in
// generation 0.
TEST_F(RestartTest, AnInProcessResumeIsNotedAtTheGenerationsStartOnly) {
  notes_path_ = std::string(std::getenv("TEST_TMPDIR")) + "/resume_notes.txt";
  Start();
  ASSERT_TRUE(Report(0, 0, 0).ok());
  grpc::Status st = Report(0, 1, 0, /*resumed_at=*/0);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("generation 0 has no rollback"),
            std::string::npos)
      << st.error_message();
  ASSERT_TRUE(AddWorker(1).ok());  // a replacement: generation 1
  ASSERT_TRUE(coord_->FinishRollback(1, "/ckpt/step-5", 5));
  const std::string before = Notes();
  st = Report(0, 5, 1, /*resumed_at=*/4);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("not the start step of generation 1 (5)"),
            std::string::npos)
      << st.error_message();
  EXPECT_EQ(Notes(), before);
  EXPECT_TRUE(Report(0, 5, 1, /*resumed_at=*/5).ok());
  EXPECT_EQ(Notes(), before + "resumed worker 0 in generation 1 at step 5\n");
  EXPECT_TRUE(Report(1, 5, 1).ok());
  EXPECT_FALSE(coord_->Outcome().failed);
}

TEST_F(RestartTest, AReplacementWorkerStartsAGenerationThatTheRollbackEnds) {
  Start();
  ASSERT_TRUE(Report(0, 0, 0).ok());
  EXPECT_FALSE(coord_->RollbackDue().has_value());
  // Worker 1's replacement registers while worker 1 looks alive.
  ASSERT_TRUE(AddWorker(1).ok());
  EXPECT_EQ(generation_at_registration_, 1u);
  v1::JobStatusResponse status = Status();
  EXPECT_EQ(status.generation(), 1u);
  EXPECT_TRUE(status.recovering());
  EXPECT_FALSE(status.finished());
  // A stale report (generation 0) is refused and counts nothing.
  const grpc::Status stale = Report(0, 1, 0);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_NE(stale.error_message().find("generation 0"), std::string::npos)
      << stale.error_message();
  // Survivors wait for the rollback (bounded by wait_cap here).
  {
    grpc::ServerContext ctx;
    v1::GetJobRequest req;
    req.set_wait_for_generation(1);
    v1::JobSpec job;
    EXPECT_EQ(coord_->GetJob(&ctx, &req, &job).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // Every replacement is in: the node's rollback, then the workers resume.
  const auto order = coord_->RollbackDue();
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(order->generation, 1u);
  EXPECT_EQ(order->addresses.size(), 2u);
  EXPECT_FALSE(coord_->FinishRollback(0, "", 0));  // not this generation
  ASSERT_TRUE(coord_->FinishRollback(1, "/ckpt/step-5", 5));
  status = Status();
  EXPECT_FALSE(status.recovering());
  EXPECT_EQ(status.generation_step(), 5u);
  grpc::ServerContext ctx;
  v1::GetJobRequest req;
  req.set_wait_for_generation(1);
  v1::JobSpec job;
  ASSERT_TRUE(coord_->GetJob(&ctx, &req, &job).ok());
  EXPECT_EQ(job.generation(), 1u);
  EXPECT_EQ(job.start_step(), 5u);
  EXPECT_EQ(job.resume_from(), "/ckpt/step-5");
  EXPECT_TRUE(Report(0, 5, 1).ok());
  EXPECT_TRUE(Report(1, 5, 1).ok());
  EXPECT_FALSE(coord_->Outcome().failed);
}

TEST_F(RestartTest, AReplacementServerFreesItsShardAndMustBeReady) {
  Start();
  // Shard 1 restarted on another port.
  grpc::ServerContext ctx;
  v1::RegisterServerRequest rs;
  rs.set_address("127.0.0.1:77");
  rs.set_requested_shard(1);
  v1::RegisterServerResponse rsr;
  ASSERT_TRUE(coord_->RegisterServer(&ctx, &rs, &rsr).ok());
  EXPECT_EQ(Status().generation(), 1u);
  EXPECT_FALSE(coord_->RollbackDue().has_value());  // not ready yet
  v1::ServerReadyRequest ready;
  ready.set_shard(1);
  ready.set_session_id(rsr.session_id());
  v1::ServerReadyResponse ready_resp;
  ASSERT_TRUE(coord_->ServerReady(&ctx, &ready, &ready_resp).ok());
  const auto order = coord_->RollbackDue();
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(order->addresses[1], "127.0.0.1:77");
}

TEST_F(RestartTest, ADeadProcessIsAwaitedUntilTheRestartTimeout) {
  Start(/*max_restarts=*/3, /*restart_timeout_s=*/10);
  // Nobody heartbeats: the first expired lease (a server) is lost, not
  // fatal.
  const absl::Time t = absl::Now() + absl::Seconds(6);
  EXPECT_FALSE(coord_->CheckLeases(t));
  EXPECT_EQ(Status().generation(), 1u);
  EXPECT_FALSE(coord_->Outcome().failed);
  // The replacement never comes.
  EXPECT_TRUE(coord_->CheckLeases(absl::Now() + absl::Seconds(11)));
  const JobOutcome o = coord_->Outcome();
  ASSERT_TRUE(o.failed);
  EXPECT_NE(o.message.find("training.restart_timeout_s"), std::string::npos)
      << o.message;
  ASSERT_TRUE(o.failure.has_value());
  EXPECT_EQ(o.failure->process, "server");  // the first expired lease
  EXPECT_EQ(o.failure->shard, 0);
}

TEST_F(RestartTest, NoRestartLeftFailsTheJobNamingTheProcess) {
  Start(/*max_restarts=*/0);
  // The registration is refused: the job is over.
  EXPECT_EQ(AddWorker(1).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  const JobOutcome o = coord_->Outcome();
  ASSERT_TRUE(o.failed);
  ASSERT_TRUE(o.failure.has_value());
  EXPECT_EQ(o.failure->process, "worker");
  EXPECT_EQ(o.failure->rank, 1);
  EXPECT_NE(o.message.find("training.max_restarts = 0"), std::string::npos)
      << o.message;
}

}  // namespace
}  // namespace pstrain
