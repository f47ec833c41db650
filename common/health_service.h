// The gRPC health service (grpc.health.v1.Health) with bounded Watch streams.
//
// gRPC's built-in health service keeps every Watch stream open for as long
// as its client wants, and the service is open without the job token (so
// probes need no credential): anyone who can connect could hold thousands
// of streams. This one answers the same protocol with limits on open
// Watches, per peer address and in total; a Watch over a limit ends at once
// with RESOURCE_EXHAUSTED. Check is unchanged: probes (Kubernetes' grpc
// probe, grpc_health_probe) ask Check with service "".
//
// StartGrpcServer installs one per server as the server's
// HealthCheckServiceInterface, so `server->GetHealthCheckService()` sets its
// status. The server owns it. Thread-safe.
#ifndef PSTRAIN_COMMON_HEALTH_SERVICE_H_
#define PSTRAIN_COMMON_HEALTH_SERVICE_H_

#include <grpcpp/health_check_service_interface.h>

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/health.grpc.pb.h"

namespace pstrain {

struct HealthLimits {
  int max_watches = 32;          // open Watch streams in total
  int max_watches_per_peer = 4;  // from one peer address (port ignored)
};

class HealthService final : public grpc::health::v1::Health::CallbackService,
                            public grpc::HealthCheckServiceInterface {
 public:
  using Response = grpc::health::v1::HealthCheckResponse;

  explicit HealthService(HealthLimits limits = {});
  ~HealthService() override;

  // HealthCheckServiceInterface. Service "" (the whole server) is known
  // from the start and SERVING; a name becomes known when first set.
  // Watchers of a service see every change. After Shutdown every service is
  // NOT_SERVING, changes are ignored, open Watches are sent NOT_SERVING and
  // ended (so a server shutting down without a deadline is not held open),
  // and new Watches end at once with UNAVAILABLE.
  void SetServingStatus(const std::string& service, bool serving) override;
  void SetServingStatus(bool serving) override;
  void Shutdown() override;

  // Watch streams open now.
  int open_watches() const;

  // grpc.health.v1.Health.
  grpc::ServerUnaryReactor* Check(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request,
      Response* response) override;
  grpc::ServerWriteReactor<Response>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class Watcher;
  friend class Watcher;

  Response::ServingStatus StatusLocked(const std::string& service) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(Watcher* watcher);

  const HealthLimits limits_;
  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  std::map<Watcher*, std::string> watchers_ ABSL_GUARDED_BY(mu_);  // -> service
  std::map<std::string, int> watches_by_peer_ ABSL_GUARDED_BY(mu_);
  absl::CondVar all_forgotten_;
};

// The peer's address without its port ("ipv4:10.0.0.1:5555" ->
// "ipv4:10.0.0.1"), what per-peer limits count by.
std::string PeerHost(const std::string& peer);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_HEALTH_SERVICE_H_
