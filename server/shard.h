// One parameter-server shard: the weights and optimizer state of the chunks
// the shard map assigns to it, and the consistency rule that orders pushes
// and pulls.
//
// Consistency (JobSpec.mode):
//  * MODE_SYNC (BSP). Step t completes when every worker has pushed clock t.
//    The gradients are averaged weighted by each push's sample count (summed
//    in rank order, so the result does not depend on arrival order), the
//    optimizer runs once and the version becomes t + 1. A pull for clock c
//    blocks until version >= c, so it sees exactly the weights after step c-1.
//  * MODE_SYNC with backup workers b = JobSpec.backup_workers (Chen et al.
//    2016, "Revisiting Distributed Synchronous SGD"). Step t completes as
//    soon as the first N - b pushes of clock t arrived, averaged as above
//    over those pushes only. A push whose clock is below the version (its
//    step completed without it) is late: it is accepted with dropped = true,
//    advances the worker's clock and changes nothing else. Pull gating is
//    unchanged (version >= c), so a late worker goes on with the latest
//    weights, which may be newer than those after step c-1.
//  * MODE_ASYNC (SSP, staleness s). Each push is applied on arrival and bumps
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
//      compensation before w's first pull). The shard keeps that copy per
//      worker: num_workers * num_elements() extra floats, and every pull
//      copies the shard twice.
//
// Every push carries the clock it completes and the (version, min_clock) of
// the pull it computed from; staleness = clock - min_clock is recorded per
// push. In async a pull's min_clock is the slowest worker's clock, so the
// staleness is at most s. In sync it is the number of completed steps capped
// at the reader's clock (the steps the read weights include), so staleness
// is 0 for every push, dropped late pushes included: stragglers left behind
// by backup workers do not make the others' gradients look stale.
//
// Pushes are all-or-nothing: a push is fully validated (worker, tensors, chunk
// ranges, ownership, dtype, shape, finiteness, completeness, clock) before any
// state changes, so a rejected push leaves weights and clocks untouched.
//
// All mutable state (weights, slots, version, clocks, pending sync gradients,
// DC-ASGD read copies) lives in this object behind one mutex, so a later
// checkpoint can copy it consistently and worker leases can adjust
// `num_workers_`.
//
// Thread-safe. Pull may block up to its deadline; Close() wakes all waiters.
#ifndef PSTRAIN_SERVER_SHARD_H_
#define PSTRAIN_SERVER_SHARD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/optimizer.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

struct ShardOptions {
  uint32_t shard_id = 0;
  pstrain::v1::JobSpec job;  // mode, staleness, workers, optimizer, shard map
};

struct PushResult {
  uint64_t version = 0;    // version after the push
  uint64_t staleness = 0;  // clocks
  bool applied = false;    // an optimizer step ran
  // Sync with backup workers: accepted too late for its step, not applied.
  bool dropped = false;
  double apply_seconds = 0;  // time spent in the optimizer (0 if not applied)
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
  uint64_t local_offset = 0;  // into the shard's flat weight buffer
};

class Shard {
 public:
  // Builds the shard's chunks from options.job.shard_map, initialises the
  // weights from each tensor's InitRule and the optimizer's slots.
  // INVALID_ARGUMENT if backup_workers is set outside sync or is not below
  // num_workers, or staleness_aware_lr / dc_lambda are set outside async, or
  // dc_lambda is negative or not finite.
  static absl::StatusOr<std::unique_ptr<Shard>> Create(ShardOptions options);

  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // Immutable after Create.
  const std::vector<LocalChunk>& chunks() const { return chunks_; }
  uint64_t num_elements() const { return num_elements_; }
  uint32_t shard_id() const { return options_.shard_id; }
  const pstrain::v1::JobSpec& job() const { return options_.job; }

  // Validates and applies (async), records (sync) or drops (a late sync push
  // with backup workers) one worker's gradient for this shard's chunks.
  // `chunks` must hold every chunk of the shard exactly once. The pointed-to
  // messages need only live for the call.
  absl::StatusOr<PushResult> Push(
      const pstrain::v1::PushHeader& header,
      const std::vector<const pstrain::v1::ChunkData*>& chunks);

  // Waits (until `deadline`) for `worker` to be allowed to read at `clock`,
  // then copies the weights. DEADLINE_EXCEEDED names the workers waited for;
  // UNAVAILABLE after Close().
  absl::StatusOr<PullResult> Pull(uint32_t worker, uint64_t clock,
                                  absl::Time deadline);

  pstrain::v1::ShardStats Stats() const;

  // Fails pending and future pulls with UNAVAILABLE. Idempotent.
  void Close();

 private:
  explicit Shard(ShardOptions options) : options_(std::move(options)) {}

  // Stateless checks and decoding into a flat gradient (shard layout).
  absl::Status DecodePush(
      const pstrain::v1::PushHeader& header,
      const std::vector<const pstrain::v1::ChunkData*>& chunks,
      std::vector<float>* grad) const;
  bool ReadableLocked(uint64_t clock) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t MinClockLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sync: records worker w's gradient for the current step and applies the
  // step once num_workers - backup_workers gradients are in.
  void AccumulateSyncLocked(uint32_t w, uint64_t num_samples,
                            std::vector<float> grad, PushResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Async: the staleness-aware learning rate and delay compensation, then
  // the optimizer.
  void ApplyAsyncLocked(uint32_t w, uint64_t clock, uint64_t staleness,
                        std::vector<float> grad, PushResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One optimizer step over every chunk at learning rate
  // lr(schedule_step) * lr_scale; bumps the version.
  void ApplyLocked(uint64_t schedule_step, const float* grad,
                   double lr_scale = 1.0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordStalenessLocked(uint64_t staleness)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string LaggardsLocked(uint64_t clock) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ShardOptions options_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<LocalChunk> chunks_;
  uint64_t num_elements_ = 0;
  // (tensor, chunk index) -> position in chunks_.
  absl::flat_hash_map<std::pair<std::string, uint32_t>, int> local_index_;
  // tensor -> (number of chunks, shard of each chunk), from the whole map.
  absl::flat_hash_map<std::string, std::vector<uint32_t>> chunk_owner_;

  mutable absl::Mutex mu_;
  std::vector<float> weights_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<float>> slots_ ABSL_GUARDED_BY(mu_);  // per chunk
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;  // optimizer steps applied
  std::vector<uint64_t> clocks_ ABSL_GUARDED_BY(mu_);  // pushes per worker
  // Sync mode: gradients of the current step, indexed by worker; a worker
  // with pending_samples_ 0 has not pushed it (pushes have num_samples > 0).
  std::vector<std::vector<float>> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> pending_samples_ ABSL_GUARDED_BY(mu_);
  uint32_t pending_count_ ABSL_GUARDED_BY(mu_) = 0;
  // DC-ASGD (dc_lambda > 0): the weights each worker's last pull returned;
  // empty until its first pull.
  std::vector<std::vector<float>> read_weights_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Statistics.
  uint64_t pushes_ ABSL_GUARDED_BY(mu_) = 0;  // accepted, dropped included
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t staleness_sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t staleness_max_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> staleness_hist_ ABSL_GUARDED_BY(mu_);
  absl::Duration barrier_wait_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SHARD_H_
