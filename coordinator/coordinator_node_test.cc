#include "coordinator/coordinator_node.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/run_record.h"
#include "coordinator/coordinator_service.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {
namespace {

// A whole coordinator on an ephemeral loopback port, run as a thread, with
// one all-reduce worker (no servers) played by the test over gRPC.
class CoordinatorNodeTest : public ::testing::Test {
 protected:
  void StartNode(const std::string& name, bool fail_on_divergence,
                 const std::string& termination_log = "",
                 absl::Duration signal_stop_grace = absl::Seconds(1)) {
    out_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
    CoordinatorNodeOptions o;
    o.config = DefaultJobConfig();
    o.config.mutable_training()->set_mode(v1::MODE_ALLREDUCE);
    o.config.mutable_job()->set_workers(1);
    o.config.mutable_training()->set_steps(2);
    o.config.mutable_training()->set_fail_on_divergence(fail_on_divergence);
    FinalizeJobConfig(&o.config);
    o.out = out_;
    o.progress = false;
    o.termination_log = termination_log;
    o.signal_stop_grace = signal_stop_grace;
    auto node = CoordinatorNode::Create(o);
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = std::move(*node);
    ASSERT_GT(node_->port(), 0);
    runner_ = std::thread(
        [this] { result_ = node_->Run([this] { return stop_.load(); }); });
    stub_ = v1::Coordinator::NewStub(
        MakeChannel(absl::StrCat("127.0.0.1:", node_->port())));
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    v1::RegisterWorkerRequest req;
    req.set_requested_rank(0);
    req.set_peer_address("127.0.0.1:9");
    v1::RegisterWorkerResponse resp;
    ASSERT_TRUE(stub_->RegisterWorker(&ctx, req, &resp).ok());
    session_id_ = resp.session_id();
  }

  // Worker 0's last report on a signal (ps_worker's FlushStopped).
  grpc::Status ReportStopped() {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    v1::ReportRequest req;
    req.set_worker(0);
    req.set_session_id(session_id_);
    req.set_done(true);
    req.set_error("worker 0: stopped by signal");
    req.set_stopped(true);
    v1::ReportResponse resp;
    return stub_->Report(&ctx, req, &resp);
  }

  grpc::Status Report(uint64_t step, double loss, bool done) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    v1::ReportRequest req;
    req.set_worker(0);
    req.set_session_id(session_id_);
    req.set_done(done);
    auto* m = req.add_steps();
    m->set_step(step);
    m->set_loss(loss);
    m->set_samples(8);
    v1::ReportResponse resp;
    return stub_->Report(&ctx, req, &resp);
  }

  void Join() {
    if (runner_.joinable()) runner_.join();
  }

  // After a Ctrl-C: the job failed, and its record names the coordinator's
  // stop (`reported`: the worker's stop report's answer).
  void ExpectTheCoordinatorsStop(const grpc::Status& reported) {
    Join();
    EXPECT_EQ(result_.code(), absl::StatusCode::kAborted);
    absl::StatusOr<std::string> text = ReadFileText(out_ + "/summary.json");
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*SummaryValue(*text, "failure.process", "s"), "coordinator")
        << *text << " (the worker's report: " << reported.error_message()
        << ")";
    EXPECT_EQ(*SummaryValue(*text, "failure.message", "s"),
              std::string(kCoordinatorStopped));
  }
  void TearDown() override {
    stop_ = true;
    Join();
  }

  std::string out_;
  std::unique_ptr<CoordinatorNode> node_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  uint64_t session_id_ = 0;  // worker 0's, from its registration
  std::atomic<bool> stop_{false};
  std::thread runner_;
  absl::Status result_;
};

TEST_F(CoordinatorNodeTest, FinishedJobWritesTheRunRecord) {
  StartNode("ok", true);
  ASSERT_TRUE(Report(0, 2.0, false).ok());
  ASSERT_TRUE(Report(1, 1.0, true).ok());
  Join();
  EXPECT_TRUE(result_.ok()) << result_;
  absl::StatusOr<std::string> text = ReadFileText(out_ + "/summary.json");
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<RunSummary> s = ParseSummaryJson(*text, "summary.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->mode, "allreduce");
  EXPECT_EQ(s->steps, 2);
  EXPECT_DOUBLE_EQ(s->final_loss, 1.0);
  EXPECT_FALSE(s->failed);
  EXPECT_FALSE(s->failure.has_value());
  absl::StatusOr<std::string> csv = ReadFileText(out_ + "/metrics.csv");
  ASSERT_TRUE(csv.ok());
  EXPECT_EQ(ParseMetricsCsv(*csv, "metrics.csv")->size(), 2u);
}

// Issue 27: a Kubernetes Job's coordinator leaves its verdict in the
// container's termination message: the summary, one line of JSON.
TEST_F(CoordinatorNodeTest, TerminationLogHoldsTheSummary) {
  const std::string log =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/termination-log-ok");
  StartNode("term-ok", true, log);
  ASSERT_TRUE(Report(0, 2.0, false).ok());
  ASSERT_TRUE(Report(1, 1.0, true).ok());
  Join();
  EXPECT_TRUE(result_.ok()) << result_;
  absl::StatusOr<std::string> text = ReadFileText(log);
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_FALSE(text->empty());
  EXPECT_EQ(text->find('\n'), text->size() - 1) << *text;  // one line
  EXPECT_LE(text->size(), kMaxTerminationMessage);
  absl::StatusOr<RunSummary> s = ParseSummaryJson(*text, "termination-log");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->steps, 2);
  EXPECT_FALSE(s->failed);
}

TEST_F(CoordinatorNodeTest, TerminationLogNamesTheFailure) {
  const std::string log =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/termination-log-failed");
  StartNode("term-failed", true, log);
  ASSERT_TRUE(Report(0, 2.0, false).ok());
  ASSERT_TRUE(ReportStopped().ok());
  Join();
  EXPECT_EQ(result_.code(), absl::StatusCode::kAborted);
  absl::StatusOr<std::string> text = ReadFileText(log);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*SummaryValue(*text, "failed", "termination-log"), "true");
  EXPECT_EQ(*SummaryValue(*text, "failure.process", "termination-log"),
            "worker");
}

// A summary too long for the kubelet (4096 bytes) is cut to fit and stays
// valid JSON.
TEST(TerminationMessageTest, LongSummaryIsShortenedToFit) {
  RunSummary s;
  s.job = "long";
  s.failed = true;
  s.message = std::string(10000, 'm');
  s.failure = RunFailure{"worker", 3, -1, std::string(10000, 'f')};
  s.staleness_histogram.assign(2000, 12345);
  const std::string text = TerminationMessage(s);
  EXPECT_LE(text.size(), kMaxTerminationMessage);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
  EXPECT_EQ(j["failed"], true);
  EXPECT_EQ(j["failure"]["rank"], 3);
  EXPECT_EQ(j["message"].get<std::string>().substr(0, 3), "mmm");
}

TEST(TerminationMessageTest, UnwritablePathIsNamed) {
  absl::Status st = WriteTerminationMessage("/nonexistent/dir/log", "x");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--termination_log"), std::string::npos) << st;
  EXPECT_NE(st.message().find("/nonexistent/dir/log"), std::string::npos);
}

// Issue 11 #3: a NaN loss printed `nan` into summary.json (invalid JSON) and
// the job exited 0.
TEST_F(CoordinatorNodeTest, DivergedJobFailsWithValidJson) {
  StartNode("nan", true);
  ASSERT_TRUE(Report(0, std::nan(""), false).ok());
  Join();
  EXPECT_EQ(result_.code(), absl::StatusCode::kAborted) << result_;
  absl::StatusOr<std::string> text = ReadFileText(out_ + "/summary.json");
  ASSERT_TRUE(text.ok()) << text.status();
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(*text)) << *text;
  EXPECT_EQ(j["diverged"], true);
  EXPECT_EQ(j["failed"], true);
  EXPECT_EQ(j["failure"]["process"], "worker");
  EXPECT_EQ(j["failure"]["rank"], 0);
  // Issue 22: no final evaluation ran, so both of its figures are null (the
  // evaluation loss used to say 0 beside a null accuracy).
  EXPECT_TRUE(j["final_eval_loss"].is_null()) << *text;
  EXPECT_TRUE(j["final_accuracy"].is_null()) << *text;
}

TEST_F(CoordinatorNodeTest, DivergenceMayBeOnlyRecorded) {
  StartNode("nan-ok", false);
  ASSERT_TRUE(Report(0, 1.0, false).ok());
  ASSERT_TRUE(Report(1, std::nan(""), true).ok());
  Join();
  EXPECT_TRUE(result_.ok()) << result_;
  absl::StatusOr<std::string> text = ReadFileText(out_ + "/summary.json");
  ASSERT_TRUE(text.ok());
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(*text)) << *text;
  EXPECT_TRUE(j["final_loss"].is_null());
  EXPECT_EQ(j["diverged"], true);
  EXPECT_EQ(j["failed"], false);
}

TEST_F(CoordinatorNodeTest, StopEndsTheJobAsTheCoordinatorsFailure) {
  StartNode("stop", true);
  stop_ = true;
  Join();
  EXPECT_EQ(result_.code(), absl::StatusCode::kAborted);
  absl::StatusOr<std::string> text = ReadFileText(out_ + "/summary.json");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*SummaryValue(*text, "failure.process", "s"), "coordinator");
}

// Issue 22: Ctrl-C reaches every process at once; a worker's "stopped by
// signal" report arriving before the coordinator's loop sees its own stop
// was recorded as the cause ("worker 0: stopped by signal").
TEST_F(CoordinatorNodeTest, WorkerStoppedWithTheCoordinatorIsNotTheCause) {
  StartNode("ctrl-c", true);
  ASSERT_TRUE(Report(0, 2.0, false).ok());
  stop_ = true;  // the coordinator's signal, then at once the worker's report
  const grpc::Status reported = ReportStopped();
  ExpectTheCoordinatorsStop(reported);
}

// The same Ctrl-C, with the worker's report handled before the
// coordinator's signal handler runs (a loaded machine; CI saw "worker:
// stopped by signal" recorded): the job ends on the report, and the
// coordinator waits for its own stop before it writes the record
// (signal_stop_grace, long here so a slow machine cannot outlast it; the
// stop comes only after the report was answered).
TEST_F(CoordinatorNodeTest,
       WorkerStoppedJustBeforeTheCoordinatorIsNotTheCause) {
  StartNode("ctrl-c-late", true, "", absl::Seconds(60));
  ASSERT_TRUE(Report(0, 2.0, false).ok());
  const grpc::Status reported = ReportStopped();  // read: the job ended
  stop_ = true;                                   // then the signal shows
  ExpectTheCoordinatorsStop(reported);
}

// ... while a worker stopped alone (SIGTERM to it only) is the cause.
TEST_F(CoordinatorNodeTest, WorkerStoppedAloneIsTheCause) {
  StartNode("worker-stop", true);
  ASSERT_TRUE(Report(0, 2.0, false).ok());
  ASSERT_TRUE(ReportStopped().ok());
  Join();
  EXPECT_EQ(result_.code(), absl::StatusCode::kAborted);
  absl::StatusOr<std::string> text = ReadFileText(out_ + "/summary.json");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*SummaryValue(*text, "failure.process", "s"), "worker") << *text;
  EXPECT_EQ(*SummaryValue(*text, "failure.message", "s"), "stopped by signal");
}

// Issue 23, finding 4: the coordinator's requests are small, so a large one
// is refused before its service reads it (8 concurrent 7 MiB reports with a
// made-up session took the coordinator from 21 to 902 MB). Junk of 7 MiB and
// of just over the bound are RESOURCE_EXHAUSTED; the job goes on.
TEST_F(CoordinatorNodeTest, LargeRequestsAreRefusedBeforeTheyAreRead) {
  StartNode("large", true);
  for (size_t bytes :
       {size_t{7} << 20, static_cast<size_t>(kMaxCoordinatorRequestBytes)}) {
    SCOPED_TRACE(bytes);
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    v1::ReportRequest req;
    req.set_worker(0);
    req.set_session_id(12345);  // made up
    req.set_error(std::string(bytes, 'j'));
    v1::ReportResponse resp;
    const grpc::Status s = stub_->Report(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_message();
  }
  // A normal report still lands, and the job finishes.
  ASSERT_TRUE(Report(0, 0.5, false).ok());
  ASSERT_TRUE(Report(1, 0.4, true).ok());
  Join();
  EXPECT_TRUE(result_.ok()) << result_;
}

TEST(CoordinatorNodeCreateTest, BadOutDirectoryIsNamed) {
  CoordinatorNodeOptions o;
  o.config = DefaultJobConfig();
  FinalizeJobConfig(&o.config);
  o.out = "/proc/nope/out";
  auto node = CoordinatorNode::Create(o);
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(node.status().message().find("/proc/nope/out"), std::string::npos);
}

}  // namespace
}  // namespace pstrain
