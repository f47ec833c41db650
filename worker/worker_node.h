// WorkerNode: one worker as an object, so a process (the ps_worker binary)
// or a test thread can run it. It registers with the coordinator, gets its
// rank and the job, then trains: pull, compute, push, report (or, in mode
// allreduce: serve its ring peer, get the ring from the coordinator,
// compute, all-reduce, apply the optimizer locally, report). Under
// training.on_failure: elastic in mode allreduce a node may host dead ranks:
// for each one the coordinator names, it runs another WorkerNode in a thread
// of its own (docs/failures-and-recovery.md, "Elastic workers").
#ifndef PSTRAIN_WORKER_WORKER_NODE_H_
#define PSTRAIN_WORKER_WORKER_NODE_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/node_flags.h"
#include "worker/model/local_step.h"

namespace pstrain {

struct WorkerNodeOptions {
  NodeOptions node;         // coordinator address, TLS, metrics port, timeouts
  int requested_rank = -1;  // -1: the coordinator assigns one
  // training.on_failure: elastic, mode allreduce: this node is a second ring
  // member that a live worker process runs for the dead `requested_rank`
  // (RegisterWorkerRequest.adopt). Set by the hosting node, not by flags.
  bool adopt = false;
  // With `adopt`: the hosting process's own rank
  // (RegisterWorkerRequest.adopter); -1: not sent.
  int adopter = -1;
  // Compute backend: auto, cpu or cuda; empty = the job's worker.device.
  std::string device;
  // CUDA device ordinal among the visible ones; -1 picks the local rank
  // modulo the visible devices (worker/compute/worker_device.h).
  int cuda_device = -1;
  // This worker's index among the workers on its host; -1 uses the rank.
  int local_rank = -1;
  // CUDA_VISIBLE_DEVICES as read in main (null: unset), for the log line.
  const char* cuda_visible_devices = nullptr;
  // libpstrain_cuda.so, the CUDA backend loaded on demand; empty: next to
  // the binary (worker/compute/cuda/cuda_plugin_loader.h). Must be a file.
  std::string cuda_library;
  absl::Duration report_interval = absl::Milliseconds(500);
  // Mode allreduce: where this worker's ring peer service listens, and the
  // host its left neighbour dials (with the bound port).
  std::string peer_bind = "127.0.0.1";
  int peer_port = 0;
  std::string advertise_host = "127.0.0.1";
  // Where the pstrain_worker_* metrics go (null: a private registry). One
  // registry per node; must outlive the node.
  MetricsRegistry* metrics = nullptr;
  bool progress_line = false;  // a "\r" progress line on stderr
  // Name the process's log lines after this node ("worker/3"): the log role
  // is process-wide, so nodes sharing a process (tests) leave it alone.
  bool set_log_role = true;
};

class WorkerNode {
 public:
  // Checks the options and TLS files; starts nothing.
  static absl::StatusOr<std::unique_ptr<WorkerNode>> Create(
      WorkerNodeOptions options);

  // Trains this worker's share of the job. OK when it is done (or when the
  // job was already over at registration: nothing to do); otherwise the
  // error, which the coordinator has also been told (it fails the job).
  // `stop` (thread-safe, polled every step) ends training early. Every wait
  // is bounded by the node's timeouts. Call once.
  absl::Status Run(const std::function<bool()>& stop);

  // After Run: the rank the coordinator gave (-1 before registration) and
  // the final weights (empty when training did not finish).
  int rank() const { return rank_; }
  const WorkerNodeOptions& options() const { return options_; }
  const TensorList& final_params() const { return final_params_; }

 private:
  WorkerNode() = default;

  WorkerNodeOptions options_;
  std::shared_ptr<grpc::ChannelCredentials> creds_;
  std::unique_ptr<MetricsRegistry> own_metrics_;  // when options had none
  int rank_ = -1;
  TensorList final_params_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WORKER_NODE_H_
