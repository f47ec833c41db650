#include "common/metrics_http.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsRegistry* registry, const std::string& bind, int port) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer);
  s->server_ = std::make_unique<httplib::Server>();
  s->server_->Get(
      "/metrics", [registry](const httplib::Request&, httplib::Response& res) {
        res.set_content(registry->Render(), "text/plain; version=0.0.4");
      });
  s->server_->Get("/healthz",
                  [](const httplib::Request&, httplib::Response& res) {
                    res.set_content("ok\n", "text/plain");
                  });
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(bind);
  } else if (s->server_->bind_to_port(bind, port)) {
    s->port_ = port;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", bind, ":", port));
  }
  httplib::Server* server = s->server_.get();
  s->thread_ = std::thread([server] { server->listen_after_bind(); });
  // stop() before the loop starts would be lost (and the destructor would
  // then wait forever): return only once the server is accepting.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!server->is_running() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!server->is_running()) {
    return absl::InternalError("metrics HTTP server did not start");
  }
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pstrain
