// ServerNode: one parameter-server shard as an object, so a process (the
// ps_server binary) or a test thread can run it. It registers with the
// coordinator, builds its shard from the job's shard map, serves Push/Pull
// and ends with the job.
#ifndef PSTRAIN_SERVER_SERVER_NODE_H_
#define PSTRAIN_SERVER_SERVER_NODE_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/node_flags.h"
#include "server/ps_service.h"

namespace pstrain {

struct ServerNodeOptions {
  NodeOptions node;  // coordinator address, TLS, metrics port, timeouts
  std::string bind = "127.0.0.1";  // listen address
  int port = 0;                    // 0 picks a free port
  // Host name workers dial (with the bound port), e.g. "ps-0.ps".
  std::string advertise_host = "127.0.0.1";
  int requested_shard = -1;  // -1: the coordinator assigns one
  // The barrier timeout and the lease come from the job (JobSpec), so that
  // one network.barrier_timeout_s / network.lease_s holds for every node.
  // Where the pstrain_server_* metrics go (may be null: a private registry).
  // Must outlive the node.
  MetricsRegistry* metrics = nullptr;
  // Name the process's log lines after this node ("worker/3"): the log role
  // is process-wide, so nodes sharing a process (tests) leave it alone.
  bool set_log_role = true;
};

class ServerNode {
 public:
  // Checks the options, TLS files and advertised host (INVALID_ARGUMENT /
  // NOT_FOUND naming the problem) and starts listening (a busy port is an
  // error here: SO_REUSEPORT is off), with the file's
  // network.tcp_congestion_control on the listener (INVALID_ARGUMENT when
  // the kernel refuses it), NOT_SERVING until Run has a shard.
  static absl::StatusOr<std::unique_ptr<ServerNode>> Create(
      ServerNodeOptions options);

  // Registers, waits for every shard, builds its shard and serves
  // until the coordinator ends the job (OK: its Shutdown, or the finished
  // job status followed by Shutdown within min(rpc timeout, 5 s), so the
  // coordinator can collect the shard's statistics first; ABORTED "the job
  // failed: ..." when either says the job failed), `stop` returns true
  // (OK; polled every 100 ms, also while waiting at start-up) or the
  // coordinator stays silent for the job's network.lease_s (UNAVAILABLE) or
  // no longer knows the shard (FAILED_PRECONDITION: it was restarted).
  // While serving it heartbeats the coordinator (JobStatus naming its shard)
  // about every min(1 s, lease / 4). A job that is already over when it
  // registers: JobOverError (common/process.h; exit code 3). Start-up
  // waits are bounded by the start-up timeout. On every way out the shard is
  // closed first (blocked pulls return at once), then the gRPC server shuts
  // down within 0.5 s. Call once; `stop` must be thread-safe.
  absl::Status Run(const std::function<bool()>& stop);

  const ServerNodeOptions& options() const { return options_; }

 private:
  ServerNode() = default;

  ServerNodeOptions options_;
  std::shared_ptr<grpc::ServerCredentials> server_credentials_;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  std::unique_ptr<MetricsRegistry> own_metrics_;  // when options had none
  absl::Notification shutdown_;  // the coordinator's Shutdown arrived
  // Written before shutdown_ is notified, read after: the Shutdown's
  // request says the job failed (then Run returns an error: exit 1).
  bool shutdown_job_failed_ = false;
  std::string shutdown_reason_;
  // Created and listening from Create on (server_ is destroyed first).
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SERVER_NODE_H_
