// gRPC face of a parameter-server shard: stream framing, byte accounting and
// the absl -> gRPC status mapping. The logic lives in Shard.
//
// Push is a raw callback method (a reactor per stream, no thread per call):
// it parses each frame itself, so an undecodable frame is an error rather
// than an end of stream. A push reaches the shard only after a clean
// half-close; a stream that is cancelled, exceeds its deadline or carries an
// undecodable frame changes nothing and fails (CANCELLED /
// INVALID_ARGUMENT). Every stream's buffer is bounded by what the shard can
// legitimately receive (Shard::max_push_bytes(), max_push_messages()): a
// stream beyond it is RESOURCE_EXHAUSTED / INVALID_ARGUMENT at once, before
// the rest is read.
//
// Pull serialises straight from the shard's pinned chunk buffers
// (Shard::PullWeights), one message of at most 4 MiB of chunks at a time.
//
// Session ids (README "Security"): a pull and a push must carry their rank's
// current session id (PullRequest / PushHeader.session_id), else
// PERMISSION_DENIED and nothing changes. A pull with an id the shard does
// not know refreshes the table from the coordinator first
// (server/worker_sessions.h); a push is checked against the table as it is,
// as soon as its first message arrives.
#ifndef PSTRAIN_SERVER_PS_SERVICE_H_
#define PSTRAIN_SERVER_PS_SERVICE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "proto/pstrain.grpc.pb.h"
#include "server/checkpoint.h"
#include "server/checkpoint_env.h"
#include "server/shard.h"
#include "server/worker_sessions.h"

namespace pstrain {

struct PsServiceOptions {
  absl::Duration barrier_timeout = absl::Minutes(5);  // longest blocked pull
  // Where to publish pstrain_server_* metrics; may be null. Must outlive the
  // service.
  MetricsRegistry* metrics = nullptr;
  // Push streams received at once; more wait, holding no buffer, until one
  // ends (FIFO). The shard buffers at most k * Shard::max_push_bytes() of
  // pushes, whatever the number of workers; with k = 1 a sync server's
  // memory does not depend on the number of workers at all. Admitted pushes
  // never wait for other pushes, so any k >= 1 is deadlock-free. 0: no
  // limit.
  int max_concurrent_pushes = 1;
  // A push stream (waiting included) still open after this long is
  // cancelled, nothing applied, so a stalled client cannot hold a slot.
  absl::Duration push_timeout = absl::Minutes(2);
  // Where Checkpoint writes files (may be null: CheckpointEnv::Default()).
  // Must outlive the service.
  CheckpointEnv* checkpoint_env = nullptr;
};

class PushReactor;  // ps_service.cc: one push stream

// Thread-safe. Until SetShard() is called every RPC fails with UNAVAILABLE
// ("shard not initialised"), so the server can listen (and report health)
// before the job's shard map is known.
class ParameterServerService final
    : public pstrain::v1::ParameterServer::WithRawCallbackMethod_Push<
          pstrain::v1::ParameterServer::Service> {
 public:
  explicit ParameterServerService(PsServiceOptions options);

  // `sessions` (not null) checks every pull's and push's session id.
  void SetShard(std::shared_ptr<Shard> shard,
                std::shared_ptr<WorkerSessions> sessions);
  // Enables the Checkpoint RPC: files of a job of `num_shards` shards go
  // under `root` (JobSpec.checkpoint_dir; never a path from the request).
  // Until called, Checkpoint is FAILED_PRECONDITION.
  void SetCheckpointRoot(std::string root, uint32_t num_shards);
  // The job's network.barrier_timeout_s (JobSpec), which replaces
  // options.barrier_timeout from then on; ignored unless > 0.
  void SetBarrierTimeout(absl::Duration timeout);
  // Closes the shard (if any): every pull blocked on a barrier returns
  // UNAVAILABLE at once, so grpc::Server::Shutdown does not wait for them.
  void CloseShard();
  // Runs once, on the first Shutdown RPC (from the coordinator at job end).
  void SetShutdownCallback(std::function<void(const std::string&)> callback);

  uint64_t bytes_in() const { return bytes_in_.load(); }
  uint64_t bytes_out() const { return bytes_out_.load(); }

  grpc::ServerReadReactor<grpc::ByteBuffer>* Push(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  grpc::Status Pull(
      grpc::ServerContext* context, const pstrain::v1::PullRequest* request,
      grpc::ServerWriter<pstrain::v1::PullResponse>* writer) override;
  grpc::Status GetStats(grpc::ServerContext* context,
                        const pstrain::v1::ShardStatsRequest* request,
                        pstrain::v1::ShardStats* response) override;
  grpc::Status Shutdown(grpc::ServerContext* context,
                        const pstrain::v1::ShutdownRequest* request,
                        pstrain::v1::ShutdownResponse* response) override;
  // Waits (bounded by the call's deadline and barrier_timeout) for the shard
  // to reach cut `step` and writes its file (server/checkpoint.h,
  // SaveShardAt). Coordinator-only (common/job_token.h).
  grpc::Status Checkpoint(grpc::ServerContext* context,
                          const pstrain::v1::CheckpointRequest* request,
                          pstrain::v1::CheckpointResponse* response) override;

 private:
  friend class PushReactor;
  std::shared_ptr<Shard> shard() const;
  std::shared_ptr<WorkerSessions> sessions() const;
  // Push admission (max_concurrent_pushes): true if `r` may read now,
  // false if it was queued.
  bool AdmitPush(PushReactor* r);
  // An admitted push ended: frees its slot and starts the next waiting one.
  void EndPush();
  // Removes a waiting push (cancelled); false if it is not waiting.
  bool UnqueuePush(PushReactor* r);

  // Null when options.metrics is null.
  struct Metrics {
    Histogram* push_seconds;
    Histogram* pull_seconds;
    Histogram* barrier_wait_seconds;
    Histogram* apply_seconds;
    Histogram* staleness;
    Counter* pushes;
    Counter* rejected;
    Counter* dropped;
    Gauge* version;
    Gauge* live_workers;
  };
  void RecordPush(absl::Duration took, const absl::StatusOr<PushResult>& r);

  const PsServiceOptions options_;
  std::unique_ptr<Metrics> metrics_;
  mutable absl::Mutex mu_;
  std::shared_ptr<Shard> shard_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<WorkerSessions> sessions_ ABSL_GUARDED_BY(mu_);
  absl::Duration barrier_timeout_ ABSL_GUARDED_BY(mu_);
  std::function<void(const std::string&)> on_shutdown_ ABSL_GUARDED_BY(mu_);
  std::string checkpoint_root_ ABSL_GUARDED_BY(mu_);
  uint32_t num_shards_ ABSL_GUARDED_BY(mu_) = 0;
  // One Checkpoint call saves at a time; the last few saved files answer a
  // repeated call (the coordinator's deadline may pass while a file is
  // written, and the shard is then past the cut).
  bool checkpoint_idle_ ABSL_GUARDED_BY(mu_) = true;
  std::map<uint64_t, CheckpointFile> checkpoints_saved_ ABSL_GUARDED_BY(mu_);
  absl::Mutex push_mu_;
  int active_pushes_ ABSL_GUARDED_BY(push_mu_) = 0;
  std::deque<PushReactor*> waiting_pushes_ ABSL_GUARDED_BY(push_mu_);
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PS_SERVICE_H_
