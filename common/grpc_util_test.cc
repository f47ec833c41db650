// TLS and mutual TLS over loopback with certificates made by openssl here.
#include "common/grpc_util.h"

#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

  static grpc::Status Check(int port, const TlsFiles& tls,
                            absl::Duration timeout = absl::Seconds(5)) {
    auto creds = MakeChannelCredentials(tls);
    EXPECT_TRUE(creds.ok()) << creds.status();
    auto channel = MakeChannel(absl::StrCat("127.0.0.1:", port), *creds);
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
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

// A loopback TCP relay to `upstream_port` that holds each connection for
// `delay` before it forwards a byte: a link or peer slow to handshake.
class SlowLink {
 public:
  SlowLink(int upstream_port, absl::Duration delay)
      : upstream_port_(upstream_port), delay_(delay) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~SlowLink() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    }
    shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    for (std::thread& t : relays_) t.join();
    for (int fd : fds_) close(fd);
    close(listen_fd_);
  }
  int port() const { return port_; }
  int connections() {
    absl::MutexLock lock(&mu_);
    return connections_;
  }

 private:
  void Accept() {
    while (true) {
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        close(client);
        return;
      }
      ++connections_;
      fds_.push_back(client);
      relays_.emplace_back([this, client] { Relay(client); });
    }
  }
  void Relay(int client) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this] { return stopping_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), delay_)) return;
    }
    const int up = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(upstream_port_);
    {
      absl::MutexLock lock(&mu_);
      fds_.push_back(up);
      if (stopping_) return;
    }
    if (connect(up, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return;
    }
    pollfd p[2] = {{client, POLLIN, 0}, {up, POLLIN, 0}};
    char buf[16384];
    while (poll(p, 2, 1000) >= 0) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = read(p[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          shutdown(p[1 - i].fd, SHUT_RDWR);
          return;
        }
        for (ssize_t off = 0; off < n;) {
          const ssize_t w = write(p[1 - i].fd, buf + off, n - off);
          if (w <= 0) return;
          off += w;
        }
      }
    }
  }

  const int upstream_port_;
  const absl::Duration delay_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int connections_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> relays_;  // only the acceptor adds, before join
};

// A connection attempt is given gRPC's 20 s however short the reconnect
// backoff (kMinConnectTimeoutMs): with GRPC_ARG_MIN_RECONNECT_BACKOFF_MS at
// 100 ms every attempt through a link slower than the backoff (2 s at most)
// was cut short, and a TLS channel never connected (seen with pods on a
// loaded machine; grpc/grpc#33423).
TEST_F(TlsTest, ASlowHandshakeStillConnects) {
  const int port =
      StartServer({Path("server.crt"), Path("server.key"), Path("ca.crt")});
  SlowLink slow(port, absl::Seconds(3));
  const grpc::Status s = Check(
      slow.port(), {Path("client.crt"), Path("client.key"), Path("ca.crt")},
      absl::Seconds(60));
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  // One attempt, not a series cut short by the backoff.
  EXPECT_EQ(slow.connections(), 1);
}

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
