#include "common/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/metrics_http.h"

namespace pstrain {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndHistograms) {
  MetricsRegistry r;
  Counter* c =
      r.AddCounter("pstrain_test_bytes_total", "Bytes.", {{"role", "server"}});
  Gauge* g = r.AddGauge("pstrain_test_loss", "Loss.");
  Histogram* h = r.AddHistogram("pstrain_test_seconds", "Latency.", {0.1, 1.0});
  r.AddCallback("pstrain_test_live", "Live.", false, [] { return 3.0; });
  c->Inc(5);
  c->Inc();
  g->Set(0.25);
  h->Observe(0.05);
  h->Observe(0.5);
  h->Observe(7);
  const std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE pstrain_test_bytes_total counter\n"),
            std::string::npos);
  EXPECT_NE(text.find("pstrain_test_bytes_total{role=\"server\"} 6\n"),
            std::string::npos);
  EXPECT_NE(text.find("pstrain_test_loss 0.25\n"), std::string::npos);
  EXPECT_NE(
      text.find("pstrain_test_seconds_bucket{le=\"0.10000000000000001\"} 1\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("pstrain_test_seconds_bucket{le=\"1\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("pstrain_test_seconds_bucket{le=\"+Inf\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("pstrain_test_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("pstrain_test_seconds_sum 7.5499999999999998\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("pstrain_test_live 3\n"), std::string::npos);
}

TEST(MetricsTest, ServesOverHttpWithMovingValues) {
  MetricsRegistry r;
  Counter* c = r.AddCounter("pstrain_test_steps_total", "Steps.");
  auto server = MetricsHttpServer::Start(&r, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto first = client.Get("/metrics");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_NE(first->body.find("pstrain_test_steps_total 0\n"),
            std::string::npos);
  c->Inc(3);
  auto second = client.Get("/metrics");
  ASSERT_TRUE(second);
  EXPECT_NE(second->body.find("pstrain_test_steps_total 3\n"),
            std::string::npos);
}

// A loopback TCP connection to `port` that sent `bytes` and then nothing;
// -1 if it could not connect or send.
int ConnectAndSend(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) !=
          0 ||
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(bytes.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True if the server closed `fd` (end of stream or reset) within `within`.
bool ClosedWithin(int fd, absl::Duration within) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(within))) != 1) {
    return false;
  }
  char c;
  return ::recv(fd, &c, 1, 0) <= 0;
}

// Closes the descriptors it holds.
struct Sockets {
  ~Sockets() {
    for (int fd : fds) ::close(fd);
  }
  std::vector<int> fds;
};

// 64 clients that each sent part of a request line and then nothing: each
// holds a thread of the server's for a read timeout at most, so GET
// /metrics is still answered (with the server as shipped, at once: they
// take 64 of its threads), and each of them is closed. The bound is 4 read
// timeouts, generous for a loaded machine or a sanitizer; with cpp-httplib's
// defaults (8 threads, 5 s reads) the GET waited about 40 s.
TEST(MetricsHttpTest, AnswersWhileManyRequestsAreUnfinished) {
  MetricsRegistry r;
  r.AddCounter("pstrain_test_up_total", "Up.");
  const MetricsHttpOptions options;
  auto server = MetricsHttpServer::Start(&r, "127.0.0.1", 0, options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  Sockets unfinished;
  for (int i = 0; i < 64; ++i) {
    const int fd = ConnectAndSend(port, "GET /metr");
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    unfinished.fds.push_back(fd);
  }
  const absl::Duration bound = 4 * options.read_timeout;
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(absl::ToChronoMilliseconds(bound));
  client.set_read_timeout(absl::ToChronoMilliseconds(bound));
  client.set_write_timeout(absl::ToChronoMilliseconds(bound));
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("pstrain_test_up_total 0\n"), std::string::npos);
  for (int fd : unfinished.fds) EXPECT_TRUE(ClosedWithin(fd, bound)) << fd;
}

// The connection runner: at most max_threads tasks at once, then
// max_waiting wait, then the caller runs the task itself; Stop runs what
// waits and joins.
TEST(BoundedRunnerTest, BoundsThreadsThenRunsOnTheCaller) {
  BoundedRunner runner(/*max_threads=*/2, /*max_waiting=*/1);
  absl::Notification release;
  absl::Mutex mu;
  int running = 0, most = 0, done = 0;
  auto blocking = [&] {
    {
      absl::MutexLock lock(&mu);
      most = std::max(most, ++running);
    }
    release.WaitForNotificationWithTimeout(absl::Seconds(30));
    absl::MutexLock lock(&mu);
    --running;
    ++done;
  };
  for (int i = 0; i < 3; ++i) runner.Run(blocking);  // 2 run, 1 waits
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  runner.Run([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, caller);
  EXPECT_EQ(runner.threads(), 2);
  release.Notify();
  runner.Stop();
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(done, 3);
    EXPECT_LE(most, 2);
  }
  std::thread::id after_stop;
  runner.Run([&] { after_stop = std::this_thread::get_id(); });
  EXPECT_EQ(after_stop, caller);
}

}  // namespace
}  // namespace pstrain
