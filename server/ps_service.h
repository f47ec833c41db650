// gRPC face of a parameter-server shard: stream framing, byte accounting and
// the absl -> gRPC status mapping. The logic lives in Shard.
//
// Push is a raw callback method (a reactor per stream, no thread per call):
// it parses each frame itself, so an undecodable frame is an error rather
// than an end of stream. On a shard that sums on arrival (plain sync,
// Shard::sums_on_arrival()) every message's chunks are summed as the message
// arrives (Shard::BeginPush) and the push commits at the clean half-close;
// otherwise (async, backup workers) the push is kept and reaches the shard
// only after the clean half-close. Either way a stream that is cancelled,
// exceeds its deadline or carries an undecodable or invalid frame applies
// nothing, changes nothing observable and fails (CANCELLED /
// INVALID_ARGUMENT / the shard's status; server/shard.h says what stays of a
// half-summed push). Every stream is bounded by what the shard can
// legitimately receive (Shard::max_push_bytes(), max_push_messages()): a
// stream beyond it is RESOURCE_EXHAUSTED / INVALID_ARGUMENT at once, before
// the rest is read.
//
// Pull sends straight from the shard's pinned chunk buffers
// (Shard::PullWeights), one message of at most 4 MiB of chunks at a time:
// an fp32 payload is a gRPC slice pointing into the chunk buffer, holding a
// pin of its own until gRPC has sent it (common/chunk_frames.h), so the
// weights are copied only by the kernel.
//
// Session ids (docs/security.md): a pull and a push must carry their rank's
// current session id (PullRequest / PushHeader.session_id), else
// PERMISSION_DENIED and nothing changes. A push stream names its session in
// its metadata (x-pstrain-push-session, common/job_token.h), checked when
// the stream opens: a stream without a current session is refused before it
// takes an admission slot or any buffer (UNAUTHENTICATED without one,
// PERMISSION_DENIED for a stale or made-up one), its first header must match
// it, an admitted stream that sends nothing for
// options.first_message_timeout is cancelled, and a worker may have at most
// kMaxPushStreamsPerWorker streams open (RESOURCE_EXHAUSTED beyond). A pull
// with an id the shard does not know refreshes the table from the coordinator
// first (server/worker_sessions.h); a push is checked against the table as it
// is, as soon as its first message arrives. A pull with session_only does the
// checks (and the refresh) and ends OK with no message, waiting for no step:
// how a stand-in makes its new session known before its first push
// (PsClient::AnnounceSession).
//
// Rows of row-sparse tensors (docs/sparse.md; Shard::sparse()): PushRows
// is a client stream like Push, opened with the same push-session metadata
// (checked before admission, the first header must match it) and buffered
// whole (at most SparseShard::max_push_bytes() of ids and values, at most
// max_concurrent_buffered_pushes streams read at once, the others waiting
// holding no buffer) before the shard validates and applies or records it:
// a stream that fails, is cancelled or carries anything invalid changes
// nothing. PullRows checks the session like Pull, waits under the job's
// rule and answers the rows in request order, at most
// kMaxMessagePayloadBytes of ids and values per message. On a job without
// row-sparse tensors both are FAILED_PRECONDITION.
//
// Generations (training.on_failure: restart; docs/failures-and-recovery.md):
// the service serves one generation of the job at a time (0 until the first
// Rollback). A pull or push of another generation (PullRequest /
// PushHeader.generation) is ABORTED, naming both generations and the rollback
// step, and changes nothing. Rollback replaces the shard by one restored from a
// checkpoint (or built afresh, step 0) through the factory SetRollbackFactory
// gave; the old shard is closed, so pulls blocked on it return at once.
#ifndef PSTRAIN_SERVER_PS_SERVICE_H_
#define PSTRAIN_SERVER_PS_SERVICE_H_

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "common/call_pool.h"
#include "common/job_token.h"
#include "common/metrics.h"
#include "common/sharding.h"
#include "proto/pstrain.grpc.pb.h"
#include "server/shard.h"
#include "server/worker_sessions.h"

namespace pstrain {

// Channel arguments a parameter server's gRPC server is started with
// (ServerNode; ps_bench measures its memory variants against them).
std::vector<std::pair<std::string, int>> PsServerChannelArgs();

// Push streams one worker may have open (admitted or waiting) on a shard
// at once: a push uses up to network.push_streams (at most 8) of them.
inline constexpr int kMaxPushStreamsPerWorker = 8;

// Streams a pull may be split over at most (PullRequest.parts).
inline constexpr uint32_t kMaxPullParts = 8;

// Pulls handled at once on a shard, by default (PsServiceOptions::
// max_concurrent_pulls = 0): kPullThreadsPerWorker per worker of the job,
// at least kMinPullThreads. A worker has one pull per shard in flight; the
// rest is room for what may still wait on its behalf: a stand-in's pulls
// (or a restarted process's) while its predecessor's last pull waits out
// its deadline, a session-only announcement, a pull a client cancelled.
inline constexpr int kPullThreadsPerWorker = 4;
inline constexpr int kMinPullThreads = 16;

// PsServiceOptions::parse_pushes_in_place's default.
inline constexpr bool kParsePushesInPlace = false;

struct PsServiceOptions {
  absl::Duration barrier_timeout = absl::Minutes(5);  // longest blocked pull
  // Where to publish pstrain_server_* metrics; may be null. Must outlive the
  // service.
  MetricsRegistry* metrics = nullptr;
  // Push streams received at once on a shard that sums on arrival; more
  // wait, holding no buffer, until one ends (FIFO). Such a stream holds one
  // message (at most 4 MiB of chunks, plus gRPC's copy of its frame), so the
  // server holds at most about k * 8 MiB of pushes whatever the number of
  // workers. Admitted pushes never wait for other pushes, so any k >= 1 is
  // deadlock-free. 0: no limit.
  int max_concurrent_pushes = 2;
  // The same on a shard that buffers whole pushes (async, backup workers):
  // at most k * Shard::max_push_bytes() of pushes are held; with k = 1 the
  // memory does not depend on the number of workers.
  int max_concurrent_buffered_pushes = 1;
  // A push stream (waiting included) still open after this long is
  // cancelled, nothing applied, so a stalled client cannot hold a slot.
  absl::Duration push_timeout = absl::Minutes(2);
  // An admitted push stream whose first message has not arrived this long
  // after its admission is cancelled, nothing applied (a worker sends its
  // header at once).
  absl::Duration first_message_timeout = absl::Seconds(5);
  // Where Checkpoint writes files (may be null: CheckpointEnv::Default()).
  // Must outlive the service.
  CheckpointEnv* checkpoint_env = nullptr;
  // Pull calls handled at once, each on a thread of the service's pool
  // (common/call_pool.h) while it checks its session and waits for the
  // consistency rule; a pull beyond it is UNAVAILABLE at once ("pull
  // threads busy"), which clients retry with backoff. 0: from the job
  // (SetShard), kPullThreadsPerWorker per worker, at least kMinPullThreads.
  int max_concurrent_pulls = 0;
  // true: a shard that sums on arrival parses each push message where
  // gRPC's slices hold it (ParsePushFrame), and the reading thread gathers
  // every payload from them in the loop that takes its fingerprint and
  // largest |x| (GatherScanFingerprint), so the summer only sums. false
  // (kParsePushesInPlace): each message is parsed into a PushRequest (a
  // copy of every payload) and the summer scans it. Results are the same
  // bits either way; in place measured no faster (docs/performance.md,
  // "Parsing pushes in place: wired, measured, not the default"), so it is
  // an option, compared by ps_path_bench --compare_parse. Pushes to a shard
  // that buffers them always take the PushRequest.
  bool parse_pushes_in_place = kParsePushesInPlace;
  // Chunk payload per pull message (kPullMessagePayloadBytes; at most
  // kMaxMessagePayloadBytes is taken); a larger chunk travels alone. The
  // first message carries the head (version, min_clock) with its chunks.
  uint64_t pull_message_bytes = kPullMessagePayloadBytes;
};

class PushReactor;  // ps_service.cc: one push stream

// One push stream's buffers, reused across pushes (TakePushBuffers): the
// messages parsed into PushRequests, or, parsed in place, each of the two
// message slots' payloads gathered contiguous (strings keep their size).
struct PushBuffers {
  std::vector<pstrain::v1::PushRequest> messages;
  std::string gathered[2];
};
class PullReactor;  // ps_service.cc: one pull stream

// Thread-safe. Until SetShard() is called every RPC fails with UNAVAILABLE
// ("shard not initialised"), so the server can listen (and report health)
// before the job's shard map is known.
//
// Pull threads: a raw Pull runs its checks and its wait on a thread of the
// service's CallPool, never on gRPC's callback threads. The pool admits up
// to max_concurrent_pulls and refuses the rest (UNAVAILABLE, retried by
// clients) rather than queueing them: a queued pull could be the one whose
// worker must pull, compute and push before the pulls holding every thread
// can return (BSP, SSP at its bound), a deadlock until the barrier timeout.
// Admitted pulls never wait for one another, so no limit can deadlock; the
// default is sized so that a job's own pulls always fit. Every pull's wait
// is bounded (its call deadline, the barrier timeout) and ends at once when
// its call is cancelled (the client went away); CloseShard ends the
// waits at once and stops taking pulls, and the destructor joins the
// threads (after grpc::Server::Shutdown every pull has finished its call, so
// the join waits at most for threads leaving their tasks).
class ParameterServerService final
    : public pstrain::v1::ParameterServer::WithRawCallbackMethod_Pull<
          pstrain::v1::ParameterServer::WithRawCallbackMethod_Push<
              pstrain::v1::ParameterServer::Service>> {
 public:
  explicit ParameterServerService(PsServiceOptions options);
  // Joins the pull threads (see "Pull threads" above). The grpc::Server
  // serving this service must be shut down first.
  ~ParameterServerService() override;

  // `sessions` (not null) checks every pull's and push's session id.
  void SetShard(std::shared_ptr<Shard> shard,
                std::shared_ptr<WorkerSessions> sessions);
  // Enables the Checkpoint RPC: files of a job of `num_shards` shards go
  // under `root` (JobSpec.checkpoint_dir; never a path from the request).
  // Until called, Checkpoint is FAILED_PRECONDITION.
  void SetCheckpointRoot(std::string root, uint32_t num_shards);
  // The job's network.barrier_timeout_s (JobSpec), which replaces
  // options.barrier_timeout from then on; ignored unless > 0. Until every
  // worker has completed a step on the shard set by SetShard (its MinClock
  // still where it started), a barrier also waits for the workers' start-up:
  // it is bounded by `timeout` + `startup` (network.startup_timeout_s).
  void SetBarrierTimeout(absl::Duration timeout,
                         absl::Duration startup = absl::ZeroDuration());
  // Closes the shard (if any): every pull blocked on a barrier returns
  // UNAVAILABLE at once, so grpc::Server::Shutdown does not wait for them.
  // Pulls arriving from now on are UNAVAILABLE ("server shutting down")
  // without taking a thread.
  void CloseShard();
  // Builds the shard a Rollback installs: restored from `checkpoint` (a
  // step directory) at `step`, or the initial state when `checkpoint` is
  // empty. Until set, Rollback is FAILED_PRECONDITION.
  using RollbackFactory = std::function<absl::StatusOr<std::shared_ptr<Shard>>(
      const std::string& checkpoint, uint64_t step)>;
  void SetRollbackFactory(RollbackFactory factory);
  // The generation served from now on (a replacement server starts in the
  // job's current one, JobSpec.generation).
  void SetGeneration(uint64_t generation);
  uint64_t generation() const;
  // The coordinator this shard registered with (docs/security.md):
  //  - `key` (RegisterServerResponse.coordinator_key) must come with every
  //    Shutdown, Checkpoint and Rollback (metadata x-pstrain-coordinator,
  //    common/job_token.h), else PERMISSION_DENIED and nothing changes,
  //    token or not; until set, those calls are refused;
  //  - a Rollback may restore only `resume_from` (the job's resume point,
  //    JobSpec.resume_from; "" for none) or a step directory of the
  //    checkpoint root (SetCheckpointRoot, CheckpointDir(root, step)), or
  //    build the initial state (""); any other path, a path with "..", and
  //    a generation above `max_generation` (the most a job can reach:
  //    training.max_restarts) are INVALID_ARGUMENT.
  void SetCoordinator(std::string key, std::string resume_from,
                      uint64_t max_generation);
  // Runs once, on the first Shutdown RPC (from the coordinator at job end),
  // with its request (the reason, whether the job failed).
  void SetShutdownCallback(
      std::function<void(const pstrain::v1::ShutdownRequest&)> callback);

  uint64_t bytes_in() const { return bytes_in_.load(); }
  // Push streams being read now (holding an admission slot), and streams
  // waiting for one.
  struct PushAdmission {
    int active = 0;
    int waiting = 0;
  };
  PushAdmission push_admission() const;
  uint64_t bytes_out() const { return bytes_out_.load(); }
  // Pulls on pull threads now (busy), threads started, and the limit.
  CallPool::Counts pull_threads() const { return pulls_.counts(); }

  grpc::ServerReadReactor<grpc::ByteBuffer>* Push(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  // Pull as a raw callback method: the same RPC on the wire, but the
  // replies are pre-built zero-copy messages. Its checks and its wait for
  // the consistency rule block, so they run on a pull thread (see "Pull
  // threads" above), never on gRPC's callback threads; the messages are
  // then written by the reactor's reactions.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Pull(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::Status PushRows(
      grpc::ServerContext* context,
      grpc::ServerReader<pstrain::v1::PushRowsRequest>* reader,
      pstrain::v1::PushRowsResponse* response) override;
  grpc::Status PullRows(
      grpc::ServerContext* context, const pstrain::v1::PullRowsRequest* request,
      grpc::ServerWriter<pstrain::v1::PullRowsResponse>* writer) override;
  grpc::Status GetStats(grpc::ServerContext* context,
                        const pstrain::v1::ShardStatsRequest* request,
                        pstrain::v1::ShardStats* response) override;
  grpc::Status Shutdown(grpc::ServerContext* context,
                        const pstrain::v1::ShutdownRequest* request,
                        pstrain::v1::ShutdownResponse* response) override;
  // Waits (bounded by the call's deadline and barrier_timeout) for the shard
  // to reach cut `step` and writes its file (checkpoint/checkpoint.h,
  // SaveShardAt). Coordinator-only (common/job_token.h).
  grpc::Status Checkpoint(grpc::ServerContext* context,
                          const pstrain::v1::CheckpointRequest* request,
                          pstrain::v1::CheckpointResponse* response) override;
  // Coordinator-only (common/job_token.h). See "Generations" above.
  grpc::Status Rollback(grpc::ServerContext* context,
                        const pstrain::v1::RollbackRequest* request,
                        pstrain::v1::RollbackResponse* response) override;

 private:
  friend class PushReactor;
  friend class PullReactor;
  std::shared_ptr<Shard> shard() const;
  // options_.pull_message_bytes, at most kMaxMessagePayloadBytes.
  uint64_t pull_message_bytes() const {
    return std::min<uint64_t>(options_.pull_message_bytes,
                              kMaxMessagePayloadBytes);
  }
  // How long a pull may wait on `s`'s barrier (see SetBarrierTimeout).
  absl::Duration BarrierTimeout(const Shard& s) const;
  std::shared_ptr<WorkerSessions> sessions() const;
  // OK when the call carries the coordinator's key (SetCoordinator).
  absl::Status CheckCoordinator(const grpc::ServerContext& context,
                                absl::string_view what) const;
  // OK when a Rollback may restore `checkpoint` at `step` in `generation`.
  absl::Status CheckRollbackTarget(const pstrain::v1::RollbackRequest& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when `generation` is the one served, else ABORTED naming both.
  absl::Status CheckGeneration(uint64_t generation, const char* what) const;
  // OK when `session` is its worker's current one and of the generation
  // served (a push's check when its stream opens, and again when admitted).
  absl::Status CheckPushSession(const WorkerSessions& sessions,
                                const PushSession& session) const;
  // Open push streams per worker (at most kMaxPushStreamsPerWorker): false
  // when `worker` has that many already.
  bool TakePushStream(uint32_t worker);
  void ReleasePushStream(uint32_t worker);
  // Push admission (max_concurrent_pushes): true if `r` may read now,
  // false if it was queued.
  bool AdmitPush(PushReactor* r, bool on_arrival);
  // An admitted push ended: frees its slot and starts the next waiting one.
  void EndPush();
  // Removes a waiting push (cancelled); false if it is not waiting.
  bool UnqueuePush(PushReactor* r);
  // Message objects for one push stream, reused across pushes (their
  // strings keep their capacity); at most max(1, either concurrency limit)
  // sets are kept, each holding up to one push (Shard::max_push_bytes()),
  // or one message on a shard that sums on arrival.
  std::unique_ptr<PushBuffers> TakePushBuffers();
  void ReturnPushBuffers(std::unique_ptr<PushBuffers> buffers);

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
    Counter* refused_pulls;
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
  absl::Duration startup_timeout_ ABSL_GUARDED_BY(mu_);
  uint64_t start_min_clock_ ABSL_GUARDED_BY(mu_) = 0;  // shard_'s at SetShard
  std::function<void(const pstrain::v1::ShutdownRequest&)> on_shutdown_
      ABSL_GUARDED_BY(mu_);
  std::string checkpoint_root_ ABSL_GUARDED_BY(mu_);
  std::string coordinator_key_ ABSL_GUARDED_BY(mu_);
  std::string resume_from_ ABSL_GUARDED_BY(mu_);
  uint64_t max_generation_ ABSL_GUARDED_BY(mu_) = 0;
  RollbackFactory rollback_factory_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_step_ ABSL_GUARDED_BY(mu_) = 0;  // its rollback step
  bool rollback_idle_ ABSL_GUARDED_BY(mu_) = true;
  uint32_t num_shards_ ABSL_GUARDED_BY(mu_) = 0;
  // One Checkpoint call saves at a time; the last few saved files answer a
  // repeated call (the coordinator's deadline may pass while a file is
  // written, and the shard is then past the cut).
  bool checkpoint_idle_ ABSL_GUARDED_BY(mu_) = true;
  std::map<uint64_t, CheckpointFile> checkpoints_saved_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex push_mu_;
  int active_pushes_ ABSL_GUARDED_BY(push_mu_) = 0;
  std::deque<PushReactor*> waiting_pushes_ ABSL_GUARDED_BY(push_mu_);
  std::map<uint32_t, int> push_streams_ ABSL_GUARDED_BY(push_mu_);
  int active_row_pushes_ ABSL_GUARDED_BY(push_mu_) = 0;
  std::vector<std::unique_ptr<PushBuffers>> push_buffers_
      ABSL_GUARDED_BY(push_mu_);
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
  // Last: destroyed (its threads joined) before the members its pulls use.
  CallPool pulls_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PS_SERVICE_H_
