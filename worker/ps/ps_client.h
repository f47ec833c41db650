// Worker-side client of the parameter-server shards: pulls and pushes a
// whole model, every shard in parallel, as small asynchronous operations
// (start, then Wait), in the spirit of ps-lite's KVWorker.
//
// Tensors are addressed in ShardMap.tensors() order: `TensorList[i]` holds
// the flat fp32 values of tensor i (empty for a row-sparse tensor, whose
// rows travel by PullRows / PushRows instead: StartPullRows,
// StartPushRows; docs/sparse.md).
#ifndef PSTRAIN_WORKER_PS_PS_CLIENT_H_
#define PSTRAIN_WORKER_PS_PS_CLIENT_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/call_pool.h"
#include "common/sharding.h"
#include "google/protobuf/io/coded_stream.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/ps/tensor_gate.h"

namespace pstrain {

using TensorList = std::vector<std::vector<float>>;
// Read-only views of tensors shaped like a TensorList (e.g. slices of one
// flat pinned buffer that a compute backend downloads gradients into).
using TensorViews = std::vector<absl::Span<const float>>;
// Writable views, for a pull into memory the caller provides.
using MutableTensorViews = std::vector<absl::Span<float>>;

struct PsClientOptions {
  absl::Duration rpc_timeout = absl::Seconds(30);
  // The whole pull (barrier wait and transfer) ends within this: the job's
  // network.barrier_timeout_s, the same bound the servers apply.
  absl::Duration barrier_timeout = absl::Minutes(5);
  // Added to barrier_timeout until a pull shows every worker past the
  // min_clock of this client's first pull: the first barriers also wait for
  // the other workers' start-up (network.startup_timeout_s; servers alike).
  absl::Duration startup_timeout = absl::ZeroDuration();
  // Attempts per shard and operation, every one with its own timeouts,
  // 50 ms, 100 ms, ... apart. Pulls are retried on UNAVAILABLE (a barrier
  // wait that ran out is not retried); pushes also on DEADLINE_EXCEEDED and
  // CANCELLED: the server applies a push only after a clean half-close, and
  // answers a retry of a push it applied (lost reply) with the original
  // result instead of applying it twice.
  int max_attempts = 5;  // backoff 50, 100, 200, 400 ms between them
  // The session id the coordinator gave this worker's process when it
  // registered (RegisterWorkerResponse.session_id). Every pull and push
  // carries it; the shards refuse the rank's operations without its current
  // id (PERMISSION_DENIED, not retried).
  uint64_t session_id = 0;
  // The job's generation (JobSpec.generation; training.on_failure:
  // restart): every pull and push carries it, and a shard of another
  // generation refuses them (ABORTED).
  uint64_t generation = 0;
  // Dtype of pushed and pulled chunks (network.wire_dtype in JobSpec.config):
  // DTYPE_F32, DTYPE_BF16 or DTYPE_F16; must be the servers'. Gradients are
  // rounded to nearest even on the way out; pulled weights decode exactly to
  // fp32.
  pstrain::v1::DType wire_dtype = pstrain::v1::DTYPE_F32;
  // Streams each shard's push is split over, at once (network.push_streams;
  // plain sync only, the shards refuse parts otherwise): part p sends the
  // shard's chunks at positions p, p + n, ... of the order a single stream
  // would send them, on its own connection where Create was given one.
  // At most one part per chunk. 1..kMaxPushStreams.
  int push_streams = 1;
  // A shard's push of fewer bytes than this (its chunks on the wire) goes as
  // one stream whatever push_streams says. 0: always split (a job's
  // network.push_streams is always used).
  uint64_t split_min_bytes = 0;
  // Streams each shard's pull is split over, at once: part p carries the
  // shard's chunks at positions p, p + n, ... (PullRequest.part, parts),
  // on part connection p where Create was given one. Each part reads the
  // weights on its own; parts that read different versions (a step
  // committed between them, or a restore) are pulled again as one stream,
  // but a `gate`'s chunks are opened as they arrive, so split only where
  // every part reads the same step: plain sync (the config allows no
  // other). At most one part per chunk. 1..kMaxPushStreams.
  int pull_streams = 1;
  // Chunk payload per push message (a chunk larger than this goes alone),
  // 1 KiB..kMaxMessagePayloadBytes: kPushMessagePayloadBytes, so that a
  // server that sums on arrival sums one message while the next arrives
  // (real jobs: push x0.89-0.92 against 4 MiB; docs/performance-log.md, "Push
  // messages of 1 MiB").
  uint64_t push_message_bytes = kPushMessagePayloadBytes;
  // Each operation's shard tasks on threads the client keeps (at most
  // kOpThreadLimit at once); false: on threads started for the operation
  // and ended with it, as before those were kept (ps_path_bench
  // --compare_op_threads measures the two side by side).
  bool reuse_op_threads = true;
};

inline constexpr int kMaxPushStreams = 8;
// Reused threads a client keeps for its operations' shard tasks at most;
// tasks beyond (more shards or operations at once) run on threads of their
// own (TaskGroup), so nothing waits.
inline constexpr int kOpThreadLimit = 64;

// Some rows of one row-sparse tensor (TensorSpec.row_sparse): `values` holds
// ids.size() rows of the tensor's width, row after row (empty in a pull
// request).
struct RowSet {
  std::string tensor;
  std::vector<int64_t> ids;
  std::vector<float> values;
};

// What a pull read from one shard; stamps the next push to that shard.
struct ShardRead {
  uint64_t version = 0;
  uint64_t min_clock = 0;
};

// One in-flight pull or push over all shards, each shard's share on a
// thread of the client's (PsClient: reused, so a step starts no thread).
// Wait() waits for it and returns the first error (prefixed with the
// shard); it must be called before the operation is destroyed or its
// buffers are touched. Not thread-safe.
class PsOp {
 public:
  ~PsOp();
  absl::Status Wait();
  // Valid after a successful Wait(): of a pull, what it read from each
  // shard; of a push, each shard's version after it (PushResponse.version:
  // in async, the pushes the shard has applied; min_clock unset).
  const std::vector<ShardRead>& reads() const { return reads_; }

 private:
  friend class PsClient;
  explicit PsOp(CallPool* threads) : tasks_(threads) {}
  TaskGroup tasks_;  // one task per shard
  std::vector<absl::Status> statuses_;
  std::vector<ShardRead> reads_;
  TensorViews views_;          // a push's gradients
  MutableTensorViews pulled_;  // a pull's destination
  bool waited_ = false;
};

// Thread-safe for concurrent operations as long as their buffers differ.
// Channels are shared and must outlive nothing beyond this object.
class PsClient {
 public:
  // `channels[i]` reaches shard i. Validates the map (every chunk inside its
  // tensor, shard ids below channels.size()), options.push_streams and
  // options.pull_streams. `push_channels[i]`, if given, holds the larger of
  // push_streams and pull_streams, less one, more channels to shard i (each
  // its own connection, MakeChannel's `connection`) for parts 1, 2, ... of
  // its pushes and pulls; without them every part shares channels[i].
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const pstrain::v1::ShardMap& map,
      std::vector<std::shared_ptr<grpc::Channel>> channels,
      PsClientOptions options,
      std::vector<std::vector<std::shared_ptr<grpc::Channel>>> push_channels =
          {});
  // A channel to `address`; `connection` 0 for the first part of a shard's
  // pulls and pushes, 1, 2, ... for the other parts, each to be a
  // connection of its own (MakeChannel's `connection`).
  using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>(
      const std::string& address, int connection)>;
  // Create over channels from `make_channel` to every shard of
  // map.server_addresses(), options.push_streams per shard.
  static absl::StatusOr<std::unique_ptr<PsClient>> Connect(
      const pstrain::v1::ShardMap& map, const ChannelFactory& make_channel,
      PsClientOptions options);

  const pstrain::v1::ShardMap& shard_map() const { return map_; }
  // The shard-map indices of tensor `tensor`'s chunks (model order), in
  // offset order: the units of the gates of StartPull and StartPush.
  const std::vector<int>& tensor_chunks(int tensor) const {
    return tensor_chunks_[tensor];
  }
  int num_shards() const { return static_cast<int>(channels_.size()); }

  // Resizes *params to the model and fills it from every shard. `params`
  // must stay alive and untouched until Wait() returns.
  std::unique_ptr<PsOp> StartPull(uint32_t worker, uint64_t clock,
                                  TensorList* params);
  // The same into views shaped like the model (INVALID_ARGUMENT from Wait()
  // otherwise); the chunks are decoded straight into the memory they show,
  // which must stay alive and untouched until Wait() returns.
  std::unique_ptr<PsOp> StartPull(uint32_t worker, uint64_t clock,
                                  MutableTensorViews params);
  // The same, opening entry i of `arrived` (one per chunk of the shard map,
  // shard_map().chunks(i); reset by the caller, alive until Wait() returns)
  // as soon as chunk i is decoded, so the caller can compute with the first
  // chunks while the rest streams in. On failure Wait() reports it; chunks
  // may stay closed.
  std::unique_ptr<PsOp> StartPull(uint32_t worker, uint64_t clock,
                                  MutableTensorViews params,
                                  TensorGate* arrived);

  // Sends `grads` (shaped like the model) for `clock`, stamped with the reads
  // of the pull it was computed from. `grads` must outlive Wait().
  std::unique_ptr<PsOp> StartPush(uint32_t worker, uint64_t clock,
                                  uint64_t num_samples, const TensorList& grads,
                                  const std::vector<ShardRead>& reads);
  // The same from views: the memory they show must outlive Wait(); the
  // chunks are encoded straight from it.
  std::unique_ptr<PsOp> StartPush(uint32_t worker, uint64_t clock,
                                  uint64_t num_samples, TensorViews grads,
                                  const std::vector<ShardRead>& reads);
  // The same while backward still runs: each shard's stream opens at once
  // and sends its chunks last tensor first (each tensor's in offset order,
  // tensor_chunks()), each only once `ready` (one entry per chunk of the
  // shard map, alive until Wait() returns) has that chunk open; a message
  // is flushed before waiting, so the shard decodes what is ready while the
  // rest is computed. The values sent, and so the result, are those of the
  // plain push; only the timing differs. A chunk not opened within
  // network.rpc_timeout_s (or an aborted gate) fails the push.
  std::unique_ptr<PsOp> StartPush(uint32_t worker, uint64_t clock,
                                  uint64_t num_samples, TensorViews grads,
                                  const std::vector<ShardRead>& reads,
                                  TensorGate* ready);

  // Row-sparse tensors (docs/sparse.md). Pulls, at `clock`, the rows that
  // requests[i].ids name (duplicates allowed) of requests[i].tensor: each
  // shard (RowShard) gets the distinct ids it holds, every shard in
  // parallel (a shard holding none still answers, so the read waits for the
  // job's consistency rule everywhere, and op->reads() stamps the next
  // StartPushRows). (*out)[i] gets the distinct ids in order of first
  // appearance and their values. `out` must stay alive and untouched until
  // Wait() returns. INVALID_ARGUMENT from Wait() for a tensor that is not a
  // row-sparse tensor of the map; the shards' errors name the tensor.
  std::unique_ptr<PsOp> StartPullRows(uint32_t worker, uint64_t clock,
                                      const std::vector<RowSet>& requests,
                                      std::vector<RowSet>* out);
  // The row half of a step's push: sends each shard the rows of `grads` it
  // holds (ids unique per tensor; values rows of the tensor's width),
  // stamped with `reads` (the StartPullRows op's reads()), in parallel; a
  // shard holding none of them gets a push without rows, so a sync step
  // completes on every shard. Retried as StartPush is (a shard answers a
  // retry of an accepted push with its result). `grads` is copied.
  std::unique_ptr<PsOp> StartPushRows(uint32_t worker, uint64_t clock,
                                      uint64_t num_samples,
                                      const std::vector<RowSet>& grads,
                                      const std::vector<ShardRead>& reads);

  // Makes `worker`'s session id (options.session_id) known to every shard:
  // a pull with PullRequest.session_only to each, which reads no weights
  // and waits for no step, bounded by options.rpc_timeout per attempt and
  // retried as pulls are. For a stand-in (elastic sync) whose first push
  // must come before any pull of the rank could read: a step the rank's
  // dead process half pushed waits for that push. The first shard's error.
  absl::Status AnnounceSession(uint32_t worker);

  // Cancels every call in flight and every later one (CANCELLED, not
  // retried): for a worker that must stop now (SIGTERM, coordinator gone).
  // Thread-safe; irreversible.
  void Cancel();

  uint64_t bytes_pushed() const { return bytes_pushed_.load(); }
  uint64_t bytes_pulled() const { return bytes_pulled_.load(); }
  // The reused threads operations run on (started so far, busy now).
  CallPool::Counts op_threads() const { return op_threads_.counts(); }

  // How long a pull started now may wait on a barrier: barrier_timeout, plus
  // startup_timeout until every worker has completed a step (see options).
  absl::Duration BarrierTimeout() const;

 private:
  // A pull's read of the servers' min_clock (see BarrierTimeout).
  void NoteMinClock(uint64_t min_clock);
  // The pool a new operation's shard tasks run on: op_threads_, or none
  // (threads of their own) without options_.reuse_op_threads.
  CallPool* OpPool() const {
    return options_.reuse_op_threads ? &op_threads_ : nullptr;
  }

  PsClient(pstrain::v1::ShardMap map, PsClientOptions options)
      : map_(std::move(map)), options_(options) {}

  // Runs `attempt` up to options_.max_attempts times while it fails with a
  // retryable status (see PsClientOptions::max_attempts). Before a retry
  // after UNAVAILABLE it waits, bounded, for shard `shard`'s channel to
  // connect (AwaitChannel).
  absl::Status WithRetries(int shard, bool push,
                           const std::function<absl::Status()>& attempt) const;
  // Waits up to `bound` (polling Cancel() every 100 ms) for shard `shard`'s
  // channel to be READY, starting a connection attempt if it is idle. After
  // a failed connect (e.g. a TCP handshake cut short on a loaded machine)
  // gRPC backs off about a second, during which every call fails at once
  // with UNAVAILABLE; without this wait all attempts could fall into that
  // window.
  void AwaitChannel(int shard, absl::Duration bound) const;
  // `gate` (may be null): the pull's `arrived` or the push's `ready`, one
  // entry per shard-map chunk. A push sets `version` to the shard's answer's.
  absl::Status PullShard(int shard, uint32_t worker, uint64_t clock,
                         MutableTensorViews* params, ShardRead* read, PsOp* op,
                         TensorGate* gate);
  absl::Status PushShard(int shard, uint32_t worker, uint64_t clock,
                         uint64_t num_samples, const TensorViews& grads,
                         const ShardRead& read, TensorGate* gate,
                         uint64_t* version);
  // Part `part` of `parts` (PsClientOptions::pull_streams).
  absl::Status PullShardOnce(int shard, int part, int parts, uint32_t worker,
                             uint64_t clock, MutableTensorViews* params,
                             ShardRead* read, PsOp* op, TensorGate* gate);
  // The streams a shard's push or pull of `streams` is split over: at most
  // one per chunk, one below `min_bytes` (0: no minimum).
  int StreamParts(int shard, int streams, uint64_t min_bytes) const;
  // Part `part` of `parts` (PsClientOptions::push_streams); `response`
  // gets the shard's answer.
  absl::Status PushShardOnce(int shard, int part, int parts, uint32_t worker,
                             uint64_t clock, uint64_t num_samples,
                             const TensorViews& grads, const ShardRead& read,
                             TensorGate* gate,
                             pstrain::v1::PushResponse* response);
  // One PullResponse message, decoded straight from gRPC's buffers into
  // `params` (fp32: one copy, from the receive buffers to the destination).
  // `head`: the stream's first message (version and min_clock).
  absl::Status DecodePullMessage(int shard, grpc::ByteBuffer* buffer, bool head,
                                 ShardRead* read, MutableTensorViews* params,
                                 size_t* received, std::string* scratch,
                                 PsOp* op, TensorGate* gate);
  absl::Status DecodePulledChunk(int shard,
                                 google::protobuf::io::CodedInputStream* in,
                                 MutableTensorViews* params,
                                 std::string* scratch, int* chunk);

  // Tracks `context` while a call runs, for Cancel().
  class ActiveCall;

  // One shard's share of a row pull or push: for each RowSet of the call
  // (by index), the positions of its rows this shard holds.
  struct RowShare {
    size_t set = 0;
    std::vector<size_t> rows;
  };
  // The width of row-sparse tensor `tensor`, or INVALID_ARGUMENT.
  absl::StatusOr<int64_t> RowDim(const std::string& tensor) const;
  absl::Status PullRowsShard(int shard, uint32_t worker, uint64_t clock,
                             const std::vector<RowShare>& share,
                             std::vector<RowSet>* out, ShardRead* read);
  absl::Status PushRowsShard(int shard, uint32_t worker, uint64_t clock,
                             uint64_t num_samples,
                             const std::vector<RowSet>& grads,
                             const std::vector<RowShare>& share,
                             const ShardRead& read);

  const pstrain::v1::ShardMap map_;
  const PsClientOptions options_;
  mutable absl::Mutex cancel_mu_;
  bool cancelled_ ABSL_GUARDED_BY(cancel_mu_) = false;
  absl::flat_hash_set<grpc::ClientContext*> active_ ABSL_GUARDED_BY(cancel_mu_);
  // Push and Pull by name with raw messages (built and parsed here,
  // common/chunk_frames.h): the push's response and the pull's request are
  // the generated messages.
  using PushStub =
      grpc::TemplatedGenericStub<grpc::ByteBuffer, pstrain::v1::PushResponse>;
  using PullStub =
      grpc::TemplatedGenericStub<pstrain::v1::PullRequest, grpc::ByteBuffer>;
  // Per shard: the channel and its Push and Pull stubs.
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<PushStub>> push_stubs_;
  std::vector<std::unique_ptr<PullStub>> pull_stubs_;
  // Per shard: parts 1, 2, ... of a push (empty: on channels_).
  std::vector<std::vector<std::shared_ptr<grpc::Channel>>> part_channels_;
  std::vector<std::vector<std::unique_ptr<PushStub>>> part_stubs_;
  std::vector<std::vector<std::unique_ptr<PullStub>>> part_pull_stubs_;
  std::vector<std::vector<int>> shard_chunks_;   // shard -> indices into chunks
  std::vector<std::vector<int>> tensor_chunks_;  // tensor -> (offset order)
  std::vector<uint64_t> tensor_sizes_;
  // Row-sparse tensors: name -> width; and a stub per shard for their calls.
  absl::flat_hash_map<std::string, int64_t> row_dims_;
  std::vector<std::unique_ptr<pstrain::v1::ParameterServer::Stub>> row_stubs_;
  absl::flat_hash_map<std::string, int> tensor_index_;
  absl::flat_hash_map<std::pair<std::string, uint32_t>, int> chunk_index_;
  std::atomic<uint64_t> bytes_pushed_{0};
  std::atomic<uint64_t> bytes_pulled_{0};
  std::atomic<uint64_t> start_min_clock_{UINT64_MAX};  // first pull's
  std::atomic<bool> started_{false};  // a later pull read a greater one
  // The threads every operation's shard tasks run on, started on demand
  // and reused (a split push's other parts get threads of their own,
  // PushShard): a thread started per operation
  // cost about 0.07 ms of a step on this project's 2-core machine
  // (docs/performance-log.md, "Shard operations on reused threads"). Last, so
  // that it is destroyed (joining tasks still running) first.
  mutable CallPool op_threads_{kOpThreadLimit};
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PS_PS_CLIENT_H_
