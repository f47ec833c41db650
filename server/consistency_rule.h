// Consistency rules of a parameter-server shard: when a worker may read, and
// what happens to a validated push. The shard owns every piece of state
// (weights, clocks, version, pending sums); a rule only decides, from the
// progress the shard shows it, so rules are small, stateless after creation
// and unit-testable without a shard. See server/shard.h for the rules'
// specification.
#ifndef PSTRAIN_SERVER_CONSISTENCY_RULE_H_
#define PSTRAIN_SERVER_CONSISTENCY_RULE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace pstrain {
namespace v1 {
class TrainingConfig;
}  // namespace v1

// Which rule, with its options. Plain data: built from the JobSpec by
// ShardOptionsFromJob (server/shard.h), validated by MakeConsistencyRule.
struct ConsistencyOptions {
  enum class Kind { kUnspecified, kBsp, kSsp };
  Kind kind = Kind::kUnspecified;
  uint32_t num_workers = 0;
  // kBsp: backup workers b (Chen et al. 2016); 0 is plain BSP.
  uint32_t backup_workers = 0;
  // kSsp: staleness bound s; negative means unbounded ("inf").
  int64_t staleness = -1;
  // kSsp options: learning rate lr / max(tau, 1) (Zhang et al. 2016), and
  // DC-ASGD's lambda (Zheng et al. 2017; 0 = off).
  bool staleness_aware_lr = false;
  double dc_lambda = 0;
  // kSsp: each push's rate is divided by num_workers
  // (training.async_lr_per_push: scaled), sync's learning rate per sample.
  bool lr_per_worker = false;
  // kSsp, training.clock model: the job ends once the shard has taken
  // num_workers * model_clock_steps pushes (0: the worker clock). The
  // schedule step of a push is then the model step, version / num_workers,
  // and once the model is done every read is released at once (a fast
  // worker held for a straggler that has finished would wait forever).
  uint64_t model_clock_steps = 0;
};

// The shard's progress, as the rule sees it (read under the shard's mutex).
struct ShardProgress {
  uint64_t version = 0;    // optimizer steps applied
  uint64_t min_clock = 0;  // the slowest worker's clock (pushes accepted)
  // Async checkpoints: the next checkpoint cut c > min_clock the shard has
  // not captured yet (0: none). Ssp holds reads at clocks >= c until every
  // worker reached c (server/shard.h, "Checkpoints"); Bsp ignores it.
  uint64_t next_cut = 0;
};

// Where the shard stands for checkpoint cuts (server/shard.h,
// "Checkpoints"), read under the shard's mutex. A cut is a number naming one
// consistent state of the shard; what it counts (optimizer steps or worker
// clocks) is the rule's business, so the shard's cut and snapshot code asks
// the rule and never tests the mode.
struct CutProgress {
  uint64_t version = 0;  // optimizer steps applied
  // Step `version` has started: pushes of it recorded, or chunks of it
  // applied on arrival.
  bool step_open = false;
  uint64_t min_clock = 0;      // as ShardProgress (departed ranks left out)
  uint64_t lowest_clock = 0;   // every worker's clock, departed included
  uint64_t highest_clock = 0;  // every worker's clock, departed included
};

// What the shard does with one validated push.
struct PushDecision {
  enum class Action {
    kApply,   // run the optimizer now with this push's gradient
    kRecord,  // add it to the step's sum; apply when StepComplete()
    kDrop,    // accept it (the clock advances) and change nothing else
  };
  Action action = Action::kApply;
  uint64_t schedule_step = 0;  // kApply: the learning-rate schedule's step
  double lr_scale = 1.0;       // kApply: multiplies the scheduled rate
};

// Immutable after creation; thread-safe.
class ConsistencyRule {
 public:
  virtual ~ConsistencyRule() = default;

  // Whether a pull at `clock` may return now.
  virtual bool Readable(uint64_t clock, const ShardProgress& p) const = 0;
  // The clock every worker must have pushed before Readable(clock) holds
  // (a deadline error names the workers below it).
  virtual uint64_t RequiredClock(uint64_t clock,
                                 const ShardProgress& p) const = 0;
  // The min_clock a pull at `clock` reports (and the next push echoes).
  virtual uint64_t ReadMinClock(uint64_t clock,
                                const ShardProgress& p) const = 0;
  // The decision for a push of `clock` (the worker's next clock) with
  // `staleness`; FAILED_PRECONDITION for a push the rule cannot take.
  virtual absl::StatusOr<PushDecision> OnPush(uint64_t clock,
                                              uint64_t staleness,
                                              const ShardProgress& p) const = 0;
  // Whether OnPush ever answers kRecord (the shard then keeps a step sum).
  virtual bool records_pushes() const { return false; }
  // Whether a pull at `clock` asks for the state before step `clock`, which
  // has completed since: an elastic stand-in re-computing a departed rank's
  // step that the rank's dead process had pushed (Bsp without backup
  // workers: version == clock + 1; server/sparse_shard.h, "Elastic
  // stand-ins"). A shard that keeps that state answers from it. Rules that
  // apply pushes on arrival, and Bsp with backup workers: never.
  virtual bool ReadsBeforeCompletedStep(uint64_t clock,
                                        const ShardProgress& p) const {
    return false;
  }
  // kRecord rules: whether `recorded` pushes complete the current step.
  virtual bool StepComplete(uint32_t recorded) const { return false; }
  // DC-ASGD's lambda; > 0 makes the shard keep each worker's read weights.
  virtual double dc_lambda() const { return 0; }

  // Whether a push of a clock below the worker's own, from a new session,
  // when the worker's last accepted push came from another session, is
  // acknowledged without applying anything (a rank joined again whose dead
  // process pushed that clock already; server/shard.h, "Pushes are
  // idempotent"). Otherwise only an identical retry is, and anything else
  // for an accepted clock is FAILED_PRECONDITION.
  virtual bool AcknowledgesRejoinedPushes() const = 0;

  // Checkpoint cuts.
  // Whether reads hold at the next checkpoint cut until every worker reached
  // it (ShardProgress::next_cut matters to Readable and RequiredClock); the
  // shard computes next_cut, and keeps a timed-out ordered cut so that it is
  // still captured when reached, only then.
  virtual bool HoldsReadsAtCuts() const = 0;
  // The cut the shard has reached: a standing cut is taken, and Snapshot
  // captures, there (if AtCut holds for it).
  virtual uint64_t ReachedCut(const CutProgress& p) const = 0;
  // Whether the shard's state is exactly cut `cut` now.
  virtual bool AtCut(uint64_t cut, const CutProgress& p) const = 0;
  // Whether the shard has gone past `cut` without stopping there (it can
  // no longer be captured).
  virtual bool PastCut(uint64_t cut, const CutProgress& p) const = 0;
};

// The options of a job's training config (training.mode: MODE_SYNC is kBsp,
// MODE_ASYNC kSsp, anything else kUnspecified, which MakeConsistencyRule
// refuses) with `num_workers` workers.
ConsistencyOptions ConsistencyOptionsFromTraining(
    const pstrain::v1::TrainingConfig& training, uint32_t num_workers);

// INVALID_ARGUMENT (with the old JobSpec wording) when: no workers, no kind,
// backup_workers outside kBsp or not below num_workers, staleness_aware_lr,
// dc_lambda or lr_per_worker outside kSsp, dc_lambda negative or not finite.
absl::StatusOr<std::unique_ptr<ConsistencyRule>> MakeConsistencyRule(
    const ConsistencyOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CONSISTENCY_RULE_H_
