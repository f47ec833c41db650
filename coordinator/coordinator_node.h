// CoordinatorNode: one coordinator, as a process (coordinator_main.cc) or as
// a thread of a test. It serves the Coordinator service (plus health and
// reflection) and optionally /metrics, waits for the job to end, collects the
// shards' statistics, shuts the servers down and writes the run record
// (metrics.csv as steps complete, summary.json at the end; common/run_record).
//
// Usage:
//   PS_ASSIGN_OR_RETURN(auto node, CoordinatorNode::Create(options));
//   // node->port() is listening now (and written to options.port_file).
//   absl::Status job = node->Run(stop);  // OK when the job succeeded
//
// Create() starts listening, so a test can hand port() to its servers and
// workers before calling Run(); destroying a node stops its server. Run() is
// called at most once, from one thread; port() is thread-safe.
#ifndef PSTRAIN_COORDINATOR_COORDINATOR_NODE_H_
#define PSTRAIN_COORDINATOR_COORDINATOR_NODE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/grpc_util.h"
#include "common/job_config.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "common/run_record.h"
#include "coordinator/checkpoint_orderer.h"
#include "coordinator/coordinator_service.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

struct CoordinatorNodeOptions {
  JobConfig config =
      DefaultJobConfig();  // the effective job (validated by Create)
  std::string bind = "127.0.0.1";
  int port = 0;           // 0 picks a free one
  std::string port_file;  // when set, the bound port is written there
  std::string out;        // metrics.csv and summary.json; "" writes none
  bool progress = true;   // a progress line about every second
  int metrics_port = -1;  // /metrics: -1 off, 0 any free port
  TlsFiles tls;           // resolved TLS files (plaintext when empty)
  // After the job, keep serving status and metrics until stop() (for a
  // Kubernetes Deployment, which would restart an exited pod).
  bool keep_serving_after_job = false;
  // How long the service's waiting RPCs may block.
  absl::Duration wait_cap = absl::Seconds(30);
  // A job that failed on a worker's or server's "stopped by signal" waits
  // this long for the coordinator's own stop before the record names that
  // process: Ctrl-C signals every process at once, and a loaded machine may
  // read the worker's report before the coordinator's signal handler runs.
  absl::Duration signal_stop_grace = absl::Seconds(1);
  // --resume: "" (a fresh job), "latest" or a directory
  // (coordinator/checkpoint_orderer.h, ResolveResume).
  std::string resume;
  // --termination_log: when set, the final summary is also written there
  // (TerminationMessage; Kubernetes shows /dev/termination-log as the
  // container's termination message). "" writes none.
  std::string termination_log;
};

class CoordinatorNode {
 public:
  // Validates the options, creates `out` (INVALID_ARGUMENT naming it when it
  // cannot) and metrics.csv, resolves and verifies the checkpoint to resume
  // from (errors start with "--resume"), and starts listening (UNAVAILABLE
  // naming the address when the port is taken).
  static absl::StatusOr<std::unique_ptr<CoordinatorNode>> Create(
      CoordinatorNodeOptions options);
  ~CoordinatorNode();

  int port() const { return port_; }

  // Serves until the job ends, the start-up timeout passes without every
  // server and worker registered, or `stop()` returns true (polled every
  // 200 ms); with checkpoint.every_* it orders checkpoints meanwhile (a
  // checkpoint that cannot be written fails the job) and, after a successful
  // job, waits up to the RPC timeout for the final one (mode allreduce: rank
  // 0 writes them, worker/allreduce/checkpointing.h). Then it shuts the
  // servers down and writes summary.json. Returns OK
  // when the job succeeded, else ABORTED with the first failure's
  // description (the summary's `message`).
  absl::Status Run(const std::function<bool()>& stop);

 private:
  CoordinatorNode() = default;
  // training.on_failure: restart: when every replacement is in, rolls every
  // shard back to the newest complete checkpoint (coordinator/recovery.h);
  // called from Run's loop. A shard that cannot is retried on the next call
  // (the recovery's deadline bounds it). `stop` cancels a call in flight.
  void MaybeRollBack(const std::function<bool()>& stop);

  CoordinatorNodeOptions options_;
  std::shared_ptr<grpc::ChannelCredentials> client_credentials_;
  MetricsRegistry metrics_;
  std::unique_ptr<MetricsHttpServer> metrics_server_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  // Checkpoints: the root ("" = none) and the orderer (null when off).
  std::string checkpoint_root_;
  std::unique_ptr<CheckpointOrderer> orderer_;
  pstrain::v1::JobSpec job_spec_;  // as published at start (ResolveResume)
  // A resumed job: the wall time of its earlier parts (their summary.json).
  double earlier_wall_s_ = 0;
};

// summary.json's content for a job.
RunSummary MakeRunSummary(const JobConfig& config, const JobOutcome& outcome,
                          const std::vector<pstrain::v1::ShardStats>& stats);

// The kubelet keeps at most this many bytes of a termination message.
inline constexpr size_t kMaxTerminationMessage = 4096;

// The summary as one line of compact JSON of at most kMaxTerminationMessage
// bytes: summary.json's fields; when too long, without the staleness
// histogram, then with `message` and the failure's message shortened
// (ending in "...").
std::string TerminationMessage(const RunSummary& summary);

// Writes `text` to `path` (truncating it; a Kubernetes termination log is a
// file the kubelet reads after the container exits). INVALID_ARGUMENT naming
// --termination_log and the path when it cannot be written.
absl::Status WriteTerminationMessage(const std::string& path,
                                     const std::string& text);

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_COORDINATOR_NODE_H_
