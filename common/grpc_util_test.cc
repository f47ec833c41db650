// TLS and mutual TLS over loopback with certificates made by openssl here.
#include "common/grpc_util.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pstrain {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = new std::string(tmp ? tmp : "/tmp");
    if (std::system("command -v openssl >/dev/null") != 0) return;
    const std::string d = *dir_;
    // A CA, a server certificate for 127.0.0.1 and a client certificate.
    const std::string script = absl::StrCat(
        "set -e; cd ", d, "; ",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca "
        "-keyout ca.key -out ca.crt 2>/dev/null; ",
        "for n in server client; do "
        "openssl req -newkey rsa:2048 -nodes -subj /CN=$n -keyout $n.key "
        "-out $n.csr 2>/dev/null; "
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > $n.ext; "
        "openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
        "-days 2 -extfile $n.ext -out $n.crt 2>/dev/null; done");
    made_ = std::system(script.c_str()) == 0;
  }

  void SetUp() override {
    if (!made_)
      GTEST_SKIP() << "openssl is missing or failed: no test certificates";
  }

  static std::string Path(const std::string& name) {
    return *dir_ + "/" + name;
  }

  // Starts a server with `tls` and returns its port.
  int StartServer(const TlsFiles& tls) {
    auto creds = MakeServerCredentials(tls);
    EXPECT_TRUE(creds.ok()) << creds.status();
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", *creds, &port);
    server_ = builder.BuildAndStart();
    return port;
  }

  static grpc::Status Check(int port, const TlsFiles& tls) {
    auto creds = MakeChannelCredentials(tls);
    EXPECT_TRUE(creds.ok()) << creds.status();
    auto channel = MakeChannel(absl::StrCat("127.0.0.1:", port), *creds);
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(5));
    // An empty HealthCheckRequest serialises to zero bytes.
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    grpc::GenericStub stub(channel);
    grpc::Status result;
    bool done = false;
    absl::Mutex mu;
    stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                   &request, &response, [&](grpc::Status s) {
                     absl::MutexLock lock(&mu);
                     result = s;
                     done = true;
                   });
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
    return result;
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  static std::string* dir_;
  static bool made_;
  std::unique_ptr<grpc::Server> server_;
};

std::string* TlsTest::dir_ = nullptr;
bool TlsTest::made_ = false;

TEST_F(TlsTest, ServerTlsAcceptsClientsThatTrustTheCa) {
  const int port = StartServer({Path("server.crt"), Path("server.key"), ""});
  EXPECT_TRUE(Check(port, {"", "", Path("ca.crt")}).ok());
  // A plaintext client cannot talk to a TLS server.
  EXPECT_EQ(Check(port, {}).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, MutualTlsRequiresAClientCertificate) {
  const int port =
      StartServer({Path("server.crt"), Path("server.key"), Path("ca.crt")});
  EXPECT_TRUE(
      Check(port, {Path("client.crt"), Path("client.key"), Path("ca.crt")})
          .ok());
  EXPECT_EQ(Check(port, {"", "", Path("ca.crt")}).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, MissingFilesAreNamed) {
  auto s =
      MakeServerCredentials({"/nonexistent/tls.crt", Path("server.key"), ""});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("/nonexistent/tls.crt"),
            std::string::npos);
  auto c = MakeChannelCredentials({"", "", "/nonexistent/ca.crt"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(MakeServerCredentials({Path("server.crt"), "", ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TlsTest, JobTokenWorksOverMutualTls) {
  const std::string token = Path("token");
  ASSERT_EQ(std::system(
                absl::StrCat("printf 0123456789abcdef0123 > ", token).c_str()),
            0);
  auto creds = MakeServerCredentials(
      {Path("server.crt"), Path("server.key"), Path("ca.crt"), token});
  ASSERT_TRUE(creds.ok()) << creds.status();
  auto started = StartGrpcServer("127.0.0.1", 0, *creds, {});
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = std::move(started->server);
  const int port = started->port;
  // The health service is open to TLS clients without the token ...
  EXPECT_TRUE(
      Check(port, {Path("client.crt"), Path("client.key"), Path("ca.crt")})
          .ok());
  // ... reflection is not; with the token the call reaches the server.
  auto call = [&](const std::string& token_file) {
    auto c = MakeChannelCredentials(
        {Path("client.crt"), Path("client.key"), Path("ca.crt"), token_file});
    EXPECT_TRUE(c.ok()) << c.status();
    auto channel = MakeChannel(absl::StrCat("127.0.0.1:", port), *c);
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(5));
    grpc::GenericStub stub(channel);
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    absl::Mutex mu;
    grpc::Status result;
    bool done = false;
    stub.UnaryCall(&ctx, "/pstrain.v1.Coordinator/GetJob", grpc::StubOptions(),
                   &request, &response, [&](grpc::Status s) {
                     absl::MutexLock lock(&mu);
                     result = s;
                     done = true;
                   });
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
    return result.error_code();
  };
  EXPECT_EQ(call(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call(token), grpc::StatusCode::UNIMPLEMENTED);
}

// Defect #7: gRPC's default SO_REUSEPORT let a second process bind a port a
// first one held, and the kernel split the clients between the two.
TEST(StartGrpcServerTest, ABusyPortIsAnError) {
  auto first =
      StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(), {});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = StartGrpcServer("127.0.0.1", first->port,
                                grpc::InsecureServerCredentials(), {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(absl::StrCat(first->port)),
            std::string::npos)
      << second.status();
  first->server->Shutdown();
}

}  // namespace
}  // namespace pstrain
