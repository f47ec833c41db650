// One parameter-server shard: the weights and optimizer state of the chunks
// the shard map assigns to it, and the consistency rule that orders pushes
// and pulls.
//
// Consistency (ShardOptions.rule, a ConsistencyRule from
// server/consistency_rule.h; the shard keeps all state, the rule decides):
//  * Bsp (MODE_SYNC). Step t completes when every worker has pushed clock t.
//    The gradients are averaged weighted by each push's sample count, the
//    optimizer runs once and the version becomes t + 1. A pull for clock c
//    blocks until version >= c, so it sees exactly the weights after step c-1.
//    The sum is exact and independent of arrival order (below).
//  * BspWithBackups, b = backup_workers (Chen et al. 2016, "Revisiting
//    Distributed Synchronous SGD"). Step t completes as
//    soon as the first N - b pushes of clock t arrived, averaged as above
//    over those pushes only. A push whose clock is below the version (its
//    step completed without it) is late: it is accepted with dropped = true,
//    advances the worker's clock and changes nothing else. Pull gating is
//    unchanged (version >= c), so a late worker goes on with the latest
//    weights, which may be newer than those after step c-1.
//  * Ssp (MODE_ASYNC, staleness s). Each push is applied on arrival and bumps
//    the version. A pull at clock c blocks until the slowest worker has
//    pushed at least c - s clocks (never when s < 0, "inf"). A worker's own
//    pushes are applied before its Push returns, so it reads its own writes.
//    Two optional rules change how a push is applied:
//    - staleness_aware_lr (Zhang et al. 2016, "Staleness-aware Async-SGD"):
//      the push runs the optimizer with learning rate lr / max(tau, 1), tau
//      its staleness in clocks (below). The learning rate is scaled, not the
//      gradient, so the rule also holds for Adam and AdaGrad.
//    - dc_lambda = lambda > 0 (DC-ASGD, Zheng et al. 2017): the gradient of
//      worker w is compensated for the updates applied since w read,
//      g' = g + lambda * g * g * (w_now - w_read), element-wise, where w_read
//      is what w's last successful Pull from this shard returned (no
//      compensation before w's first pull). The rule needs that copy per
//      worker, so with lambda > 0 (only) the shard keeps num_workers *
//      num_elements() extra floats, and every pull copies the shard once
//      under the mutex.
//    - lr_per_worker (training.async_lr_per_push: scaled): every push runs
//      with learning rate lr / num_workers (times the staleness-aware factor
//      when both are on), so N pushes of B samples move the weights as far
//      as one sync step of N x B samples: sync's learning rate per sample.
//
// Every push carries the clock it completes and the (version, min_clock) of
// the pull it computed from; staleness = clock - min_clock is recorded per
// push. In async a pull's min_clock is the slowest worker's clock, so the
// staleness is at most s. In sync it is the number of completed steps capped
// at the reader's clock (the steps the read weights include), so staleness
// is 0 for every push, dropped late pushes included: stragglers left behind
// by backup workers do not make the others' gradients look stale.
//
// Sync sum (bounded memory, order-independent). One accumulator for the whole
// shard, 8 bytes per element, whatever the number of workers: each push adds
// x = num_samples * g (in double) as a 64-bit fixed-point integer, exact and
// therefore independent of arrival order. Chunk k's step uses the scale
// 2^L(k), L = E - (62 - ceil(log2 N)), so N terms below 2^E never overflow;
// E starts at 32 and after each step becomes ceil(log2 max|x|) + 12 (the
// last step's largest term with 12 bits of headroom), so the largest terms
// keep >= 46 bits. A term with |x| >= 2^E (a gradient more than 4096 times
// larger than in the step before, or above 2^32 in the first step) is clipped
// to the largest representable value and counted (clipped_elements()). The
// applied gradient is float(sum * 2^L / sum of num_samples). Reruns are
// bit-identical. With one worker a chunk's term of a step (nothing of it
// clipped, all of it within the fast conversions' range, the usual case) is
// its only one: it is kept as the pushed floats in the chunk's accumulator
// space (4 of its 8 bytes per element) and applied straight from them, with
// the same double operations as the way through the fixed point, so the
// same numbers, with two passes over the accumulator fewer
// (ShardOptions.hold_first_term).
//
// Pushes are all-or-nothing: a push is fully validated (worker, tensors, chunk
// ranges, ownership, dtype, shape, finiteness, completeness, clock) before any
// observable state changes, so a rejected push leaves weights, version,
// clocks, statistics and clipped_elements() untouched.
// Pushes are idempotent: the shard remembers each worker's last two accepted
// pushes (clock, a hash of its header and payload, and its result); the same
// push again (a client retry after a lost reply) gets the original result and
// changes nothing. A different push for an accepted clock is
// FAILED_PRECONDITION. The hash combines one hash per chunk independently of
// the order the chunks arrive in. The session id is not part of the hash:
// with training.on_failure: elastic in mode sync, a live worker standing in
// for a dead rank (new session) re-pushes the rank's last step, computed from
// the same weights and data, so the payload is identical; the dead process
// may have pushed that step (and even the next one, on some shards), pushed
// it half-way (its summed chunks are the rank's contribution, below) or not
// at all, so each shard either answers the step's original result or
// accepts it: no step is summed twice or lost (coordinator/elastic.h).
// In async, a process that joined a rank again (new session) starts where
// the slowest live worker is, which the coordinator knows from reports; the
// rank's dead process may have pushed further before it stopped (its last
// pushes not reported yet, or still in flight). A push of such a clock from
// the new session (below the rank's clock, whose last accepted push came
// from another session) is acknowledged without applying anything: the dead
// process's push of that clock stands, as in the other shards it reached.
//
// Summing on arrival (plain Bsp, i.e. sync without backup workers:
// sums_on_arrival()). A push stream (BeginPush, IncomingPush) adds each
// chunk to the step's accumulator as soon as it arrives and keeps no
// payload, so receiving and summing overlap, several workers' streams are
// summed at once (one mutex per chunk; the sum is order-independent) and the
// shard holds no push in memory. Each summed chunk is recorded as worker w's
// contribution to the step (the chunk's hash, its largest |x| and clipped
// count); a push commits (clock, pending count, clipped_elements(), the
// exponent's maximum) only when it finishes complete and valid. A stream
// that fails half-way cannot be subtracted again (its payload is gone), so
// its summed chunks stay in the accumulator as w's uncommitted contribution
// to the open step: nothing observable changes (weights, version, clocks,
// statistics, clipped_elements(), snapshots), and the step cannot complete
// without w's push of that clock anyway. When w's push of that clock comes
// again (the client retries with the same gradients, or an elastic stand-in
// re-pushes it), a chunk whose bytes hash as the recorded contribution is
// not added again, the others are, so the step's sum is bit for bit that of
// one clean push; a chunk with different bytes is FAILED_PRECONDITION
// naming it (the contribution cannot be replaced). Two streams of the same
// push at once (a retry while the first still runs) share the contributions
// the same way. A step's contributions are discarded with the step by
// Restore (and by a rollback, which replaces the shard). With backup workers
// a step may complete without a worker's push, and in async each push runs
// the optimizer (not undoable): there the stream is buffered whole and
// handed to Push after a clean half-close (the service's buffered path).
//
// Parts (plain Bsp only: sums_on_arrival()). A push may be split over
// several streams at once (PushHeader.parts > 1, network.push_streams),
// each with some of the shard's chunks and the same header otherwise, so
// one worker's push uses several connections. Each part's chunks are
// summed as above; a part that finishes while some chunk of the push has
// no contribution of the worker yet answers `pending` (and how many are
// missing) and commits nothing; the part that finishes with every chunk
// summed commits the push, with the fingerprint a single stream of the
// same chunks would have (from the contributions' hashes) and its header
// (parts with another num_samples make it FAILED_PRECONDITION: summed
// chunks cannot be replaced, as above).
// A part that finishes after the commit, or comes again (a retry), is a
// retry of the accepted push when its header and each of its chunks' bytes
// are those of the push (the accepted push's per-chunk hashes are kept):
// it gets the push's result and changes nothing. A part of a buffered push
// (async, backup workers) is INVALID_ARGUMENT.
//
// Applying on arrival (plain Bsp with ShardOptions.early_apply, the
// default). A chunk is final for the open step t as soon as every worker's
// contribution to it is summed: nothing can be added to it any more (a retry
// or a stand-in's re-push of the same bytes skips it, other bytes are
// FAILED_PRECONDITION). The stream that sums the last contribution hands the
// chunk to the shard's applier thread, which turns its sum into the gradient
// and runs the optimizer on it at once, with exactly the numbers of the
// step's commit (the sum of the contributions' num_samples, their largest
// |x| for the next exponent, schedule step t), so the results are bit for
// bit those of applying the whole step at its commit, while the streams go
// on receiving other chunks. With one worker a term that would be held
// (above) is applied by the stream itself, straight from the pushed bytes
// and with the same numbers, under the shard's mutex shared as the
// applier's apply is (ShardOptions.apply_terms_on_arrival): no copy into
// the accumulator and back. The step still commits as before, when the
// last push commits: chunks not applied yet are applied then, the version
// becomes t + 1, and only then can a pull of clock t + 1 read. In between
// the step is "half applied" (some chunks hold step t + 1's weights and
// slots, the version is still t): no reader sees that state. A pull of a
// clock <= t (a worker re-reading a step it already pushed) waits for the
// commit and reads version t + 1, as a re-read after a commit does; a
// checkpoint cut t is then passed (Snapshot, SnapshotAt: FAILED_PRECONDITION
// "past cut", exactly as once a push of step t is recorded); standing cuts
// are captured in the commit of step t - 1, before anything of step t is
// summed. A contribution is never withdrawn (a half-failed push's chunks
// stay, and count towards "every worker"), except by Restore, which replaces
// weights and slots as well, and by a rollback, which replaces the shard; a
// contribution's num_samples is part of it (the same bytes with another
// num_samples are FAILED_PRECONDITION). The applier holds the shard's mutex
// shared (every other writer of weights and slots holds it exclusively) and
// the chunk's sum mutex.
//
// Wire dtype (ShardOptions.wire_dtype, network.wire_dtype): pushed chunks
// must be in it (any other dtype is INVALID_ARGUMENT naming both, and
// changes nothing), and the service encodes pulls in it. Weights, optimizer
// slots and the applied gradient stay fp32: a bf16/fp16 gradient is decoded
// exactly to fp32 before it is summed (so the sync sum stays exact and
// order-independent) or applied, and a push of the 16-bit values v applies
// exactly as an fp32 push of the values v. Non-finite values (fp16 overflow
// included) are rejected as in fp32. DC-ASGD's read copy holds the weights
// rounded to the wire dtype: what the worker actually read.
//
// Pulls copy nothing under the mutex (DC-ASGD's read copy aside): a pull pins
// the current buffer of every chunk (PulledWeights) and releases the mutex;
// an update that finds its chunk pinned writes to a fresh copy
// (copy-on-write), so readers always see one consistent version.
//
// Updates run chunk by chunk; a large shard spreads them over a small fixed
// pool of threads it owns (ShardOptions.apply_threads), with bit-identical
// results for any thread count (every element is updated independently).
//
// All mutable state (weights, slots, version, clocks, last pushes, DC-ASGD
// read copies) lives in this object behind one mutex, so a checkpoint can
// copy it consistently and worker leases can adjust the set of live
// workers; the sync accumulator is guarded chunk by chunk (one mutex per
// chunk, taken after the shard's), so pushes summed on arrival do not wait
// for each other or for the shard's mutex except to begin and to commit.
// The applier (applying on arrival) holds the shard's mutex shared and the
// chunk's; everything else that writes weights or slots, or reads them as
// one version (pulls, checkpoints), holds it exclusively.
// A change that lets a plain sync step complete without some worker's push
// (elastic membership in sync) must first discard that worker's
// uncommitted contributions, which only a restore of the open step can do
// today (their payload is gone).
//
// Thread-safe. Pull may block up to its deadline; Close() wakes all waiters.
#ifndef PSTRAIN_SERVER_SHARD_H_
#define PSTRAIN_SERVER_SHARD_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/state.h"
#include "common/optimizer.h"
#include "common/tensor_codec.h"
#include "proto/pstrain.pb.h"
#include "server/consistency_rule.h"
#include "server/push_frame.h"
#include "server/sparse_shard.h"

namespace pstrain {

// What one shard needs; plain data, built by ShardOptionsFromJob.
struct ShardOptions {
  uint32_t shard_id = 0;
  uint32_t num_shards = 1;
  // Every tensor and chunk of the model (with each chunk's owner), so the
  // shard can tell "another shard's chunk" from "no such chunk".
  pstrain::v1::ShardMap shard_map;
  pstrain::v1::OptimizerConfig optimizer;
  ConsistencyOptions rule;  // num_workers included
  // Dtype of pushed chunks and of pulls (the service encodes them):
  // DTYPE_F32, DTYPE_BF16 or DTYPE_F16.
  pstrain::v1::DType wire_dtype = pstrain::v1::DTYPE_F32;
  // Threads that apply an update across chunks (the caller included), at
  // most one per chunk; 0 picks min(4, hardware threads), or one for shards
  // under 256 Ki elements. Results do not depend on it (bit for bit).
  int apply_threads = 0;
  // Plain Bsp: apply each chunk as soon as every worker's contribution to
  // it is summed ("Applying on arrival" above), on one applier thread of the
  // shard. Off: the whole step is applied at its commit. Results are the
  // same bit for bit.
  bool early_apply = true;
  // Sync with one worker: keep a chunk's term of a step as the pushed floats
  // and apply it straight from them ("Sync sum" above). Off, and with
  // several workers (where a held first term would have to be converted
  // when the second arrives, which measured slower): every term goes into
  // the fixed-point sum on arrival. Results are the same bit for bit.
  bool hold_first_term = true;
  // One worker with both of the above: a chunk's term is applied by the
  // stream that receives it, straight from the pushed bytes
  // (ApplyTermLocked), instead of being held in the accumulator for the
  // applier thread. Results are the same bit for bit.
  bool apply_terms_on_arrival = true;
  // Elements per block of the optimizer's pass over a chunk
  // (ApplyInBlocksLocked), so that each block's gradient is still in the
  // core's cache when the rule reads it; 0: the whole chunk at once. A
  // multiple of 16 (whole vectors). Results are the same bit for bit.
  uint64_t apply_block = 8192;
  // One worker applying a term on arrival: the held term's conversion
  // (HeldToFloat) done inside the rule's pass where the rule has a one-pass
  // form (Optimizer::ApplyHeld: SGD, momentum) rather than in a pass of its
  // own first. Results are the same bit for bit; false only for tests and
  // benchmarks that compare the two.
  bool apply_held_in_one_pass = true;
  // Row-sparse tensors of the map (server/sparse_shard.h): rows of each
  // table this shard stores at most (server.sparse_max_rows; 0: no bound)
  // and what happens at the bound (server.sparse_on_full).
  uint64_t sparse_max_rows = 0;
  SparseTableOptions::OnFull sparse_on_full =
      SparseTableOptions::OnFull::kEvict;
};

// The options of shard `shard_id` of `job`.
ShardOptions ShardOptionsFromJob(const pstrain::v1::JobSpec& job,
                                 uint32_t shard_id);

struct PushResult {
  uint64_t version = 0;    // version after the push
  uint64_t staleness = 0;  // clocks
  bool applied = false;    // an optimizer step ran
  // Sync with backup workers: accepted too late for its step, not applied.
  bool dropped = false;
  // Time spent in the optimizer at the commit (0 if not applied); chunks
  // applied on arrival before it are not counted.
  double apply_seconds = 0;
  // A part of a push split over several streams (PushHeader.parts, "Parts"
  // above) whose chunks are summed while `missing_chunks` chunks of the
  // push are not yet: nothing committed, and the fields above are not the
  // push's result (version is the shard's).
  bool pending = false;
  uint64_t missing_chunks = 0;
};

// One chunk's weights; shared between the shard and the pulls reading it.
struct ChunkBuffer {
  std::vector<float> values;
  std::atomic<int> readers{0};  // pulls holding it (copy-on-write when > 0)
};

// The weights a pull read: every chunk of the shard at one version. Holding
// it costs the shard nothing until an update touches a held chunk. Movable.
class PulledWeights {
 public:
  PulledWeights() = default;
  PulledWeights(PulledWeights&&) = default;
  PulledWeights& operator=(PulledWeights&& other);
  ~PulledWeights() { Release(); }

  uint64_t version = 0;
  // Async: the slowest worker's clock. Sync: min(version, clock).
  uint64_t min_clock = 0;
  double wait_seconds = 0;  // time blocked on the consistency rule
  // Chunk i's values (chunks() order); valid while this object lives.
  const float* chunk(size_t i) const { return chunks_[i]->values.data(); }
  // A pin of chunk i of its own, for a reader that may outlive this object
  // (a gRPC slice still being sent): the buffer stays alive and is not
  // updated in place (copy-on-write) until the returned pointer is dropped.
  std::shared_ptr<void> Pin(size_t i) const;

 private:
  friend class Shard;
  void Release();
  std::vector<std::shared_ptr<ChunkBuffer>> chunks_;
};

struct PullResult {
  uint64_t version = 0;
  // Async: the slowest worker's clock. Sync: min(version, clock).
  uint64_t min_clock = 0;
  double wait_seconds = 0;  // time blocked on the consistency rule
  // Values of this shard's chunks, concatenated in chunks() order.
  std::vector<float> values;
};

// Where one chunk of this shard lives in its flat buffers.
struct LocalChunk {
  std::string tensor;
  uint32_t index = 0;
  uint64_t tensor_offset = 0;  // first element within the tensor
  uint64_t length = 0;
  uint64_t local_offset = 0;  // into the shard's flat layout
};

class ChunkPool;     // chunk_pool.h: a fixed set of threads for per-chunk work
class ChunkApplier;  // chunk_pool.h: the thread that applies chunks on arrival

class Shard {
 public:
  // Builds the shard's chunks from options.shard_map, initialises the
  // weights from each tensor's InitRule and the optimizer's slots.
  // INVALID_ARGUMENT for a bad rule (MakeConsistencyRule), optimizer config,
  // shard id, shard map or wire dtype.
  static absl::StatusOr<std::unique_ptr<Shard>> Create(ShardOptions options);

  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  ~Shard();

  // Immutable after Create.
  const std::vector<LocalChunk>& chunks() const { return chunks_; }
  uint64_t num_elements() const { return num_elements_; }
  uint32_t shard_id() const { return options_.shard_id; }
  uint32_t num_workers() const { return options_.rule.num_workers; }
  pstrain::v1::DType wire_dtype() const { return options_.wire_dtype; }
  // Upper bounds on one legitimate push stream to this shard (payload,
  // names, framing), for the service to reject a stream early.
  uint64_t max_push_bytes() const { return max_push_bytes_; }
  uint64_t max_push_messages() const { return chunks_.size() + 2; }
  // The row-sparse half (PushRows, PullRows; docs/sparse.md), or null when
  // the map has no row-sparse tensor. Lives as long as the shard; Close()
  // closes it too.
  SparseShard* sparse() const { return sparse_.get(); }

  // Validates and applies (Ssp), records (Bsp) or drops (a late push with
  // backup workers) one worker's gradient for this shard's chunks.
  // `chunks` must hold every chunk of the shard exactly once. The pointed-to
  // messages need only live for the call. Every mode; all chunks are
  // validated before any is summed.
  absl::StatusOr<PushResult> Push(
      const pstrain::v1::PushHeader& header,
      const std::vector<const pstrain::v1::ChunkData*>& chunks);

  // Plain Bsp: pushes may stream chunk by chunk (BeginPush; see "Summing on
  // arrival" above). Immutable.
  bool sums_on_arrival() const { return sums_on_arrival_; }

  // One push stream being summed on arrival. Not thread-safe (one stream);
  // different IncomingPush objects run concurrently. Must not outlive the
  // shard.
  class IncomingPush {
   public:
    // Validates chunk `c` (tensor, index, ownership, dtype, shape,
    // finiteness, not sent twice in this push) and adds it to the step's
    // sum (or finds it there already, above). An error changes nothing
    // observable; the stream must then be abandoned.
    absl::Status Add(const pstrain::v1::ChunkData& c);
    // The same for a chunk parsed in place (ParsePushFrame): its payload
    // is read from the frame's pieces. A payload in several pieces is
    // gathered into a buffer of the shard's spares in the loop that
    // fingerprints and scans it (GatherScanFingerprint), so it is read from
    // gRPC's slices once; one piece aligned for floats is used where it lies.
    // `scanned`: GatherScanFingerprint's results for exactly these bytes,
    // when the caller gathered them (then not scanned again). Same checks,
    // errors, sums and fingerprints as Add(ChunkData).
    struct Scanned {
      uint64_t fingerprint = 0;
      uint32_t max_abs_bits = 0;
    };
    absl::Status Add(const ChunkView& c, const Scanned* scanned = nullptr);
    // Every chunk added: commits the push (or answers a retry of the last
    // accepted one), as Push would. INVALID_ARGUMENT when chunks are
    // missing (a part: `pending` while another part's chunks are, and the
    // commit once none is; "Parts" above); UNAVAILABLE when the shard
    // restored a checkpoint or closed while the push streamed (nothing
    // applied; a retry is safe).
    absl::StatusOr<PushResult> Finish();
    ~IncomingPush();

   private:
    friend class Shard;
    IncomingPush(Shard* shard, const pstrain::v1::PushHeader& header,
                 uint64_t epoch, bool summing);
    Shard* const shard_;
    const pstrain::v1::PushHeader header_;
    const uint64_t epoch_;          // the step's sum this push adds to
    bool summing_;                  // false: only hashed (a possible retry)
    const bool part_;               // header_.parts() > 1
    std::vector<uint64_t> hashes_;  // per chunk of the shard
    std::vector<bool> seen_;
    size_t seen_count_ = 0;
    std::vector<float> decoded_;  // bf16/fp16 chunk as fp32 (reused)
    // A term applied as it arrives (ApplyTermLocked): its gradient, from
    // the shard's spares (returned by the destructor).
    std::vector<float> term_g_;
    // A payload gathered from pieces (Add(ChunkView)), from the same spares.
    std::vector<float> gathered_;

    // Both Adds: `c`'s payload is `pieces` (data null in `c`).
    absl::Status AddPieces(ChunkFields c,
                           absl::Span<const absl::string_view> pieces,
                           const Scanned* scanned);
    // A vector of the shard's spares of max_chunk_length_ floats.
    std::vector<float> TakeSpare();

    // Add's part under chunk k's sum mutex, for values at `src` known to
    // be finite (checked by ValidateChunk or Add's scan); `apply`: the
    // caller holds the shard's mutex shared and the term may be applied at
    // once; `max_bits`: the bits of the largest |x| when Add scanned them.
    absl::Status SumLocked(const ChunkFields& c, size_t k, const char* src,
                           uint64_t hash, bool apply,
                           std::optional<uint32_t> max_bits);
  };
  // Starts a push stream (sums_on_arrival() only, else FAILED_PRECONDITION):
  // checks the header (worker, num_samples, read_min_clock, and the clock
  // against the worker's: FAILED_PRECONDITION at once unless it is the
  // worker's next clock or a possible retry of its last accepted push).
  absl::StatusOr<std::unique_ptr<IncomingPush>> BeginPush(
      const pstrain::v1::PushHeader& header);

  // Waits (until `deadline`) for `worker` to be allowed to read at `clock`,
  // then pins the weights. DEADLINE_EXCEEDED names the workers waited for;
  // UNAVAILABLE after Close(). `cancelled` (may be null; must outlive the
  // call): the wait also ends, CANCELLED, when it is true at the start or
  // when WakePulls() runs after it was set (the caller's call went away).
  absl::StatusOr<PulledWeights> PullWeights(
      uint32_t worker, uint64_t clock, absl::Time deadline,
      const std::atomic<bool>* cancelled = nullptr);
  // Makes every waiting PullWeights look at its `cancelled` again.
  void WakePulls();
  // PullWeights, copied into one flat vector (outside the mutex).
  absl::StatusOr<PullResult> Pull(uint32_t worker, uint64_t clock,
                                  absl::Time deadline);

  // Counters and, for row-sparse tensors, each table's rows stored and
  // evicted (SparseShard::stored_rows / evicted_rows, read after the
  // shard's mutex is released).
  pstrain::v1::ShardStats Stats() const;
  // Sync terms clipped to the accumulator's range so far (see above).
  uint64_t clipped_elements() const;
  // The slowest live worker's clock: steps every worker has completed.
  uint64_t MinClock() const;

  // Fails pending and future pulls with UNAVAILABLE. Idempotent.
  void Close();

  // Chunks of the open sync step applied on arrival so far (0 at every step
  // boundary); for tests and monitoring.
  size_t chunks_applied_early() const;

  // Elastic workers (coordinator/elastic.h), from the coordinator's worker
  // table, by rank: a departed rank no longer holds the slowest-worker
  // clock back (async: survivors never wait for it; its last clock stays),
  // and a rank's clock moves forward to its registration's start step (a
  // worker that joined again). Sizes other than num_workers() are ignored.
  // Pulls waiting on the barrier re-check at once.
  void SetMembership(const std::vector<bool>& departed,
                     const std::vector<uint64_t>& start_steps);

 private:
  explicit Shard(ShardOptions options);
  // Stats() but the row-sparse tables.
  pstrain::v1::ShardStats DenseStats() const;

  // Checks one pushed chunk (nothing is copied); on success `*local` is its
  // position in chunks(). `seen` (by position) catches a chunk sent twice.
  // Without `check_finite` the values are not read (the caller finds a NaN
  // or Inf itself: SumChunk).
  absl::Status ValidateChunk(const pstrain::v1::ChunkData& c,
                             const std::vector<bool>& seen, int* local,
                             bool check_finite = true) const;
  absl::Status ValidateChunk(const ChunkFields& c,
                             const std::vector<bool>& seen, int* local,
                             bool check_finite = true) const;
  // Stateless checks (nothing is copied); on success `ordered[i]` is the
  // push's chunk for chunks()[i].
  absl::Status ValidatePush(
      const pstrain::v1::PushHeader& header,
      const std::vector<const pstrain::v1::ChunkData*>& chunks,
      std::vector<const pstrain::v1::ChunkData*>* ordered) const;
  ShardProgress ProgressLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The smallest standing or ordered cut above `min_clock` that is not the
  // final cut (ShardProgress::next_cut); 0 when none, and when the rule does
  // not hold reads at cuts (ConsistencyRule::HoldsReadsAtCuts).
  uint64_t NextCutLocked(uint64_t min_clock) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadableLocked(uint64_t clock) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t MinClockLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bsp (buffered path): adds num_samples * g to the accumulator; applies
  // the step once the rule says it is complete.
  void RecordLocked(const std::vector<const pstrain::v1::ChunkData*>& ordered,
                    uint64_t num_samples, PushResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a push whose terms are in the accumulator; applies the step when
  // the rule says it is complete.
  void CountRecordedLocked(uint64_t num_samples, PushResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Chunk k's sync state, with its share of the accumulator.
  struct ChunkSum;
  // Adds num_samples * g (the chunk's `length` fp32 values at `src`) to
  // chunk k's share of the accumulator at its current exponent (one
  // worker: the term may be held as floats, above); returns the largest |x|
  // and the number of clipped terms. The values need not be checked for
  // NaN and Inf first: one is found in the pass that reads them, and then
  // nothing changes and it returns false. `scanned_max_bits`: the bits of
  // the largest |g| when the caller read them already (the push stream's
  // scan, which hashed them in the same pass), so they are not scanned
  // again. Caller holds sum.mu.
  bool SumChunk(size_t k, ChunkSum& sum, const char* src, double num_samples,
                double* max_abs, uint64_t* clipped,
                std::optional<uint32_t> scanned_max_bits = std::nullopt);
  // One worker applying on arrival (hold_terms_ and an applier): chunk k's
  // only term of the open step, fp32 at `src`, applied at once, through
  // `g` (length() floats), where SumChunk would hold it for the applier:
  // no copy into the accumulator, the same numbers as ApplyOnArrival
  // (samples num_samples, largest |x| *max_abs after raising it to the
  // term's), so bit for bit the same weights, slots and next exponent.
  // kNotHeld (clipped or beyond the fast conversion's range, or the
  // accumulator in use) and kNotFinite change nothing. `scanned_max_bits`
  // as SumChunk's. Caller holds sum.mu.
  enum class TermOutcome { kApplied, kNotHeld, kNotFinite };
  TermOutcome ApplyTermLocked(size_t k, ChunkSum& sum, const char* src,
                              double num_samples, double* max_abs, float* g,
                              std::optional<uint32_t> scanned_max_bits =
                                  std::nullopt) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Turns chunk k's sum into the gradient (divided by `samples`, through
  // `g`, length() floats) and runs the optimizer for the open step; sets
  // the next exponent from `max_abs`. Caller holds sum.mu and mu_ (shared
  // only on the applier thread).
  void ApplySumLocked(size_t k, ChunkSum& sum, double samples, double max_abs,
                      float* g) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Runs the optimizer on chunk k (schedule step `step`, update count
  // version_, `lr_scale`: Optimizer::Apply's) with the gradient that
  // `fill(offset, length, w, out)` writes (elements [offset, offset +
  // length) of the chunk's, into out[0, length); w: those elements' weights
  // before the update), through `g` (length() floats). In
  // blocks of ShardOptions.apply_block elements (each block's slots a
  // sub-range of every slot array: Optimizer::Apply's slot_stride): a
  // block's gradient is still in the core's cache when the rule reads it,
  // where a whole chunk's (4 MiB at the default size) would have gone to
  // memory and back. Bit for bit one call over the chunk: every
  // rule and every fill is elementwise, and blocks are whole vectors.
  // Caller holds mu_ (shared only on the applier thread or for a term
  // applied on arrival).
  void ApplyInBlocksLocked(
      size_t k, uint64_t step, double lr_scale, float* g,
      absl::FunctionRef<void(uint64_t, uint64_t, const float*, float*)> fill)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The applier's task: applies chunk k if every worker's contribution to it
  // is summed in sum epoch `epoch` and it is not applied yet.
  void ApplyOnArrival(size_t k, uint64_t epoch);
  // Plain Bsp: no chunk of the open step applied on arrival, so weights and
  // slots are those of version_.
  bool WholeVersionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return chunks_applied_early_.load(std::memory_order_relaxed) == 0;
  }
  // The handling common to Push and IncomingPush::Finish under mu_: a retry
  // of the last accepted push, the clock, the rule's decision; `record`
  // adds the push to the step (Bsp). `chunk_hashes` (per chunk, or empty)
  // is kept with the accepted push for retries of a part.
  absl::StatusOr<PushResult> AcceptLocked(
      const pstrain::v1::PushHeader& header, uint64_t fingerprint,
      const std::function<absl::Status(PushResult*)>& record,
      const std::function<void(const PushDecision&, PushResult*)>& apply,
      std::vector<uint64_t> chunk_hashes = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ssp: DC-ASGD compensation, then the optimizer at the decided rate.
  void ApplyPushLocked(
      uint32_t worker,
      const std::vector<const pstrain::v1::ChunkData*>& ordered,
      const PushDecision& decision, PushResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Chunk i's weights for writing (copied first if a pull holds them).
  // Safe to call for different chunks at once (and for chunk i by the
  // applier, holding mu_ shared and chunk i's sum mutex).
  float* MutableChunkLocked(size_t i) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Runs fn(chunk, slot) for every chunk on the apply threads (slot: the
  // thread's scratch buffer); returns when all are done.
  void ForEachChunkLocked(const std::function<void(size_t, int)>& fn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordStalenessLocked(uint64_t staleness)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string LaggardsLocked(uint64_t clock) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ShardOptions options_;
  std::unique_ptr<ConsistencyRule> rule_;
  std::unique_ptr<SparseShard> sparse_;
  std::unique_ptr<ChunkPool> pool_;  // null: one thread
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<LocalChunk> chunks_;
  uint64_t num_elements_ = 0;
  uint64_t max_chunk_length_ = 0;
  uint64_t max_push_bytes_ = 0;
  int accumulator_bits_ = 62;  // 62 - ceil(log2 num_workers)
  bool hold_terms_ = false;    // hold_first_term with one worker
  bool sums_on_arrival_ = false;
  // (tensor, chunk index) -> position in chunks_.
  absl::flat_hash_map<std::pair<std::string, uint32_t>, int> local_index_;
  // tensor -> (number of chunks, shard of each chunk), from the whole map.
  absl::flat_hash_map<std::string, std::vector<uint32_t>> chunk_owner_;

  // The last accepted push of a worker, for idempotent retries.
  struct LastPush {
    bool valid = false;
    uint64_t clock = 0;
    uint64_t fingerprint = 0;
    PushResult result;
    uint64_t session = 0;  // PushHeader.session_id
    // Pushes summed on arrival: the header's hash (HeaderHash) and each
    // chunk's (ChunkHash, chunks() order), for a retry of one part.
    uint64_t header_hash = 0;
    std::vector<uint64_t> chunk_hashes;
  };

  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<ChunkBuffer>> weights_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<float>> slots_ ABSL_GUARDED_BY(mu_);  // per chunk
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;  // optimizer steps applied
  std::vector<uint64_t> clocks_ ABSL_GUARDED_BY(mu_);  // pushes per worker
  // By worker: declared dead (SetMembership); left out of the min clock.
  std::vector<bool> departed_ ABSL_GUARDED_BY(mu_);
  std::vector<LastPush> last_push_ ABSL_GUARDED_BY(mu_);
  std::vector<LastPush> prev_push_ ABSL_GUARDED_BY(mu_);  // the one before
  // Bsp: the step's fixed-point sum (shard layout; empty for Ssp); chunk
  // k's elements are guarded by sums_[k].mu, which also holds its exponent
  // E, largest committed |x| and the step's contributions. Lock order: mu_
  // before any ChunkSum::mu; summing a chunk takes only its own.
  std::vector<int64_t> accumulator_;
  std::unique_ptr<ChunkSum[]> sums_;
  // Bumped when a step is applied or state restored: an IncomingPush of an
  // older epoch adds nothing more and cannot commit.
  uint64_t sum_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t pending_count_ ABSL_GUARDED_BY(mu_) = 0;
  double pending_samples_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t clipped_ ABSL_GUARDED_BY(mu_) = 0;
  // Chunks of the open step applied on arrival: raised by the applier
  // (holding mu_ shared and the chunk's sum mutex), reset under mu_
  // exclusively at the commit and by Restore; so under mu_ held
  // exclusively it is stable.
  std::atomic<size_t> chunks_applied_early_{0};
  // Applies chunks on arrival (null: not this shard, see early_apply).
  // Declared after everything it touches; stopped first in ~Shard.
  std::unique_ptr<ChunkApplier> applier_;
  // One chunk's gradient on its way to the optimizer, per apply thread
  // (reused).
  std::vector<std::vector<float>> scratch_ ABSL_GUARDED_BY(mu_);
  // IncomingPush::term_g_ buffers between pushes (one per push stream that
  // ran at once, so no allocation per push).
  absl::Mutex spare_mu_;
  std::vector<std::vector<float>> spare_g_ ABSL_GUARDED_BY(spare_mu_);
  // DC-ASGD (dc_lambda > 0): the weights each worker's last pull returned
  // (shard layout); empty until its first pull.
  std::vector<std::vector<float>> read_weights_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Statistics.
  uint64_t pushes_ ABSL_GUARDED_BY(mu_) = 0;  // accepted, dropped included
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t staleness_sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t staleness_max_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> staleness_hist_ ABSL_GUARDED_BY(mu_);
  absl::Duration barrier_wait_ ABSL_GUARDED_BY(mu_);
  // MutableChunkLocked's copies of a buffer a pull held (ShardStats).
  std::atomic<uint64_t> copied_on_write_{0};

  // ---- Checkpoints: state export and import -------------------------------
  //
  // A checkpoint holds every shard's state at one consistent cut:
  //  * Sync (Bsp, BspWithBackups): cut t is the state after step t - 1, that
  //    is version == t and no push of step t recorded yet. Each shard reaches
  //    it on its own (when it completes step t - 1), so the coordinator
  //    only names t; SnapshotAt(t) captures the state in
  //    the same critical section that completes step t - 1, before any push
  //    of step t, so training need not pause. The sync sum's per-chunk
  //    exponents are saved too, so training resumed on the same chunk layout
  //    continues bit for bit. Worker clocks are saved as they are (with
  //    backup workers a late worker may be behind the cut).
  //  * Async (Ssp): cut c is the state in which every worker's pushes of
  //    clocks < c are applied and none of clock >= c, i.e. every clock == c:
  //    "a consistent cut with held workers". Every shard's state at cut c
  //    holds exactly the pushes {(w, t) : t < c} of every worker w, the same
  //    set on every shard, though each shard applied them in its own
  //    arrival order. With staleness s > 0 a fast worker could push clock c
  //    before the slowest pushed c - 1, so the cut would never occur; the
  //    shard therefore holds it: while cut c (a standing cut, or one a
  //    SnapshotAt call waits for or left ordered) is not captured, a read at
  //    clock >= c waits until every worker reached c (ShardProgress::next_cut,
  //    the Ssp rule), and since a worker pushes clock c only after reading at
  //    c, the shard passes through "every clock == c" and captures it in
  //    the critical section of the push that completes it. Each shard holds
  //    on its own (no cross-shard wait: the cut is defined by the clocks,
  //    not by time). The hold costs what one step of staleness 0 costs; the
  //    final cut (SetStandingCuts' `last`) needs none. A push of clock >= c
  //    while some worker is below c (a client that pushes without reading)
  //    makes SnapshotAt(c) fail with FAILED_PRECONDITION.
  // Saved: weights, optimizer slots, version, worker clocks, schedule step,
  // sync exponents. Not saved (empty after Restore): a step's partial sum
  // (none at a cut), the last pushes per worker (a retry of a pre-checkpoint
  // push is then refused FAILED_PRECONDITION by its clock), DC-ASGD's read
  // copies (a worker's first push after Restore is uncompensated unless it
  // pulls first, as workers do), and statistics (they keep counting).
 public:
  // The state now, if the shard is at a cut (above; cut = version in sync,
  // the common clock in async); FAILED_PRECONDITION naming what is pending
  // otherwise. Copies weights and slots under the mutex.
  absl::StatusOr<ShardState> Snapshot() const;
  // Waits (until `deadline`) for the shard to be at cut `cut` and captures
  // the state at that moment. FAILED_PRECONDITION if the shard is already
  // past it (or passes it without stopping there, async), DEADLINE_EXCEEDED
  // naming the workers below the cut, UNAVAILABLE after Close(). Async:
  // a call whose deadline passes leaves cut `cut` ordered: the shard keeps
  // holding reads at it and captures it when every worker reaches it (as a
  // standing cut, so only after SetStandingCuts), so a repeated call
  // collects it however long the slowest worker takes (a time cut,
  // checkpoint.every_seconds); dropped once captured or passed.
  absl::StatusOr<ShardState> SnapshotAt(uint64_t cut, absl::Time deadline);
  // Replaces weights, slots, version and clocks with `state`, whose chunks
  // must be exactly this shard's chunks() (tensor, offset, length, in order)
  // with this optimizer's number of slots and one clock per worker; clears
  // what is "not saved" above. INVALID_ARGUMENT naming the mismatch changes
  // nothing. Pulls waiting on the barrier re-check against the new state.
  absl::Status Restore(const ShardState& state);
  // SnapshotAt calls now waiting (for tests and monitoring).
  size_t waiting_snapshots() const;
  // Standing cuts: from now on the shard captures, by itself and the moment
  // it reaches them, the cuts t > 0 with t % every == 0 (every > 0) or
  // t == last, and holds at most `max_held` captures (the oldest dropped
  // beyond) until SnapshotAt(t) takes one. So a coordinator ordering those
  // cuts is never too late, however fast the steps. A capture copies
  // weights and slots (memory: max_held copies). Async: reads are held at
  // each such cut below `last` (above) until it is captured. The row half
  // (sparse()) gets the same standing cuts.
  void SetStandingCuts(uint64_t every, uint64_t last, size_t max_held = 2);

 private:
  struct PendingSnapshot {
    uint64_t cut = 0;
    bool done = false;
    absl::Status status;
    ShardState state;
  };
  // Checkpoint cuts: the rule decides (ConsistencyRule::AtCut, PastCut).
  CutProgress CutProgressLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AtCutLocked(uint64_t cut) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PastCutLocked(uint64_t cut) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ShardState CaptureLocked(uint64_t cut) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes pending SnapshotAt calls whose cut is now or can no longer be.
  void ServeSnapshotsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<PendingSnapshot*> pending_snapshots_ ABSL_GUARDED_BY(mu_);
  uint64_t standing_every_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t standing_last_ ABSL_GUARDED_BY(mu_) = 0;
  size_t standing_max_held_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<ShardState> standing_held_ ABSL_GUARDED_BY(mu_);  // by cut
  // Async cuts a timed-out SnapshotAt left held (see SnapshotAt).
  std::set<uint64_t> ordered_cuts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SHARD_H_
