// Serves a MetricsRegistry as Prometheus text at GET /metrics (cpp-httplib
// from Debian). The server runs on its own thread from Start() until the
// object is destroyed.
//
// The endpoint is open (docs/security.md), so what a client can hold is
// bounded (MetricsHttpOptions): each connection is served on a thread of
// its own, at most max_threads at once, and every read and write of a
// connection ends at its timeout, so unfinished requests (a partial request
// line, then nothing) hold a thread for a read timeout and cannot starve
// GET /metrics for long. cpp-httplib 0.11 (Debian 12) has no per-request
// deadline: a client trickling a byte per read timeout keeps its thread.
#ifndef PSTRAIN_COMMON_METRICS_HTTP_H_
#define PSTRAIN_COMMON_METRICS_HTTP_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"

namespace httplib {
class Server;
}

namespace pstrain {

struct MetricsHttpOptions {
  // Connections served at once, each on a thread of its own (started when
  // first needed, kept until the server stops).
  int max_threads = 64;
  // Accepted connections that wait for a thread; past this the accepting
  // thread serves the next one itself and accepts nothing meanwhile
  // (further connections wait in the kernel's listen backlog).
  int max_waiting = 256;
  // Each read and each write on a connection (cpp-httplib's timeouts are
  // per socket operation, not per request).
  absl::Duration read_timeout = absl::Seconds(2);
  absl::Duration write_timeout = absl::Seconds(2);
  // How long a connection may wait before (each) request; whole seconds,
  // at least one.
  absl::Duration keep_alive_timeout = absl::Seconds(2);
  // Requests served on one connection.
  int keep_alive_max_count = 10;
  // Request body bytes (GET /metrics has none).
  size_t payload_max_length = 4096;
};

// Runs tasks (the server's connections) on up to `max_threads` threads,
// started when needed; up to `max_waiting` more tasks wait for one; past
// that Run runs the task on the caller's thread. Stop (or the destructor)
// runs the waiting tasks and joins the threads; Run afterwards runs on the
// caller. Thread-safe.
class BoundedRunner {
 public:
  BoundedRunner(int max_threads, int max_waiting);
  ~BoundedRunner();

  void Run(std::function<void()> task);
  void Stop();
  // Threads started so far.
  int threads() const;

 private:
  void Work();

  const size_t max_threads_, max_waiting_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;  // threads not running a task
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

class MetricsHttpServer {
 public:
  // Listens on bind:port (port 0 picks a free one). `registry` must outlive
  // the server.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsRegistry* registry, const std::string& bind, int port,
      const MetricsHttpOptions& options = MetricsHttpOptions());
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_METRICS_HTTP_H_
