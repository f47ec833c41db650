// training.on_failure: restart, as the coordinator sees it
// (docs/failures-and-recovery.md). A plain value class (no locking, no clock of
// its own, no RPC): the coordinator service holds it under its mutex and passes
// the time in; the node performs the rollback RPCs.
//
// The story of one failure:
// 1. Lost(): a server or worker is gone (its lease expired, or a
//    replacement registered for its slot while it held it). A new
//    generation starts and the process's slot awaits a replacement, until
//    `timeout` from now. Another loss meanwhile joins the same recovery (a
//    new generation again, and its own restart). More than `max_restarts`
//    losses in all: RESOURCE_EXHAUSTED, the job fails.
// 2. Filled(): the replacement is in (a worker: registered; a server:
//    ready, its shard built). A replacement that registers again while the
//    recovery lasts awaits again (Refill()): it is the same restart.
// 3. Once AllFilled(), the node orders every shard to roll back to the last
//    complete checkpoint and calls Done(step): the generation starts at that
//    step; workers resume there.
// Stale messages of an older generation are refused elsewhere (the shards
// and the coordinator service compare generations).
#ifndef PSTRAIN_COORDINATOR_RECOVERY_H_
#define PSTRAIN_COORDINATOR_RECOVERY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/leases.h"

namespace pstrain {

class Recovery {
 public:
  Recovery(int64_t max_restarts, absl::Duration timeout)
      : max_restarts_(max_restarts), timeout_(timeout) {}

  // `holder` `id` is gone at `now`: starts or joins a recovery (see above).
  // RESOURCE_EXHAUSTED naming training.max_restarts when none is left
  // (nothing changes then).
  absl::Status Lost(LeaseHolder holder, int id, absl::Time now);
  // Whether `holder` `id` belongs to the recovery under way (awaited or
  // already replaced).
  bool Covers(LeaseHolder holder, int id) const;
  // Its replacement is in / registered again and awaits readiness.
  void Filled(LeaseHolder holder, int id);
  void Refill(LeaseHolder holder, int id);
  bool AllFilled() const;
  // The rollback is done: the current generation starts at `step`.
  void Done(uint64_t step);

  bool recovering() const { return recovering_; }
  uint64_t generation() const { return generation_; }
  uint64_t generation_step() const { return generation_step_; }
  int64_t restarts() const { return restarts_; }
  absl::Time deadline() const { return deadline_; }
  // "server shard 1, worker 0": the slots still awaiting a replacement.
  std::string Missing() const;
  // The first of them (holder, id); {kServer, -1} when none.
  std::pair<LeaseHolder, int> FirstMissing() const;

 private:
  struct Slot {
    LeaseHolder holder;
    int id;
    bool filled;
  };
  const int64_t max_restarts_;
  const absl::Duration timeout_;
  bool recovering_ = false;
  uint64_t generation_ = 0;
  uint64_t generation_step_ = 0;
  int64_t restarts_ = 0;
  absl::Time deadline_ = absl::InfiniteFuture();
  std::vector<Slot> slots_;  // of the recovery under way
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_RECOVERY_H_
