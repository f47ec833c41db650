#include "coordinator/coordinator_service.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/client_text.h"
#include "common/run_record.h"

namespace pstrain {
namespace {

class CoordinatorTest : public ::testing::Test {
 protected:
  // A job of `workers` workers and one server, every member registered.
  void Start(int workers, int64_t steps = 2, bool fail_on_divergence = true,
             const std::string& metrics_csv = "") {
    CoordinatorOptions options;
    options.config = DefaultJobConfig();
    options.config.mutable_job()->set_workers(workers);
    options.config.mutable_job()->set_servers(1);
    options.config.mutable_training()->set_steps(steps);
    options.config.mutable_training()->set_fail_on_divergence(
        fail_on_divergence);
    options.config.mutable_training()->set_backup_workers(backup_workers_);
    FinalizeJobConfig(&options.config);
    options.progress = false;
    options.metrics_csv = metrics_csv;
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
    for (int w = 0; w < workers; ++w) {
      v1::RegisterWorkerRequest rw;
      rw.set_requested_rank(-1);
      v1::RegisterWorkerResponse rwr;
      ASSERT_TRUE(coord_->RegisterWorker(&ctx, &rw, &rwr).ok());
      EXPECT_EQ(rwr.rank(), static_cast<uint32_t>(w));
      EXPECT_NE(rwr.session_id(), 0u);
      sessions_.push_back(rwr.session_id());
    }
  }

  // The session id a report from `worker` carries: its own by default.
  uint64_t SessionOf(uint32_t worker) const {
    return worker < sessions_.size() ? sessions_[worker] : 0;
  }

  grpc::Status Report(uint32_t worker, std::vector<uint64_t> steps, bool done,
                      uint32_t step_worker = 0, double loss = -1,
                      const std::string& error = "",
                      std::optional<uint64_t> session_id = std::nullopt) {
    grpc::ServerContext ctx;
    v1::ReportRequest req;
    req.set_worker(worker);
    req.set_session_id(session_id.value_or(SessionOf(worker)));
    req.set_done(done);
    req.set_error(error);
    for (uint64_t s : steps) {
      auto* m = req.add_steps();
      m->set_worker(step_worker);
      m->set_step(s);
      m->set_loss(loss >= 0 || std::isnan(loss) ? loss : 1.0 / (s + 1));
      m->set_samples(s < 2 ? 32 : 0);
    }
    v1::ReportResponse resp;
    return coord_->Report(&ctx, &req, &resp);
  }

  // A heartbeat with the holder's own session, or `session_id`.
  grpc::Status Heartbeat(const std::string& process, int id, uint64_t step,
                         v1::JobStatusResponse* resp,
                         std::optional<uint64_t> session_id = std::nullopt) {
    grpc::ServerContext ctx;
    v1::JobStatusRequest req;
    req.set_process(process);
    req.set_id(id);
    req.set_step(step);
    req.set_session_id(session_id.value_or(
        process == "server" ? server_session_ : SessionOf(id)));
    return coord_->JobStatus(&ctx, &req, resp);
  }

  std::string notes_path_;  // supervision.txt when set before Start
  int backup_workers_ = 0;  // training.backup_workers when set before Start
  std::unique_ptr<CoordinatorService> coord_;
  uint64_t server_session_ = 0;     // shard 0's
  std::vector<uint64_t> sessions_;  // by rank
};

// A worker whose heartbeats stop is declared dead after network.lease_s
// (default 5 s) and fails the job naming it and its last step; the others,
// still beating, are not.
TEST_F(CoordinatorTest, SilentWorkerIsDeclaredDeadAfterTheLease) {
  Start(2);
  v1::JobStatusResponse resp;
  ASSERT_TRUE(Heartbeat("worker", 1, 7, &resp).ok());
  // Nobody is silent for 5 s yet.
  EXPECT_FALSE(coord_->CheckLeases(absl::Now() + absl::Seconds(4)));
  absl::SleepFor(absl::Milliseconds(50));
  // Shard 0 and worker 0 beat later than worker 1's last word.
  ASSERT_TRUE(Heartbeat("server", 0, 0, &resp).ok());
  ASSERT_TRUE(Heartbeat("worker", 0, 9, &resp).ok());
  EXPECT_FALSE(resp.finished());
  // 5 s after worker 1's beat but not after the others'.
  EXPECT_TRUE(coord_->CheckLeases(absl::Now() + absl::Seconds(5) -
                                  absl::Milliseconds(20)));
  EXPECT_TRUE(coord_->WaitForEnd(absl::Now()));
  const JobOutcome o = coord_->Outcome();
  ASSERT_TRUE(o.failed);
  ASSERT_TRUE(o.failure.has_value());
  EXPECT_EQ(o.failure->process, "worker");
  EXPECT_EQ(o.failure->rank, 1);
  EXPECT_NE(o.failure->message.find("last step 7"), std::string::npos)
      << o.failure->message;
  EXPECT_NE(o.failure->message.find("network.lease_s = 5"), std::string::npos);
  // Once the job is over nothing else dies, and heartbeats learn the end.
  EXPECT_FALSE(coord_->CheckLeases(absl::Now() + absl::Hours(1)));
  ASSERT_TRUE(Heartbeat("worker", 0, 9, &resp).ok());
  EXPECT_TRUE(resp.finished());
  EXPECT_TRUE(resp.failed());
}

// Issue 22: a coordinator that exits right after a failed job leaves a
// worker that had not heartbeaten since waiting out its lease (4-9 s) on a
// gone coordinator. It can wait until every live worker has learned the
// end; the worker the failure names is not waited for.
TEST_F(CoordinatorTest, FailedJobKnowsWhenLiveWorkersLearnedTheEnd) {
  Start(3);
  ASSERT_TRUE(Report(2, {}, true, 2, -1, "worker 2: out of memory").ok());
  ASSERT_TRUE(coord_->WaitForEnd(absl::Now()));
  EXPECT_FALSE(coord_->AwaitWorkersSawEnd(absl::Now()));
  v1::JobStatusResponse resp;
  ASSERT_TRUE(Heartbeat("worker", 0, 1, &resp).ok());
  EXPECT_TRUE(resp.failed());
  EXPECT_FALSE(coord_->AwaitWorkersSawEnd(absl::Now()));
  ASSERT_TRUE(Heartbeat("worker", 1, 1, &resp).ok());
  EXPECT_TRUE(coord_->AwaitWorkersSawEnd(absl::Now()));
}

// A finished worker's silence is no death.
TEST_F(CoordinatorTest, FinishedWorkerHoldsNoLease) {
  Start(2);
  ASSERT_TRUE(Report(0, {0, 1}, true, 0).ok());
  v1::JobStatusResponse resp;
  ASSERT_TRUE(Heartbeat("server", 0, 0, &resp).ok());
  ASSERT_TRUE(Heartbeat("worker", 1, 1, &resp).ok());
  EXPECT_FALSE(coord_->CheckLeases(absl::Now() + absl::Seconds(4)));
  // Its late hello is refused: it holds no lease any more.
  EXPECT_EQ(Heartbeat("worker", 0, 2, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// Heartbeats from processes this coordinator never admitted (it was
// restarted under them) are NOT_FOUND, so they leave; an anonymous status
// query is always answered.
TEST_F(CoordinatorTest, HeartbeatFromAStrangerIsNotFound) {
  Start(1);
  v1::JobStatusResponse resp;
  grpc::Status st = Heartbeat("worker", 5, 0, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("worker 5 holds no lease"),
            std::string::npos)
      << st.error_message();
  EXPECT_EQ(Heartbeat("server", 3, 0, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(Heartbeat("", 0, 0, &resp).ok());
  EXPECT_FALSE(resp.finished());
}

// The final report may carry no step records (they went out in the previous
// batch): the job must still end. (This once hung every process.)
TEST_F(CoordinatorTest, FinalReportWithoutRecordsEndsTheJob) {
  Start(1);
  ASSERT_TRUE(Report(0, {0, 1, 2}, false).ok());
  EXPECT_FALSE(coord_->WaitForEnd(absl::Now()));
  ASSERT_TRUE(Report(0, {}, true).ok());
  EXPECT_TRUE(coord_->WaitForEnd(absl::Now() + absl::Seconds(5)));
  JobOutcome o = coord_->Outcome();
  EXPECT_FALSE(o.failed);
  EXPECT_EQ(o.steps, 2u);
  EXPECT_DOUBLE_EQ(o.final_loss, 0.5);
}

// Each rank's end is noted once, when its final report without an error
// comes, with the weights' fingerprint it carries (mode allreduce's
// replicas); a final report with an error is no end.
TEST_F(CoordinatorTest, FinalReportsAreNotedOnceWithTheirFingerprint) {
  notes_path_ = std::string(std::getenv("TEST_TMPDIR")) + "/done_notes.txt";
  Start(3);
  for (uint32_t w = 0; w < 3; ++w) {
    ASSERT_TRUE(Report(w, {0, 1, 2}, false, w).ok());
  }
  grpc::ServerContext ctx;
  v1::ReportRequest req;
  req.set_worker(0);
  req.set_session_id(SessionOf(0));
  req.set_done(true);
  req.set_weights_fingerprint(0x00c0ffee12345678ULL);
  v1::ReportResponse resp;
  ASSERT_TRUE(coord_->Report(&ctx, &req, &resp).ok());
  ASSERT_TRUE(coord_->Report(&ctx, &req, &resp).ok());  // resent: once
  ASSERT_TRUE(Report(1, {}, true).ok());
  ASSERT_TRUE(Report(2, {}, true, 0, -1, "worker 2: broken").ok());
  std::ifstream in(notes_path_);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "registered worker 0\nregistered worker 1\nregistered worker 2\n"
            "done worker 0 weights 00c0ffee12345678\n"
            "done worker 1\n"
            "failed\n");
}

TEST_F(CoordinatorTest, ReportsFromUnknownOrMismatchedWorkersAreRejected) {
  Start(1);
  EXPECT_EQ(Report(5, {0}, false).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Report(0, {0}, false, /*step_worker=*/3).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(coord_->WaitForEnd(absl::Now()));
}

TEST_F(CoordinatorTest, RegistrationAfterTheJobIsRefused) {
  Start(1);
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

// Issue 11 #5: one worker's repeated report completed a two-worker step.
TEST_F(CoordinatorTest, RepeatedReportIsCountedOnce) {
  Start(2);
  ASSERT_TRUE(Report(0, {0, 1}, false, 0).ok());
  ASSERT_TRUE(Report(0, {0, 1}, false, 0).ok());
  EXPECT_EQ(coord_->Outcome().steps, 0u);
  ASSERT_TRUE(Report(1, {0}, false, 1).ok());
  JobOutcome o = coord_->Outcome();
  EXPECT_EQ(o.steps, 1u);
  EXPECT_EQ(o.samples, 64u);  // 32 from each worker, not 96
}

// Issue 11 #2: bogus steps were kept as records that never complete.
TEST_F(CoordinatorTest, StepsFarBeyondTheJobAreRejected) {
  Start(1);
  grpc::Status st = Report(0, {1000000}, false);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_NE(st.error_message().find("step 1000000"), std::string::npos);
  EXPECT_FALSE(coord_->WaitForEnd(absl::Now()));
}

// Issue 11 #3: a diverged job exited 0.
TEST_F(CoordinatorTest, DivergenceFailsTheJobNamingTheWorker) {
  Start(2);
  ASSERT_TRUE(Report(1, {0}, false, 1, std::nan("")).ok());
  EXPECT_TRUE(coord_->WaitForEnd(absl::Now() + absl::Seconds(5)));
  JobOutcome o = coord_->Outcome();
  EXPECT_TRUE(o.failed);
  EXPECT_TRUE(o.diverged);
  ASSERT_TRUE(o.failure.has_value());
  EXPECT_EQ(o.failure->process, "worker");
  EXPECT_EQ(o.failure->rank, 1);
  EXPECT_NE(o.message.find("diverged"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("fail_on_divergence"), std::string::npos);
}

TEST_F(CoordinatorTest, DivergenceOnlyMarkedWhenNotFailing) {
  Start(1, 2, /*fail_on_divergence=*/false);
  ASSERT_TRUE(Report(0, {0}, false, 0, std::nan("")).ok());
  EXPECT_FALSE(coord_->WaitForEnd(absl::Now()));
  JobOutcome o = coord_->Outcome();
  EXPECT_FALSE(o.failed);
  EXPECT_TRUE(o.diverged);
}

TEST_F(CoordinatorTest, FirstFailureIsKeptWithItsCause) {
  Start(2);
  ASSERT_TRUE(Report(1, {}, true, 1, -1,
                     "worker 1: UNAVAILABLE: shard 0 at 127.0.0.1:1 is down")
                  .ok());
  coord_->Fail({"coordinator", -1, -1, "coordinator stopped by signal"});
  ASSERT_TRUE(Report(0, {}, true, 0, -1, "worker 0: CANCELLED: stop").ok());
  JobOutcome o = coord_->Outcome();
  EXPECT_TRUE(o.failed);
  ASSERT_TRUE(o.failure.has_value());
  EXPECT_EQ(o.failure->process, "worker");
  EXPECT_EQ(o.failure->rank, 1);
  EXPECT_EQ(o.failure->message, "UNAVAILABLE: shard 0 at 127.0.0.1:1 is down");
  EXPECT_EQ(o.message, "worker 1: UNAVAILABLE: shard 0 at 127.0.0.1:1 is down");
}

TEST_F(CoordinatorTest, CompleteStepsAreWrittenToMetricsCsv) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/metrics.csv";
  Start(1, 2, true, path);
  ASSERT_TRUE(Report(0, {0, 1}, false).ok());
  absl::StatusOr<std::string> text = ReadFileText(path);
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<std::vector<MetricsRow>> rows = ParseMetricsCsv(*text, path);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[1].step, 1);
  EXPECT_DOUBLE_EQ(*(*rows)[1].loss, 0.5);
}

// Sync with backup workers b: a step is a row once N - b workers reported
// it (the servers applied it then); the straggler's late records change
// nothing.
TEST_F(CoordinatorTest, WithABackupWorkerRowsFollowTheModel) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/metrics_backup.csv";
  backup_workers_ = 1;
  Start(3, 2, true, path);
  ASSERT_TRUE(Report(0, {0, 1}, false, 0, 1.0).ok());
  ASSERT_TRUE(Report(1, {0, 1}, false, 1, 3.0).ok());
  ASSERT_TRUE(Report(2, {0}, false, 2, 100.0).ok());  // the straggler, late
  absl::StatusOr<std::string> text = ReadFileText(path);
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<std::vector<MetricsRow>> rows = ParseMetricsCsv(*text, path);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_DOUBLE_EQ(*(*rows)[0].loss, 2.0);
  EXPECT_DOUBLE_EQ(*(*rows)[1].loss, 2.0);
}

// Issue 11, strangers: a report must carry its rank's session id.
TEST_F(CoordinatorTest, ReportsWithoutTheRanksSessionIdChangeNothing) {
  Start(2);
  for (uint64_t wrong : {uint64_t{0}, SessionOf(1), SessionOf(0) ^ 1}) {
    grpc::Status st =
        Report(0, {0, 1, 2}, true, 0, -1, "worker 0: made up", wrong);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << wrong;
    EXPECT_NE(st.error_message().find("worker 0"), std::string::npos)
        << st.error_message();
    EXPECT_EQ(st.error_message().find(absl::StrCat(SessionOf(0))),
              std::string::npos)
        << st.error_message();
  }
  // Neither its records, nor its error, nor its "done" were taken.
  ASSERT_TRUE(Report(1, {0, 1, 2}, true, 1).ok());
  JobOutcome o = coord_->Outcome();
  EXPECT_EQ(o.steps, 0u);
  EXPECT_FALSE(o.failed);
  EXPECT_FALSE(coord_->WaitForEnd(absl::Now()));
  ASSERT_TRUE(Report(0, {0, 1, 2}, true, 0).ok());
  EXPECT_TRUE(coord_->WaitForEnd(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(coord_->Outcome().steps, 2u);
}

TEST_F(CoordinatorTest, WorkerSessionsOnlyForTheShardsCurrentSession) {
  Start(2);
  grpc::ServerContext ctx;
  v1::GetWorkerSessionsRequest req;
  v1::GetWorkerSessionsResponse resp;
  req.set_shard(0);
  req.set_session_id(server_session_ ^ 1);
  EXPECT_EQ(coord_->GetWorkerSessions(&ctx, &req, &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(resp.session_ids_size(), 0);
  req.set_session_id(server_session_);
  ASSERT_TRUE(coord_->GetWorkerSessions(&ctx, &req, &resp).ok());
  EXPECT_EQ(std::vector<uint64_t>(resp.session_ids().begin(),
                                  resp.session_ids().end()),
            sessions_);
  // The shard's process is replaced (it registers again from its
  // address): the old id is refused, for ServerReady too.
  v1::RegisterServerRequest rs;
  rs.set_address("127.0.0.1:1");
  rs.set_requested_shard(0);
  v1::RegisterServerResponse rsr;
  ASSERT_TRUE(coord_->RegisterServer(&ctx, &rs, &rsr).ok());
  EXPECT_NE(rsr.session_id(), server_session_);
  resp.Clear();
  EXPECT_EQ(coord_->GetWorkerSessions(&ctx, &req, &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ServerReadyRequest ready;
  ready.set_session_id(server_session_);
  v1::ServerReadyResponse ready_resp;
  EXPECT_EQ(coord_->ServerReady(&ctx, &ready, &ready_resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  req.set_session_id(rsr.session_id());
  EXPECT_TRUE(coord_->GetWorkerSessions(&ctx, &req, &resp).ok());
}

TEST(CoordinatorRingTest, GetPeersNeedsTheSessionIdAndGivesTheLeftOne) {
  CoordinatorOptions options;
  options.config = DefaultJobConfig();
  options.config.mutable_training()->set_mode(v1::MODE_ALLREDUCE);
  options.config.mutable_job()->set_workers(3);
  FinalizeJobConfig(&options.config);
  options.progress = false;
  options.wait_cap = absl::Seconds(5);
  auto c = CoordinatorService::Create(options);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<uint64_t> ids;
  for (int r = 0; r < 3; ++r) {
    grpc::ServerContext ctx;
    v1::RegisterWorkerRequest req;
    req.set_requested_rank(r);
    req.set_peer_address(absl::StrCat("127.0.0.1:", 10 + r));
    v1::RegisterWorkerResponse resp;
    ASSERT_TRUE((*c)->RegisterWorker(&ctx, &req, &resp).ok());
    ids.push_back(resp.session_id());
  }
  grpc::ServerContext ctx;
  v1::GetPeersRequest req;
  v1::GetPeersResponse resp;
  req.set_rank(0);
  req.set_session_id(ids[2]);  // another rank's
  EXPECT_EQ((*c)->GetPeers(&ctx, &req, &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(resp.peer_addresses_size(), 0);
  req.set_session_id(ids[0]);
  ASSERT_TRUE((*c)->GetPeers(&ctx, &req, &resp).ok());
  EXPECT_EQ(resp.left_session_id(), ids[2]);
  req.set_rank(1);
  req.set_session_id(ids[1]);
  ASSERT_TRUE((*c)->GetPeers(&ctx, &req, &resp).ok());
  EXPECT_EQ(resp.left_session_id(), ids[0]);
}

// Issue 23, finding 5: heartbeats renew leases only with the holder's
// session. A stranger's JobStatus with session 0 or a made-up id for a
// silent worker or server is PERMISSION_DENIED and does not keep it alive.
TEST_F(CoordinatorTest, HeartbeatsWithoutTheSessionRenewNoLease) {
  Start(2);
  v1::JobStatusResponse resp;
  ASSERT_TRUE(Heartbeat("worker", 0, 1, &resp).ok());
  ASSERT_TRUE(Heartbeat("worker", 1, 1, &resp).ok());
  ASSERT_TRUE(Heartbeat("server", 0, 0, &resp).ok());
  absl::SleepFor(absl::Milliseconds(50));
  // The stranger beats for worker 1 and the server; worker 0 beats itself.
  for (uint64_t forged : {uint64_t{0}, uint64_t{0x123456789}}) {
    EXPECT_EQ(Heartbeat("worker", 1, 5, &resp, forged).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(Heartbeat("server", 0, 0, &resp, forged).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  ASSERT_TRUE(Heartbeat("worker", 0, 2, &resp).ok());
  // 5 s after the holders' own beats: worker 1 (or the server) is dead.
  EXPECT_TRUE(coord_->CheckLeases(absl::Now() + absl::Seconds(5) -
                                  absl::Milliseconds(20)));
  const JobOutcome o = coord_->Outcome();
  ASSERT_TRUE(o.failed);
  ASSERT_TRUE(o.failure.has_value());
  EXPECT_TRUE(o.failure->process == "server" ||
              (o.failure->process == "worker" && o.failure->rank == 1))
      << o.message;
}

// Issue 23, findings 4 and 6: what a client sends is bounded when it is
// read, and errors quote at most a short prefix of it.
TEST_F(CoordinatorTest, ClientStringsAreBoundedAndNotEchoedWhole) {
  Start(1);
  grpc::ServerContext ctx;
  // A 7 MB address is refused, naming its size, in a short message.
  v1::RegisterServerRequest big;
  big.set_address(std::string(7 << 20, 'a'));
  big.set_requested_shard(-1);
  v1::RegisterServerResponse resp;
  grpc::Status s = coord_->RegisterServer(&ctx, &big, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("7340032 bytes"), std::string::npos)
      << s.error_message().substr(0, 300);
  EXPECT_LT(s.error_message().size(), 400u);
  // Shard 0 is held by "127.0.0.1:1": a longest-allowed address asking for
  // it gets ALREADY_EXISTS, quoting the holder in a bounded message.
  v1::RegisterServerRequest other;
  other.set_address(std::string(kMaxAddressBytes, 'b'));
  other.set_requested_shard(0);
  s = coord_->RegisterServer(&ctx, &other, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS)
      << s.error_message();
  EXPECT_LT(s.error_message().size(), 400u);
  // A process kind longer than any name is refused.
  v1::JobStatusResponse status;
  s = Heartbeat(std::string(1000, 'p'), 0, 0, &status);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // A worker's error text is kept up to kMaxMessageBytes, then cut.
  s = Report(0, {0}, false, 0, -1, std::string(100000, 'e'));
  ASSERT_TRUE(s.ok()) << s.error_message();
  const JobOutcome o = coord_->Outcome();
  ASSERT_TRUE(o.failed);
  EXPECT_LT(o.message.size(), kMaxMessageBytes + 200);
  EXPECT_NE(o.message.find("(100000 bytes)"), std::string::npos);
}

}  // namespace
}  // namespace pstrain
