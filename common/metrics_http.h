// Serves a MetricsRegistry as Prometheus text at GET /metrics (cpp-httplib
// from Debian). The server runs on its own thread from Start() until the
// object is destroyed.
#ifndef PSTRAIN_COMMON_METRICS_HTTP_H_
#define PSTRAIN_COMMON_METRICS_HTTP_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/metrics.h"

namespace httplib {
class Server;
}

namespace pstrain {

class MetricsHttpServer {
 public:
  // Listens on bind:port (port 0 picks a free one). `registry` must outlive
  // the server.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsRegistry* registry, const std::string& bind, int port);
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
