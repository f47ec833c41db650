#include "tests/stranger/stranger.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/job_token.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/pstrain.grpc.pb.h"
#include "tests/stranger/loopback_target.h"

namespace pstrain {
namespace stranger {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(LoopbackTargetTest, AcceptsLoopbackOnly) {
  auto targets = ParseLoopbackTargets("127.0.0.1:4000,localhost:1,[::1]:65535");
  ASSERT_TRUE(targets.ok()) << targets.status();
  ASSERT_EQ(targets->size(), 3u);
  EXPECT_EQ((*targets)[0].GrpcAddress(), "127.0.0.1:4000");
  EXPECT_EQ((*targets)[1].GrpcAddress(), "127.0.0.1:1");  // never resolved
  EXPECT_EQ((*targets)[2].GrpcAddress(), "[::1]:65535");
  EXPECT_EQ((*targets)[1].given, "localhost:1");
}

TEST(LoopbackTargetTest, RefusesAnyOtherHostAndBadPorts) {
  for (const char* list :
       {"", "10.0.0.1:80", "example.com:443", "127.0.0.2:80", "0.0.0.0:80",
        "[::]:80", "::1:80", "LOCALHOST:80", "127.0.0.1",
        "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:+80",
        "127.0.0.1:8x", ":80", "127.0.0.1:80,", "127.0.0.1:80,10.1.1.1:80"}) {
    auto targets = ParseLoopbackTargets(list);
    EXPECT_FALSE(targets.ok()) << "\"" << list << "\" accepted";
    EXPECT_THAT(targets.status().message(), HasSubstr("--targets")) << list;
  }
  EXPECT_THAT(ParseLoopbackTargets("192.168.1.5:80").status().message(),
              HasSubstr("not a loopback host"));
}

TEST(ShouldHaveBeenRefusedTest, HealthAloneIsOpenWithoutTheToken) {
  EXPECT_FALSE(ShouldHaveBeenRefused("/grpc.health.v1.Health/Check", false));
  EXPECT_FALSE(ShouldHaveBeenRefused("/grpc.health.v1.Health/Watch", true));
  EXPECT_TRUE(
      ShouldHaveBeenRefused("/pstrain.v1.Coordinator/JobStatus", false));
  EXPECT_TRUE(
      ShouldHaveBeenRefused("/pstrain.v1.ParameterServer/GetStats", false));
  EXPECT_FALSE(
      ShouldHaveBeenRefused("/pstrain.v1.Coordinator/JobStatus", true));
  EXPECT_FALSE(ShouldHaveBeenRefused("/pstrain.v1.Coordinator/GetJob", true));
  for (const char* method :
       {"/pstrain.v1.ParameterServer/Rollback",
        "/pstrain.v1.ParameterServer/Push", "/pstrain.v1.Coordinator/Report",
        "/pstrain.v1.Coordinator/RegisterServer",
        "/pstrain.v1.RingPeer/SendSegments"}) {
    EXPECT_TRUE(ShouldHaveBeenRefused(method, true)) << method;
    EXPECT_TRUE(ShouldHaveBeenRefused(method, false)) << method;
  }
}

TEST(StatusCodeNameTest, Names) {
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::OK), "OK");
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::UNAUTHENTICATED),
            "UNAUTHENTICATED");
  EXPECT_EQ(StatusCodeName(static_cast<grpc::StatusCode>(99)), "CODE_99");
}

// Parameter-server and coordinator services that count every call that
// reaches them and say OK to every unary one.
std::atomic<int> reached{0};
class CountingShard final : public v1::ParameterServer::Service {
  grpc::Status GetStats(grpc::ServerContext*, const v1::ShardStatsRequest*,
                        v1::ShardStats*) override {
    return Reached();
  }
  grpc::Status Shutdown(grpc::ServerContext*, const v1::ShutdownRequest*,
                        v1::ShutdownResponse*) override {
    return Reached();
  }
  grpc::Status Checkpoint(grpc::ServerContext*, const v1::CheckpointRequest*,
                          v1::CheckpointResponse*) override {
    return Reached();
  }
  grpc::Status Rollback(grpc::ServerContext*, const v1::RollbackRequest*,
                        v1::RollbackResponse*) override {
    return Reached();
  }
  static grpc::Status Reached() {
    ++reached;
    return grpc::Status::OK;
  }
};
class CountingCoordinator final : public v1::Coordinator::Service {
  grpc::Status Report(grpc::ServerContext*, const v1::ReportRequest*,
                      v1::ReportResponse*) override {
    ++reached;
    return grpc::Status::OK;
  }
  grpc::Status JobStatus(grpc::ServerContext*, const v1::JobStatusRequest*,
                         v1::JobStatusResponse*) override {
    ++reached;
    return grpc::Status::OK;
  }
};

class StrangerRunTest : public ::testing::Test {
 protected:
  // Serves both services (and health) on 127.0.0.1, with the token check
  // when `token` is not empty.
  void Serve(const std::string& token) {
    reached = 0;
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(
        "127.0.0.1:0",
        token.empty() ? grpc::InsecureServerCredentials()
                      : TokenCheckingServerCredentials(nullptr, token),
        &port_);
    builder.RegisterService(&shard_);
    builder.RegisterService(&coordinator_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }
  StrangerOptions Options(absl::Duration duration) {
    StrangerOptions o;
    o.targets = *ParseLoopbackTargets("127.0.0.1:" + std::to_string(port_));
    o.duration = duration;
    o.actions_per_second = 300;
    o.seed = 7;
    return o;
  }

  int port_ = 0;
  CountingShard shard_;
  CountingCoordinator coordinator_;
  std::unique_ptr<grpc::Server> server_;
};

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

TEST_F(StrangerRunTest, BehindTheTokenNothingReachesAService) {
  Serve(kToken);
  auto tally = RunStranger(Options(absl::Seconds(2)));
  ASSERT_TRUE(tally.ok()) << tally.status();
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(tally->breaches.empty());
  EXPECT_EQ(tally->unfinished, 0);
  EXPECT_GT(tally->by_code["UNAUTHENTICATED"], 200);
  EXPECT_GT(tally->raw_opened, 0);
  // Health stays open.
  EXPECT_GT(tally->by_method["/grpc.health.v1.Health/Check"]["OK"], 0);
  const std::string text = FormatTally(*tally);
  EXPECT_THAT(text, HasSubstr("status UNAUTHENTICATED "));
  EXPECT_THAT(text, HasSubstr("method /pstrain.v1.ParameterServer/Rollback "
                              "UNAUTHENTICATED "));
  EXPECT_THAT(text, HasSubstr("target 127.0.0.1:" + std::to_string(port_) +
                              " UNAUTHENTICATED "));
}

TEST_F(StrangerRunTest, WithTheTokenMadeUpCallsThatSucceedAreBreaches) {
  Serve(kToken);
  StrangerOptions o = Options(absl::Seconds(2));
  o.token = kToken;
  auto tally = RunStranger(o);
  ASSERT_TRUE(tally.ok()) << tally.status();
  EXPECT_GT(reached, 0);
  EXPECT_THAT(tally->breaches, Contains("/pstrain.v1.Coordinator/Report"));
  // Coordinator-only methods need the coordinator role too.
  EXPECT_EQ(tally->breaches.count("/pstrain.v1.ParameterServer/Rollback"), 0u);
  EXPECT_GT(tally->by_method["/pstrain.v1.ParameterServer/Rollback"]
                            ["PERMISSION_DENIED"],
            0);
  // Reads are not breaches for a token holder.
  EXPECT_EQ(tally->breaches.count("/pstrain.v1.Coordinator/JobStatus"), 0u);
  EXPECT_EQ(tally->breaches.count("/pstrain.v1.ParameterServer/GetStats"), 0u);
}

TEST_F(StrangerRunTest, WithoutTheCheckEveryOkIsABreach) {
  Serve("");
  auto tally = RunStranger(Options(absl::Seconds(2)));
  ASSERT_TRUE(tally.ok()) << tally.status();
  EXPECT_THAT(tally->breaches,
              Contains("/pstrain.v1.ParameterServer/Shutdown"));
  EXPECT_THAT(tally->breaches, Contains("/pstrain.v1.Coordinator/JobStatus"));
  EXPECT_EQ(tally->breaches.count("/grpc.health.v1.Health/Check"), 0u);
}

TEST_F(StrangerRunTest, OpenCallsAreBoundedAndEndedAtTheEnd) {
  // Health Watch streams stay open until their deadline (1..10 s): with 3
  // calls at most, the bound is reached, and the end cancels what is open.
  Serve(kToken);
  StrangerOptions o = Options(absl::Seconds(1.5));
  o.max_streams_per_target = 3;
  const absl::Time start = absl::Now();
  auto tally = RunStranger(o);
  ASSERT_TRUE(tally.ok()) << tally.status();
  EXPECT_EQ(tally->most_open, 3);
  EXPECT_GT(tally->skipped, 0);
  EXPECT_GT(tally->by_method["/grpc.health.v1.Health/Watch"]["CANCELLED"], 0);
  EXPECT_EQ(tally->unfinished, 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1.5) + absl::Seconds(5));
}

TEST(RunStrangerTest, RefusesBadOptions) {
  StrangerOptions o;
  EXPECT_FALSE(RunStranger(o).ok());  // no targets
  o.targets = *ParseLoopbackTargets("127.0.0.1:1");
  o.duration = absl::ZeroDuration();
  EXPECT_FALSE(RunStranger(o).ok());
  o.duration = absl::Seconds(1);
  o.actions_per_second = 0;
  EXPECT_FALSE(RunStranger(o).ok());
}

}  // namespace
}  // namespace stranger
}  // namespace pstrain
