#include "common/metrics_http.h"

#include <httplib.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pstrain {
namespace {

// cpp-httplib's queue of accepted connections, on a BoundedRunner.
class RunnerQueue final : public httplib::TaskQueue {
 public:
  RunnerQueue(int max_threads, int max_waiting)
      : runner_(max_threads, max_waiting) {}
  void enqueue(std::function<void()> fn) override {
    runner_.Run(std::move(fn));
  }
  void shutdown() override { runner_.Stop(); }

 private:
  BoundedRunner runner_;
};

// (seconds, microseconds) as cpp-httplib's setters take them.
std::pair<time_t, time_t> SecondsAndMicros(absl::Duration d) {
  const int64_t micros = std::max<int64_t>(1, absl::ToInt64Microseconds(d));
  return {static_cast<time_t>(micros / 1000000),
          static_cast<time_t>(micros % 1000000)};
}

}  // namespace

BoundedRunner::BoundedRunner(int max_threads, int max_waiting)
    : max_threads_(static_cast<size_t>(std::max(1, max_threads))),
      max_waiting_(static_cast<size_t>(std::max(0, max_waiting))) {}

BoundedRunner::~BoundedRunner() { Stop(); }

void BoundedRunner::Run(std::function<void()> task) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      if (tasks_.size() < idle_) {  // an idle thread takes it
        tasks_.push_back(std::move(task));
        return;
      }
      if (threads_.size() < max_threads_) {
        ++idle_;
        threads_.emplace_back([this] { Work(); });
        tasks_.push_back(std::move(task));
        return;
      }
      if (tasks_.size() - idle_ < max_waiting_) {
        tasks_.push_back(std::move(task));
        return;
      }
    }
  }
  task();  // every thread busy and the waiting line full, or stopped
}

void BoundedRunner::Stop() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  // The threads run what waits, then end (each task is bounded by the
  // server's timeouts).
  for (std::thread& t : threads) t.join();
}

int BoundedRunner::threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void BoundedRunner::Work() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !tasks_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (tasks_.empty()) return;  // stopping, nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
      --idle_;
    }
    task();
    absl::MutexLock lock(&mu_);
    ++idle_;
  }
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsRegistry* registry, const std::string& bind, int port,
    const MetricsHttpOptions& options) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer);
  s->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *s->server_;
  server.new_task_queue = [options] {
    return new RunnerQueue(options.max_threads, options.max_waiting);
  };
  const auto [read_s, read_us] = SecondsAndMicros(options.read_timeout);
  server.set_read_timeout(read_s, read_us);
  const auto [write_s, write_us] = SecondsAndMicros(options.write_timeout);
  server.set_write_timeout(write_s, write_us);
  server.set_keep_alive_timeout(static_cast<time_t>(std::max<int64_t>(
      1, absl::ToInt64Seconds(
             absl::Ceil(options.keep_alive_timeout, absl::Seconds(1))))));
  server.set_keep_alive_max_count(
      static_cast<size_t>(std::max(1, options.keep_alive_max_count)));
  server.set_payload_max_length(options.payload_max_length);
  server.Get("/metrics",
             [registry](const httplib::Request&, httplib::Response& res) {
               res.set_content(registry->Render(), "text/plain; version=0.0.4");
             });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  if (port == 0) {
    s->port_ = server.bind_to_any_port(bind);
  } else if (server.bind_to_port(bind, port)) {
    s->port_ = port;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", bind, ":", port));
  }
  httplib::Server* listening = s->server_.get();
  s->thread_ = std::thread([listening] { listening->listen_after_bind(); });
  // stop() before the loop starts would be lost (and the destructor would
  // then wait forever): return only once the server is accepting.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!listening->is_running() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!listening->is_running()) {
    return absl::InternalError("metrics HTTP server did not start");
  }
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pstrain
