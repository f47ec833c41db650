#include "coordinator/coordinator.h"

#include <gtest/gtest.h>

#include "absl/time/clock.h"

namespace pstrain {
namespace {

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.config = DefaultJobConfig();
    options.config.workers = 1;
    options.config.servers = 1;
    options.config.steps = 2;
    FinalizeJobConfig(&options.config);
    options.progress = false;
    auto c = CoordinatorService::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    grpc::ServerContext ctx;
    v1::RegisterServerRequest rs;
    rs.set_address("127.0.0.1:1");
    rs.set_requested_shard(-1);
    v1::RegisterServerResponse rsr;
    ASSERT_TRUE(coord_->RegisterServer(&ctx, &rs, &rsr).ok());
    v1::ServerReadyRequest ready;
    v1::ServerReadyResponse ready_resp;
    ASSERT_TRUE(coord_->ServerReady(&ctx, &ready, &ready_resp).ok());
    v1::RegisterWorkerRequest rw;
    rw.set_requested_rank(-1);
    v1::RegisterWorkerResponse rwr;
    ASSERT_TRUE(coord_->RegisterWorker(&ctx, &rw, &rwr).ok());
    EXPECT_EQ(rwr.rank(), 0u);
  }

  grpc::Status Report(uint32_t worker, std::vector<uint64_t> steps, bool done,
                      uint32_t step_worker = 0) {
    grpc::ServerContext ctx;
    v1::ReportRequest req;
    req.set_worker(worker);
    req.set_done(done);
    for (uint64_t s : steps) {
      auto* m = req.add_steps();
      m->set_worker(step_worker);
      m->set_step(s);
      m->set_loss(1.0 / (s + 1));
      m->set_samples(s < 2 ? 32 : 0);
    }
    v1::ReportResponse resp;
    return coord_->Report(&ctx, &req, &resp);
  }

  std::unique_ptr<CoordinatorService> coord_;
};

// The final report may carry no step records (they went out in the previous
// batch): the job must still end. (This once hung every process.)
TEST_F(CoordinatorTest, FinalReportWithoutRecordsEndsTheJob) {
  ASSERT_TRUE(Report(0, {0, 1, 2}, false).ok());
  EXPECT_FALSE(coord_->WaitForEnd(absl::Now()));
  ASSERT_TRUE(Report(0, {}, true).ok());
  EXPECT_TRUE(coord_->WaitForEnd(absl::Now() + absl::Seconds(5)));
  JobOutcome o = coord_->Outcome();
  EXPECT_FALSE(o.failed);
  EXPECT_EQ(o.steps, 2u);
  EXPECT_DOUBLE_EQ(o.final_loss, 0.5);
}

TEST_F(CoordinatorTest, ReportsFromUnknownOrMismatchedWorkersAreRejected) {
  EXPECT_EQ(Report(5, {0}, false).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Report(0, {0}, false, /*step_worker=*/3).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(coord_->WaitForEnd(absl::Now()));
}

TEST_F(CoordinatorTest, RegistrationAfterTheJobIsRefused) {
  ASSERT_TRUE(Report(0, {0, 1, 2}, true).ok());
  ASSERT_TRUE(coord_->WaitForEnd(absl::Now() + absl::Seconds(5)));
  grpc::ServerContext ctx;
  v1::RegisterServerRequest rs;
  rs.set_address("127.0.0.1:2");
  rs.set_requested_shard(-1);
  v1::RegisterServerResponse rsr;
  grpc::Status s = coord_->RegisterServer(&ctx, &rs, &rsr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("already finished"), std::string::npos);
}

}  // namespace
}  // namespace pstrain
