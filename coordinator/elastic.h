// Elastic workers (training.on_failure: elastic;
// docs/failures-and-recovery.md, "Elastic workers"): what becomes of a rank
// whose worker was declared dead, and who may register for it later.
//
// A rank is in one of these states:
//  - live: held by the worker process that registered for it;
//  - departed: its worker was declared dead (lease); its session ended, so
//    its old process is refused everywhere (PERMISSION_DENIED);
//  - stand-in (modes sync and allreduce): a live worker that was asked to
//    take the departed rank over registered for it with `adopt` and
//    computes its micro-batches, as that rank and from the rank's first
//    unreported step, beside its own. The shards' barrier still counts
//    every rank, so each step keeps the global batch and sums exactly the
//    same gradients as an undisturbed run (bit-identical weights).
//    Mode allreduce: the live worker process hosts the rank as a second
//    ring member (its own ring peer, replica and data slice), registered
//    with `adopt`; the coordinator rolls every rank back to the newest
//    checkpoint (coordinator/recovery.h), so the ring of N members sums in
//    the same order as before (bit-identical). A new worker registering
//    for the rank takes it back with one more rollback (no handover);
//  - handover, released (mode sync only): see "Handover" below;
//  - abandoned: departed with nobody to take it over (mode async, where no
//    rank is taken over, or sync once every live worker finished): the
//    coordinator stops expecting its reports.
// Mode async: a worker that registers for a departed rank (or for any rank,
// -1, once every rank was registered: the lowest departed one) gets it at
// once with a new session id: the rank is live again. A live rank cannot be
// taken (ALREADY_EXISTS); `adopt` only takes a departed rank.
//
// Handover (mode sync): a new worker process registering for a rank that is
// not live (what psctl or Kubernetes do when a worker pod is replaced) must
// start at a step whose weights the shards can still serve, i.e. exactly
// the rank's first step nobody pushed. Only the stand-in knows that step
// for sure (a dead process's last pushes are unreported), so the rank is
// handed back at one of the stand-in's step boundaries:
//   stand-in --Want (a newcomer registers)--> handover
//   handover --Release(next_step) (the stand-in's ReleaseRank)--> released
//   released --Registered (the newcomer)--> live, from step next_step
// In handover the stand-in's heartbeat for the rank answers release_rank;
// between two of its steps (all of the rank's pushes of the step it holds
// done, none of the next) it reports the rank's records, calls ReleaseRank
// with the first step it did not push, and stops computing the rank. The
// newcomer's registration waits (bounded by its deadline; it retries on
// UNAVAILABLE) until then and starts at that step: it pulls that step's
// weights like any worker. No step is pushed twice (the stand-in stopped
// before it) or lost (every step before it was pushed by the stand-in or,
// unreported, by the dead process it replaced). A departed rank a
// newcomer wants is first taken over as usual (the stand-in holds the
// weights of the dead process's step or the one before) and then handed
// over at once. If the stand-in dies meanwhile, its ranks depart and are
// taken over again (the newcomer keeps waiting); if the newcomer is gone
// when the rank is released, the coordinator's lease for the released rank
// (lease_s) expires and it departs again, to be taken over.
//
// Who takes a departed rank over (sync, allreduce): the live, unfinished
// ranks in order, departed rank d going to the (d mod count)-th of them;
// recomputed whenever a rank departs or finishes, so a rank whose
// designated adopter died is handed to another one.
//
// A plain value class (no locking, no I/O) that the coordinator service
// holds under its mutex, beside Membership.
#ifndef PSTRAIN_COORDINATOR_ELASTIC_H_
#define PSTRAIN_COORDINATOR_ELASTIC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {

struct ElasticOptions {
  int num_workers = 1;
  int min_workers = 1;  // training.min_workers
  // Modes sync and allreduce: departed ranks are taken over (allreduce:
  // hosted) by live workers.
  bool takeover = true;
};

class ElasticWorkers {
 public:
  enum class State {
    kLive,
    kDeparted,
    kStandIn,
    kHandover,
    kReleased,
    kAbandoned
  };

  explicit ElasticWorkers(ElasticOptions options);

  // Rank `rank` (live, stand-in, in handover or released: its lease ran
  // out) was declared dead. `done` (by rank)
  // says which workers finished. Returns FAILED_PRECONDITION naming the
  // count and training.min_workers when fewer live workers than that
  // remain (the job fails); the rank has departed either way.
  absl::Status Depart(int rank, const std::vector<bool>& done);

  // Whether a registration for `requested_rank` (-1: any) is elastic's to
  // answer: a rank that was registered before, or -1 once every rank was.
  // `registered` is by rank.
  bool Handles(int requested_rank, const std::vector<bool>& registered) const;
  // The rank such a registration gets (see above; -1 prefers a released
  // rank, then a departed one, then one stood in for): INVALID_ARGUMENT out
  // of range, ALREADY_EXISTS for a live rank (or `adopt` of a rank that is
  // not departed), RESOURCE_EXHAUSTED when no rank is free. Changes
  // nothing.
  absl::StatusOr<int> RankFor(int requested_rank, bool adopt) const;
  // Whether a registration without `adopt` may take `rank` now: always in
  // async; in sync only once released (the handover is over).
  bool Ready(int rank) const;
  // Mode sync: a new worker waits for `rank` (not live): a stand-in is
  // asked to release it (handover), now or once the rank is taken over.
  void Want(int rank);
  // Mode sync: whether `rank`'s stand-in is asked to release it.
  bool ReleaseRequested(int rank) const {
    return state_[rank] == State::kHandover;
  }
  // Mode sync: `rank`'s stand-in pushed every step before `next_step` and
  // stopped: FAILED_PRECONDITION unless the rank is in handover.
  absl::Status Release(int rank, uint64_t next_step);
  // The `next_step` of the last Release of `rank`.
  uint64_t released_step(int rank) const { return released_step_[rank]; }
  // The registration for `rank` went through: it is live, or a stand-in
  // when `adopt` (in handover at once if a new worker wants the rank).
  void Registered(int rank, bool adopt);

  // Departed ranks nobody can take over any more, now abandoned (returned
  // once each): all departed ranks in mode async, and in sync those left
  // when every live worker finished. `done` is by rank.
  std::vector<int> Abandon(const std::vector<bool>& done);

  // Modes sync and allreduce: the departed ranks `rank` should take over
  // (empty unless `rank` is live and not done).
  std::vector<uint32_t> AdoptionsFor(int rank,
                                     const std::vector<bool>& done) const;
  // The rank that should take `departed` over, or -1.
  int AdopterOf(int departed, const std::vector<bool>& done) const;

  State state(int rank) const { return state_[rank]; }
  // Departed or abandoned: no process holds the rank.
  bool vacant(int rank) const {
    return state_[rank] == State::kDeparted ||
           state_[rank] == State::kAbandoned;
  }
  // Ranks held by their own live worker (not stand-ins; finished ones
  // included).
  int live_workers() const;
  // Bumped by every Depart and Registered (servers refresh on a change).
  uint64_t epoch() const { return epoch_; }
  const ElasticOptions& options() const { return options_; }

 private:
  std::vector<int> Adopters(const std::vector<bool>& done) const;

  const ElasticOptions options_;
  std::vector<State> state_;
  std::vector<bool> wanted_;             // by rank: a new worker waits
  std::vector<uint64_t> released_step_;  // by rank
  uint64_t epoch_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_ELASTIC_H_
