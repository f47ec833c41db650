#include "common/coordinator_lease.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {
namespace {

namespace v1 = pstrain::v1;

// A coordinator that answers JobStatus as told and records the requests.
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  grpc::Status JobStatus(grpc::ServerContext*, const v1::JobStatusRequest* req,
                         v1::JobStatusResponse* resp) override {
    absl::MutexLock lock(&mu_);
    ++beats_;
    last_ = *req;
    if (!req->stopping().empty()) stopping_ = req->stopping();
    if (beats_ >= answer_after_) *resp = answer_;
    return status_;
  }
  void Answer(v1::JobStatusResponse answer, int after_beats) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
    answer_after_ = after_beats;
  }
  void Fail(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    status_ = std::move(status);
  }
  int beats() {
    absl::MutexLock lock(&mu_);
    return beats_;
  }
  v1::JobStatusRequest last() {
    absl::MutexLock lock(&mu_);
    return last_;
  }
  std::string stopping() {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }

 private:
  absl::Mutex mu_;
  int beats_ ABSL_GUARDED_BY(mu_) = 0;
  int answer_after_ ABSL_GUARDED_BY(mu_) = 0;
  v1::JobStatusResponse answer_ ABSL_GUARDED_BY(mu_);
  v1::JobStatusRequest last_ ABSL_GUARDED_BY(mu_);
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  std::string stopping_ ABSL_GUARDED_BY(mu_);
};

class CoordinatorLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = StartGrpcServer("127.0.0.1", 0,
                                   grpc::InsecureServerCredentials(), {&fake_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    address_ = absl::StrCat("127.0.0.1:", started->port);
    stub_ = v1::Coordinator::NewStub(MakeChannel(address_));
    options_.process = "server";
    options_.id = 3;
    options_.coordinator = address_;
    options_.lease = absl::Milliseconds(800);  // a beat every 200 ms
    options_.rpc_timeout = absl::Seconds(5);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  LeaseOutcome Run(std::function<bool()> stop,
                   std::function<bool(const v1::JobStatusResponse&)> on) {
    return RunCoordinatorLease(
        stub_.get(), options_, &done_, stop,
        [](v1::JobStatusRequest* req) {
          req->set_session_id(0x5e55);
          req->set_step(17);
        },
        on);
  }

  FakeCoordinator fake_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  LeaseOptions options_;
  absl::Notification done_;
};

TEST_F(CoordinatorLeaseTest, BeatsUntilTheAnswerSaysTheJobIsOver) {
  v1::JobStatusResponse over;
  over.set_finished(true);
  fake_.Answer(over, 3);
  int answers = 0;
  const LeaseOutcome o = Run([] { return false; },
                             [&](const v1::JobStatusResponse& s) {
                               ++answers;
                               return !s.finished();
                             });
  EXPECT_EQ(o.end, LeaseEnd::kDone);
  EXPECT_EQ(answers, 3);
  EXPECT_EQ(fake_.beats(), 3);
  const v1::JobStatusRequest last = fake_.last();
  EXPECT_EQ(last.process(), "server");
  EXPECT_EQ(last.id(), 3);
  EXPECT_EQ(last.session_id(), 0x5e55u);
  EXPECT_EQ(last.step(), 17u);
  EXPECT_TRUE(last.stopping().empty());
}

TEST_F(CoordinatorLeaseTest, DoneEndsIt) {
  std::thread notifier([&] {
    while (fake_.beats() < 2) absl::SleepFor(absl::Milliseconds(10));
    done_.Notify();
  });
  const LeaseOutcome o = Run([] { return false; },
                             [](const v1::JobStatusResponse&) { return true; });
  notifier.join();
  EXPECT_EQ(o.end, LeaseEnd::kDone);
  EXPECT_GE(fake_.beats(), 2);
}

TEST_F(CoordinatorLeaseTest, StopTellsTheCoordinatorWithTheNote) {
  options_.stopping_note = "stopped by a signal (SIGTERM or SIGINT)";
  std::atomic<bool> stop{false};
  const LeaseOutcome o = Run([&] { return stop.load(); },
                             [&](const v1::JobStatusResponse&) {
                               stop = true;  // after the first answer
                               return true;
                             });
  EXPECT_EQ(o.end, LeaseEnd::kStopped);
  EXPECT_TRUE(o.why.empty()) << o.why;
  EXPECT_EQ(fake_.stopping(), options_.stopping_note);
  EXPECT_EQ(fake_.last().session_id(), 0x5e55u);
}

TEST_F(CoordinatorLeaseTest, StopWithoutANoteSaysNothing) {
  std::atomic<bool> stop{false};
  const LeaseOutcome o = Run([&] { return stop.load(); },
                             [&](const v1::JobStatusResponse&) {
                               stop = true;
                               return true;
                             });
  EXPECT_EQ(o.end, LeaseEnd::kStopped);
  EXPECT_EQ(fake_.beats(), 1);
  EXPECT_TRUE(fake_.stopping().empty());
}

TEST_F(CoordinatorLeaseTest, AnEndedSessionIsRefused) {
  fake_.Fail(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "replaced"));
  const LeaseOutcome o = Run([] { return false; },
                             [](const v1::JobStatusResponse&) { return true; });
  EXPECT_EQ(o.end, LeaseEnd::kRefused);
  EXPECT_TRUE(absl::StrContains(o.why, "ended the session of server 3"))
      << o.why;
  EXPECT_TRUE(absl::StrContains(o.why, address_)) << o.why;
  EXPECT_TRUE(absl::StrContains(o.why, "replaced")) << o.why;
}

TEST_F(CoordinatorLeaseTest, AnUnknownProcessIsRefused) {
  fake_.Fail(grpc::Status(grpc::StatusCode::NOT_FOUND, "no shard 3"));
  const LeaseOutcome o = Run([] { return false; },
                             [](const v1::JobStatusResponse&) { return true; });
  EXPECT_EQ(o.end, LeaseEnd::kRefused);
  EXPECT_TRUE(absl::StrContains(o.why, "does not know server 3")) << o.why;
}

// Other errors are retried until the lease runs out.
TEST_F(CoordinatorLeaseTest, SilenceForTheLeaseEndsIt) {
  fake_.Fail(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"));
  const LeaseOutcome o = Run([] { return false; },
                             [](const v1::JobStatusResponse&) { return true; });
  EXPECT_EQ(o.end, LeaseEnd::kSilent);
  EXPECT_GE(fake_.beats(), 2);  // retried, not given up at the first error
  EXPECT_TRUE(absl::StrContains(o.why, "has been silent for")) << o.why;
  EXPECT_TRUE(absl::StrContains(o.why, "(network.lease_s = 0.8)")) << o.why;
}

TEST_F(CoordinatorLeaseTest, AnAbsentCoordinatorIsSilentToo) {
  server_->Shutdown();
  server_.reset();
  options_.coordinator.clear();
  const LeaseOutcome o = Run([] { return false; },
                             [](const v1::JobStatusResponse&) { return true; });
  EXPECT_EQ(o.end, LeaseEnd::kSilent);
  EXPECT_TRUE(absl::StartsWith(o.why, "the coordinator has been silent"))
      << o.why;
}

}  // namespace
}  // namespace pstrain
