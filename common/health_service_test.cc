// The health service: the standard protocol (Check, Watch and its updates)
// and the bounds on open Watch streams.
#include "common/health_service.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"

namespace pstrain {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// A server with only the health service, from StartGrpcServer (default
// limits) or with `limits`.
class HealthServiceTest : public ::testing::Test {
 protected:
  void Start(const HealthLimits* limits = nullptr) {
    if (limits == nullptr) {
      auto started = StartGrpcServer("127.0.0.1", 0,
                                     grpc::InsecureServerCredentials(), {});
      ASSERT_TRUE(started.ok()) << started.status();
      server_ = std::move(started->server);
      health_ = started->health;
      port_ = started->port;
    } else {
      auto health = std::make_unique<HealthService>(*limits);
      health_ = health.get();
      grpc::ServerBuilder builder;
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                               &port_);
      builder.RegisterService(health_);
      builder.SetOption(
          std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(
              std::move(health)));
      server_ = builder.BuildAndStart();
      ASSERT_NE(server_, nullptr);
    }
    stub_ = Health::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port_)));
  }

  void TearDown() override {
    if (server_) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    }
  }

  grpc::Status Check(const std::string& service,
                     HealthCheckResponse::ServingStatus* status) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    grpc::Status st = stub_->Check(&ctx, request, &response);
    *status = response.status();
    return st;
  }

  // An open Watch; `first` is its first message (false when the stream
  // ended without one, with `ended` its status).
  struct OpenWatch {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader;
    HealthCheckResponse first;
    bool got_first = false;
    grpc::Status ended;
  };
  OpenWatch Watch(const std::string& service) {
    OpenWatch w;
    w.ctx = std::make_unique<grpc::ClientContext>();
    SetTimeout(w.ctx.get(), absl::Seconds(60));
    HealthCheckRequest request;
    request.set_service(service);
    w.reader = stub_->Watch(w.ctx.get(), request);
    w.got_first = w.reader->Read(&w.first);
    if (!w.got_first) w.ended = w.reader->Finish();
    return w;
  }
  static void Close(OpenWatch& w) {
    w.ctx->TryCancel();
    HealthCheckResponse ignored;
    while (w.reader->Read(&ignored)) {
    }
    w.reader->Finish();
  }

  // Waits (bounded) until the service counts `n` open watches.
  bool AwaitOpenWatches(int n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (health_->open_watches() != n) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  std::unique_ptr<grpc::Server> server_;
  HealthService* health_ = nullptr;
  int port_ = 0;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, CheckAnswersTheServerAndNamedServices) {
  Start();
  HealthCheckResponse::ServingStatus status;
  ASSERT_TRUE(Check("", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);
  EXPECT_EQ(Check("pstrain.v1.ParameterServer", &status).error_code(),
            grpc::StatusCode::NOT_FOUND);

  server_->GetHealthCheckService()->SetServingStatus(false);
  ASSERT_TRUE(Check("", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING);
  health_->SetServingStatus("pstrain.v1.ParameterServer", true);
  ASSERT_TRUE(Check("pstrain.v1.ParameterServer", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);
}

TEST_F(HealthServiceTest, WatchSendsTheStatusAndEachChange) {
  Start();
  OpenWatch w = Watch("");
  ASSERT_TRUE(w.got_first) << w.ended.error_message();
  EXPECT_EQ(w.first.status(), HealthCheckResponse::SERVING);
  server_->GetHealthCheckService()->SetServingStatus(false);
  HealthCheckResponse next;
  ASSERT_TRUE(w.reader->Read(&next));
  EXPECT_EQ(next.status(), HealthCheckResponse::NOT_SERVING);
  server_->GetHealthCheckService()->SetServingStatus(true);
  ASSERT_TRUE(w.reader->Read(&next));
  EXPECT_EQ(next.status(), HealthCheckResponse::SERVING);

  OpenWatch unknown = Watch("no.such.Service");
  ASSERT_TRUE(unknown.got_first);
  EXPECT_EQ(unknown.first.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  Close(w);
  Close(unknown);
  EXPECT_TRUE(AwaitOpenWatches(0));
}

TEST_F(HealthServiceTest, WatchesFromOnePeerAreBounded) {
  HealthLimits limits;
  limits.max_watches = 100;
  limits.max_watches_per_peer = 3;
  Start(&limits);
  std::vector<OpenWatch> open;
  for (int i = 0; i < 3; ++i) {
    open.push_back(Watch(""));
    ASSERT_TRUE(open.back().got_first) << i;
  }
  OpenWatch refused = Watch("");
  EXPECT_FALSE(refused.got_first);
  EXPECT_EQ(refused.ended.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Check stays open to the same peer.
  HealthCheckResponse::ServingStatus status;
  EXPECT_TRUE(Check("", &status).ok());

  // A closed watch frees its place.
  Close(open.back());
  open.pop_back();
  ASSERT_TRUE(AwaitOpenWatches(2));
  OpenWatch again = Watch("");
  EXPECT_TRUE(again.got_first);
  Close(again);
  for (auto& w : open) Close(w);
  EXPECT_TRUE(AwaitOpenWatches(0));
}

TEST_F(HealthServiceTest, WatchesInTotalAreBounded) {
  HealthLimits limits;
  limits.max_watches = 2;
  limits.max_watches_per_peer = 10;
  Start(&limits);
  OpenWatch a = Watch(""), b = Watch("");
  ASSERT_TRUE(a.got_first && b.got_first);
  OpenWatch refused = Watch("");
  EXPECT_EQ(refused.ended.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  Close(a);
  Close(b);
  EXPECT_TRUE(AwaitOpenWatches(0));
}

// Every pstrain process starts its gRPC servers with StartGrpcServer: the
// bounded service with the default limits.
TEST_F(HealthServiceTest, StartGrpcServerServesTheBoundedService) {
  Start();
  std::vector<OpenWatch> open;
  for (int i = 0; i < HealthLimits().max_watches_per_peer; ++i) {
    open.push_back(Watch(""));
    ASSERT_TRUE(open.back().got_first) << i;
  }
  OpenWatch refused = Watch("");
  EXPECT_EQ(refused.ended.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (auto& w : open) Close(w);
  EXPECT_TRUE(AwaitOpenWatches(0));
}

// Open watches do not hold a server that is stopped: they are told
// NOT_SERVING and ended, well before the grace period would cancel them.
TEST_F(HealthServiceTest, ShutdownEndsOpenWatches) {
  Start();
  OpenWatch w = Watch("");
  ASSERT_TRUE(w.got_first);
  ShutdownGrpcServer(server_.get(), absl::Hours(1));
  HealthCheckResponse next;
  std::vector<HealthCheckResponse::ServingStatus> seen;
  while (w.reader->Read(&next)) seen.push_back(next.status());
  w.reader->Finish();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health_->open_watches(), 0);
  server_.reset();
}

TEST(PeerHostTest, DropsThePort) {
  EXPECT_EQ(PeerHost("ipv4:10.0.0.1:5555"), "ipv4:10.0.0.1");
  EXPECT_EQ(PeerHost("ipv6:[::1]:5555"), "ipv6:[::1]");
  EXPECT_EQ(PeerHost("unix:/tmp/sock"), "unix:/tmp/sock");
}

}  // namespace
}  // namespace pstrain
