#include "common/tcp_congestion.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(TcpCongestion, ReadsTheSysctlsFirstWord) {
  const std::string path = TempPath("tcp_congestion_control");
  std::ofstream(path) << "bbr\n";
  EXPECT_EQ(TcpCongestionControl(path), "bbr");
  std::ofstream(path, std::ios::trunc) << "cubic\n";
  EXPECT_EQ(TcpCongestionControl(path), "cubic");
}

TEST(TcpCongestion, EmptyWhenUnreadable) {
  EXPECT_EQ(TcpCongestionControl(TempPath("no-such-file")), "");
  const std::string empty = TempPath("empty");
  std::ofstream(empty).flush();
  EXPECT_EQ(TcpCongestionControl(empty), "");
}

TEST(TcpCongestion, OnlyBbrPacesEveryConnection) {
  EXPECT_TRUE(PacesEveryConnection("bbr"));
  EXPECT_TRUE(PacesEveryConnection("bbr3"));
  EXPECT_FALSE(PacesEveryConnection("cubic"));
  EXPECT_FALSE(PacesEveryConnection("reno"));
  EXPECT_FALSE(PacesEveryConnection(""));
}

// A loopback TCP socket listening on an ephemeral port; closed on
// destruction.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
        listen(fd_, 4) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~Listener() { close(fd_); }
  int fd() const { return fd_; }
  int port() const { return port_; }

  // Connects a client and returns the accepted end (the caller closes both).
  int Accept(int* client) const {
    *client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port_);
    if (connect(*client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))) {
      return -1;
    }
    return accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A congestion control other than the host's default that this process
// may set: reno (the kernel's own, never restricted) unless reno is the
// default, then cubic; "" when the host takes neither.
std::string OtherThanTheDefault() {
  const std::string host = TcpCongestionControl();
  for (const char* name : {"reno", "cubic"}) {
    if (name != host && CheckCongestionControl("k", name).ok()) return name;
  }
  return "";
}

TEST(TcpCongestion, CheckTriesTheNameOnASocket) {
  EXPECT_TRUE(CheckCongestionControl("k", "").ok());
  const std::string host = TcpCongestionControl();
  if (!host.empty()) EXPECT_TRUE(CheckCongestionControl("k", host).ok());
  const absl::Status unknown =
      CheckCongestionControl("network.tcp_congestion_control", "no_such_cc");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(),
              testing::HasSubstr("network.tcp_congestion_control: this host's "
                                 "kernel has no congestion control "
                                 "'no_such_cc'"));
  EXPECT_THAT(unknown.message(), testing::HasSubstr("; it has "));
  const absl::Status long_name =
      CheckCongestionControl("k", "sixteen_letters_");
  EXPECT_EQ(long_name.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(long_name.message(), testing::HasSubstr("longer than 15"));
}

TEST(TcpCongestion, ListenersOnThePortPassTheirsToAcceptedConnections) {
  const std::string name = OtherThanTheDefault();
  if (name.empty()) {
    GTEST_SKIP() << "this host lets this process set neither reno nor cubic "
                    "beside its default";
  }
  Listener ours, other;
  ASSERT_GT(ours.port(), 0);
  ASSERT_GT(other.port(), 0);
  const std::string before = SocketCongestionControl(ours.fd());
  ASSERT_NE(before, name);
  int early_client = -1;
  const int early = ours.Accept(&early_client);
  ASSERT_GE(early, 0);

  absl::StatusOr<int> set = SetListenersCongestionControl(ours.port(), name);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(*set, 1);
  EXPECT_EQ(SocketCongestionControl(ours.fd()), name);
  EXPECT_EQ(SocketCongestionControl(other.fd()), before);  // another port
  EXPECT_EQ(SocketCongestionControl(early), before);       // accepted before
  int client = -1;
  const int accepted = ours.Accept(&client);
  ASSERT_GE(accepted, 0);
  EXPECT_EQ(SocketCongestionControl(accepted), name);
  for (int fd : {early_client, early, client, accepted}) close(fd);
}

TEST(TcpCongestion, RefusedOrAbsentChangesNothing) {
  Listener ours;
  ASSERT_GT(ours.port(), 0);
  const std::string before = SocketCongestionControl(ours.fd());
  absl::StatusOr<int> unknown =
      SetListenersCongestionControl(ours.port(), "no_such_cc");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(),
              testing::HasSubstr("network.tcp_congestion_control"));
  EXPECT_EQ(SocketCongestionControl(ours.fd()), before);

  // A port no socket of this process listens on any more.
  int closed_port = 0;
  {
    Listener gone;
    closed_port = gone.port();
  }
  absl::StatusOr<int> none = SetListenersCongestionControl(closed_port, "reno");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(),
              testing::HasSubstr(absl::StrCat("on port ", closed_port)));
  absl::StatusOr<int> nothing = SetListenersCongestionControl(ours.port(), "");
  ASSERT_TRUE(nothing.ok());
  EXPECT_EQ(*nothing, 0);
}

TEST(TcpCongestion, FindsAGrpcServersListener) {
  const std::string name = OtherThanTheDefault();
  if (name.empty()) {
    GTEST_SKIP() << "this host lets this process set neither reno nor cubic "
                    "beside its default";
  }
  absl::StatusOr<StartedServer> server =
      StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(), {});
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<int> set = SetListenersCongestionControl(server->port, name);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_GE(*set, 1);
  server->server->Shutdown();
}

}  // namespace
}  // namespace pstrain
