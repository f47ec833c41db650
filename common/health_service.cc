#include "common/health_service.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {

using grpc::health::v1::HealthCheckRequest;
using Status = HealthService::Response::ServingStatus;

std::string PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  // "ipv4:1.2.3.4:5" and "ipv6:[::1]:5" end in ":port"; "unix:/path" does
  // not (its only colon follows the scheme).
  if (colon == std::string::npos || colon == peer.find(':')) return peer;
  return peer.substr(0, colon);
}

namespace {
// A Watch refused before it starts: ends at once with `status`.
class Refused final : public grpc::ServerWriteReactor<HealthService::Response> {
 public:
  explicit Refused(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};
}  // namespace

// One Watch stream: sends the service's status now and after each change,
// one write at a time (a change during a write is sent when it completes;
// only the latest status is kept).
class HealthService::Watcher final
    : public grpc::ServerWriteReactor<HealthService::Response> {
 public:
  Watcher(HealthService* owner, std::string peer)
      : owner_(owner), peer_(std::move(peer)) {}

  const std::string& peer() const { return peer_; }

  // Queues `status` (and the end of the stream after it, with `finish`).
  void Update(Status status, bool finish) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    pending_ = status;
    if (finish) finish_pending_ = true;
    PumpLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      EndLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch ended"));
      return;
    }
    PumpLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    EndLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    owner_->Forget(this);
    delete this;
  }

 private:
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (pending_.has_value() && *pending_ != last_sent_) {
      response_.set_status(*pending_);
      last_sent_ = *pending_;
      pending_.reset();
      if (finish_pending_) {
        finished_ = true;
        StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
      } else {
        writing_ = true;
        StartWrite(&response_);
      }
      return;
    }
    pending_.reset();
    if (finish_pending_) EndLocked(grpc::Status::OK);
  }

  void EndLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  HealthService* const owner_;
  const std::string peer_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_pending_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Status> pending_ ABSL_GUARDED_BY(mu_);
  // Not a status gRPC defines: the first update is always sent.
  Status last_sent_ ABSL_GUARDED_BY(mu_) = static_cast<Status>(-1);
  Response response_ ABSL_GUARDED_BY(mu_);
};

HealthService::HealthService(HealthLimits limits) : limits_(limits) {
  serving_[""] = true;
}

HealthService::~HealthService() {
  // The server owns this service and destroys it after its calls are done;
  // wait (bounded) for any Watch whose OnDone has not yet run.
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!watchers_.empty()) {
    if (all_forgotten_.WaitWithDeadline(&mu_, deadline)) break;
  }
}

Status HealthService::StatusLocked(const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) return Response::SERVICE_UNKNOWN;
  return it->second ? Response::SERVING : Response::NOT_SERVING;
}

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  serving_[service] = serving;
  const Status status = serving ? Response::SERVING : Response::NOT_SERVING;
  for (auto& [watcher, name] : watchers_) {
    if (name == service) watcher->Update(status, /*finish=*/false);
  }
}

void HealthService::SetServingStatus(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  for (auto& [name, value] : serving_) value = serving;
  const Status status = serving ? Response::SERVING : Response::NOT_SERVING;
  for (auto& [watcher, name] : watchers_) {
    if (serving_.count(name) > 0) watcher->Update(status, /*finish=*/false);
  }
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, value] : serving_) value = false;
  for (auto& [watcher, name] : watchers_) {
    watcher->Update(Response::NOT_SERVING, /*finish=*/true);
  }
}

int HealthService::open_watches() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(watchers_.size());
}

void HealthService::Forget(Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  auto it = watchers_.find(watcher);
  if (it == watchers_.end()) return;
  auto peer = watches_by_peer_.find(watcher->peer());
  if (peer != watches_by_peer_.end() && --peer->second <= 0) {
    watches_by_peer_.erase(peer);
  }
  watchers_.erase(it);
  if (watchers_.empty()) all_forgotten_.SignalAll();
}

grpc::ServerUnaryReactor* HealthService::Check(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request,
    Response* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::MutexLock lock(&mu_);
  const Status status = StatusLocked(request->service());
  if (status == Response::SERVICE_UNKNOWN) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 "unknown service (the whole server is \"\")"));
  } else {
    response->set_status(status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthService::Response>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  const std::string peer = PeerHost(context->peer());
  absl::MutexLock lock(&mu_);
  if (shut_down_) {
    return new Refused(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                    "the server is shutting down"));
  }
  if (static_cast<int>(watchers_.size()) >= limits_.max_watches) {
    return new Refused(
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     absl::StrCat("too many health watches open (",
                                  limits_.max_watches, "); use Check")));
  }
  int& from_peer = watches_by_peer_[peer];
  if (from_peer >= limits_.max_watches_per_peer) {
    return new Refused(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("too many health watches from this address (",
                     limits_.max_watches_per_peer, "); use Check")));
  }
  ++from_peer;
  auto* watcher = new Watcher(this, peer);
  watchers_.emplace(watcher, request->service());
  watcher->Update(StatusLocked(request->service()), /*finish=*/false);
  return watcher;
}

}  // namespace pstrain
