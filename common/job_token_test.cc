// The job token on real gRPC servers over loopback: every method of every
// pstrain service (taken from the proto descriptors, served by the generated
// base classes, which answer UNIMPLEMENTED once a call gets through) rejects
// calls without the right token, the health service stays open, and only the
// coordinator may call Shutdown.
#include "common/job_token.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {
namespace {

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

std::string WriteFile(const std::string& name, const std::string& content) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::ofstream(path) << content;
  return path;
}

// Calls `method` with an empty message (valid for every pstrain request
// type; a unary call is a one-message stream on the wire) and returns the
// status.
grpc::Status Call(const std::shared_ptr<grpc::Channel>& channel,
                  const std::string& method) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, absl::Seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::GenericStub stub(channel);
  absl::Mutex mu;
  grpc::Status result;
  bool done = false;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   absl::MutexLock lock(&mu);
                   result = s;
                   done = true;
                 });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  return result;
}

// "/pstrain.v1.Service/Method" for every method of the three services.
std::vector<std::string> AllPstrainMethods() {
  std::vector<std::string> methods;
  for (const auto* service : {pstrain::v1::ParameterServer::service_full_name(),
                              pstrain::v1::Coordinator::service_full_name(),
                              pstrain::v1::RingPeer::service_full_name()}) {
    const auto* descriptor =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
            service);
    EXPECT_NE(descriptor, nullptr) << service;
    if (descriptor == nullptr) continue;
    for (int i = 0; i < descriptor->method_count(); ++i) {
      methods.push_back(
          absl::StrCat("/", service, "/", descriptor->method(i)->name()));
    }
  }
  return methods;
}

class JobTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ = WriteFile("token", absl::StrCat(kToken, "\n"));
    auto creds = MakeServerCredentials({"", "", "", token_file_});
    ASSERT_TRUE(creds.ok()) << creds.status();
    auto started = StartGrpcServer("127.0.0.1", 0, *creds,
                                   {&parameter_server_, &coordinator_, &ring_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    address_ = absl::StrCat("127.0.0.1:", started->port);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  std::shared_ptr<grpc::Channel> Channel(const std::string& token_file,
                                         CallerRole role) {
    auto creds = MakeChannelCredentials({"", "", "", token_file}, role);
    EXPECT_TRUE(creds.ok()) << creds.status();
    return MakeChannel(address_, *creds);
  }

  std::string token_file_;
  pstrain::v1::ParameterServer::Service parameter_server_;
  pstrain::v1::Coordinator::Service coordinator_;
  pstrain::v1::RingPeer::Service ring_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(JobTokenTest, EveryMethodRejectsAMissingOrWrongToken) {
  const std::vector<std::string> methods = AllPstrainMethods();
  ASSERT_GE(methods.size(), 10u);
  auto none = MakeChannel(address_);
  auto wrong = Channel(WriteFile("wrong", "fedcba9876543210fedcba9876543210"),
                       CallerRole::kCoordinator);
  auto prefix = Channel(WriteFile("prefix", "0123456789abcdef0123456789abcde"),
                        CallerRole::kCoordinator);
  for (const std::string& method : methods) {
    for (const auto& channel : {none, wrong, prefix}) {
      const grpc::Status st = Call(channel, method);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << method << ": " << st.error_message();
    }
  }
  EXPECT_NE(Call(none, methods[0]).error_message().find("token"),
            std::string::npos);
}

TEST_F(JobTokenTest, TheRightTokenGetsThrough) {
  auto member = Channel(token_file_, CallerRole::kMember);
  for (const std::string& method : AllPstrainMethods()) {
    if (method == "/pstrain.v1.ParameterServer/Shutdown" ||
        method == "/pstrain.v1.ParameterServer/Checkpoint" ||
        method == "/pstrain.v1.ParameterServer/Rollback") {
      continue;
    }
    // Past the check, the generated base class answers UNIMPLEMENTED.
    EXPECT_EQ(Call(member, method).error_code(),
              grpc::StatusCode::UNIMPLEMENTED)
        << method;
  }
}

TEST_F(JobTokenTest, OnlyTheCoordinatorMayShutAShardDownOrCheckpoint) {
  for (const std::string method : {"/pstrain.v1.ParameterServer/Shutdown",
                                   "/pstrain.v1.ParameterServer/Checkpoint",
                                   "/pstrain.v1.ParameterServer/Rollback"}) {
    const grpc::Status worker =
        Call(Channel(token_file_, CallerRole::kMember), method);
    EXPECT_EQ(worker.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << method << ": " << worker.error_message();
    EXPECT_EQ(Call(Channel(token_file_, CallerRole::kCoordinator), method)
                  .error_code(),
              grpc::StatusCode::UNIMPLEMENTED)
        << method;
  }
}

TEST_F(JobTokenTest, HealthNeedsNoToken) {
  // An empty HealthCheckRequest asks about the whole server: SERVING.
  EXPECT_TRUE(Call(MakeChannel(address_), "/grpc.health.v1.Health/Check").ok());
  // Reflection is not exempt.
  EXPECT_EQ(Call(MakeChannel(address_),
                 "/grpc.reflection.v1alpha.ServerReflection/"
                 "ServerReflectionInfo")
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST(ReadJobTokenTest, BadFilesAreNamed) {
  auto missing = ReadJobToken("/nonexistent/token");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/token"),
            std::string::npos);
  EXPECT_EQ(ReadJobToken(WriteFile("short", "abc\n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadJobToken(WriteFile("empty", "")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ReadJobToken(WriteFile("space", "0123456789 abcdef0123")).status().code(),
      absl::StatusCode::kInvalidArgument);
  auto ok = ReadJobToken(WriteFile("ok", absl::StrCat(kToken, " \r\n")));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, kToken);
  // Credentials report the bad token file too.
  EXPECT_EQ(
      MakeServerCredentials({"", "", "", "/nonexistent/token"}).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(MakeChannelCredentials({"", "", "", "/nonexistent/token"})
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckJobTokenTest, Rules) {
  EXPECT_TRUE(
      CheckJobToken("/grpc.health.v1.Health/Check", "", "", kToken).ok());
  EXPECT_EQ(
      CheckJobToken("/pstrain.v1.Coordinator/Report", "", "", kToken).code(),
      absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(
      CheckJobToken("/pstrain.v1.Coordinator/Report", kToken, "member", kToken)
          .ok());
  EXPECT_EQ(CheckJobToken("/pstrain.v1.ParameterServer/Shutdown", kToken,
                          "member", kToken)
                .code(),
            absl::StatusCode::kPermissionDenied);
  // A wrong token is UNAUTHENTICATED even for Shutdown from the coordinator.
  EXPECT_EQ(CheckJobToken("/pstrain.v1.ParameterServer/Shutdown", "x",
                          "coordinator", kToken)
                .code(),
            absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace pstrain
