// The coordinator: registration of servers and workers, the shard map, the
// job's lifecycle, and aggregation of worker metrics into metrics.csv and
// summary.json.
//
// Lifecycle: servers register (RegisterServer) and fetch the JobSpec once all
// K have registered (GetJob waits); each builds its shard and calls
// ServerReady. Workers register (RegisterWorker waits until every shard is
// ready) and get a rank and the JobSpec. Workers Report per-step metrics and
// a final report; when all N have finished (or one failed) the job is over:
// WaitForEnd() returns, and the binary collects shard statistics, writes the
// summary and shuts the servers down.
//
// Mode allreduce has no servers: workers register with the address of their
// ring peer service, then GetPeers (blocking until every worker has
// registered) gives each the ring in rank order, plus rank 0's NCCL unique id
// with allreduce.backend nccl. Workers report their ring byte counters as
// bytes_pushed (sent) and bytes_pulled (received).
#ifndef PSTRAIN_COORDINATOR_COORDINATOR_H_
#define PSTRAIN_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "common/metrics.h"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {

struct CoordinatorOptions {
  JobConfig config;         // effective config (after flag overrides)
  std::string metrics_csv;  // path, or empty for none
  absl::Duration wait_cap = absl::Seconds(30);  // longest a waiting RPC blocks
  bool progress = true;  // log a progress line about every second
  // Where to publish pstrain_coordinator_* metrics; may be null. Must
  // outlive the service.
  MetricsRegistry* metrics = nullptr;
};

// What the job produced, for summary.json.
struct JobOutcome {
  bool failed = false;
  std::string message;
  double wall_s = 0;
  uint64_t steps = 0;  // steps completed by every worker
  uint64_t samples = 0;
  double final_loss = 0;  // training loss of the last complete step
  bool has_accuracy = false;
  double final_accuracy = 0;  // final evaluation (summed counts / total)
  double final_eval_loss = 0;
  uint64_t bytes_pushed = 0;  // all workers, payload messages
  uint64_t bytes_pulled = 0;
};

// Thread-safe gRPC service.
class CoordinatorService final : public pstrain::v1::Coordinator::Service {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorService>> Create(
      CoordinatorOptions options);
  ~CoordinatorService() override;

  grpc::Status RegisterServer(
      grpc::ServerContext* context,
      const pstrain::v1::RegisterServerRequest* request,
      pstrain::v1::RegisterServerResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context,
                      const pstrain::v1::GetJobRequest* request,
                      pstrain::v1::JobSpec* response) override;
  grpc::Status ServerReady(grpc::ServerContext* context,
                           const pstrain::v1::ServerReadyRequest* request,
                           pstrain::v1::ServerReadyResponse* response) override;
  grpc::Status RegisterWorker(
      grpc::ServerContext* context,
      const pstrain::v1::RegisterWorkerRequest* request,
      pstrain::v1::RegisterWorkerResponse* response) override;
  grpc::Status Report(grpc::ServerContext* context,
                      const pstrain::v1::ReportRequest* request,
                      pstrain::v1::ReportResponse* response) override;
  grpc::Status JobStatus(grpc::ServerContext* context,
                         const pstrain::v1::JobStatusRequest* request,
                         pstrain::v1::JobStatusResponse* response) override;
  grpc::Status GetPeers(grpc::ServerContext* context,
                        const pstrain::v1::GetPeersRequest* request,
                        pstrain::v1::GetPeersResponse* response) override;

  // Blocks until the job ends or `deadline`; true if it ended.
  bool WaitForEnd(absl::Time deadline);
  // Marks the job failed (e.g. start-up timeout, signal). Idempotent.
  void Fail(const std::string& reason);
  JobOutcome Outcome() const;
  // True once every worker has registered.
  bool TrainingStarted() const;
  // Server addresses by shard (complete once all servers registered).
  std::vector<std::string> ServerAddresses() const;

 private:
  struct StepAgg {
    uint32_t reports = 0;
    double loss_sum = 0;  // sample-weighted
    uint64_t samples = 0;
    double compute_s = 0, pull_s = 0, push_s = 0;
    double end_unix_s = 0;
    uint64_t eval_correct = 0, eval_total = 0;
    double eval_loss_sum = 0;
  };
  explicit CoordinatorService(CoordinatorOptions options,
                              pstrain::v1::JobSpec job);
  void EmitCompleteStepsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllServersRegisteredLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllServersReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every ring peer registered (and the NCCL id published when needed), or
  // the job ended.
  bool PeersKnownLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Metrics {
    Gauge* steps;
    Gauge* loss;
    Gauge* samples_per_second;
    Gauge* eval_accuracy;
    Gauge* live_workers;
    Gauge* registered_servers;
    Counter* samples;
  };
  void UpdateLiveWorkersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  const uint32_t num_workers_;
  std::unique_ptr<Metrics> metrics_;
  mutable absl::Mutex mu_;
  pstrain::v1::JobSpec job_ ABSL_GUARDED_BY(mu_);  // shard map filled at start
  std::vector<std::string> server_addresses_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> server_ready_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> rank_taken_ ABSL_GUARDED_BY(mu_);
  // Mode allreduce: ring peer address by rank, rank 0's NCCL unique id.
  std::vector<std::string> peer_addresses_ ABSL_GUARDED_BY(mu_);
  std::string nccl_unique_id_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> worker_done_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> bytes_pushed_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> bytes_pulled_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, StepAgg> steps_ ABSL_GUARDED_BY(mu_);
  uint64_t next_row_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time train_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  JobOutcome outcome_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  FILE* csv_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// The JobSpec the coordinator publishes for `config` (tensors from the model,
// shard map over config.servers with no addresses yet, worker config YAML).
// Mode allreduce: no servers (num_servers 0, config.servers ignored) and a
// shard map that only lists the tensors.
absl::StatusOr<pstrain::v1::JobSpec> MakeJobSpec(const JobConfig& config);

// Writes summary.json for `outcome` and the servers' statistics.
absl::Status WriteSummaryJson(
    const std::string& path, const JobConfig& config, const JobOutcome& outcome,
    const std::vector<pstrain::v1::ShardStats>& stats);

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_COORDINATOR_H_
