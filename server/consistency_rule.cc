#include "server/consistency_rule.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/pstrain.pb.h"

namespace pstrain {
namespace {

// BSP: step t completes when every worker pushed clock t; a pull at clock c
// reads once version >= c.
class Bsp : public ConsistencyRule {
 public:
  explicit Bsp(uint32_t quorum) : quorum_(quorum) {}

  bool Readable(uint64_t clock, const ShardProgress& p) const override {
    return p.version >= clock;
  }
  uint64_t RequiredClock(uint64_t clock, const ShardProgress&) const override {
    return clock;
  }
  uint64_t ReadMinClock(uint64_t clock, const ShardProgress& p) const override {
    return std::min(p.version, clock);
  }
  absl::StatusOr<PushDecision> OnPush(uint64_t clock, uint64_t,
                                      const ShardProgress& p) const override {
    if (clock > p.version) {
      // Unreachable with well-behaved clients: a worker pulls clock c only
      // once version >= c, and a step cannot complete twice.
      return absl::FailedPreconditionError(absl::StrCat(
          "sync step is ", p.version, ", push is for clock ", clock));
    }
    PushDecision d;
    // Below the version: the step completed without this push (only with
    // backup workers), so it is late.
    d.action = clock < p.version ? PushDecision::Action::kDrop
                                 : PushDecision::Action::kRecord;
    return d;
  }
  bool records_pushes() const override { return true; }
  bool StepComplete(uint32_t recorded) const override {
    return recorded >= quorum_;
  }
  // A live worker's own pull at clock c finds the version at c: step c
  // cannot complete without its push. Version c + 1 is a stand-in's.
  bool ReadsBeforeCompletedStep(uint64_t clock,
                                const ShardProgress& p) const override {
    return p.version == clock + 1;
  }
  // A rank's stand-in re-pushes the rank's last step with the same payload
  // (an identical retry); a different push for a summed clock is an error.
  bool AcknowledgesRejoinedPushes() const override { return false; }
  // Cuts are step boundaries: cut c is the state after step c with nothing
  // of step c + 1 recorded or applied. Reads already wait for whole steps.
  bool HoldsReadsAtCuts() const override { return false; }
  uint64_t ReachedCut(const CutProgress& p) const override { return p.version; }
  bool AtCut(uint64_t cut, const CutProgress& p) const override {
    return p.version == cut && !p.step_open;
  }
  bool PastCut(uint64_t cut, const CutProgress& p) const override {
    return p.version > cut || (p.version == cut && p.step_open);
  }

 private:
  const uint32_t quorum_;
};

// BSP with b backup workers: a step completes with the first N - b pushes.
class BspWithBackups : public Bsp {
 public:
  BspWithBackups(uint32_t num_workers, uint32_t backup_workers)
      : Bsp(num_workers - backup_workers) {}
  // A late worker's pull at clock c finds version c + 1 too, and reads it
  // (its push is dropped); stand-ins need steps that wait for every rank
  // (training.on_failure elastic refuses backup workers).
  bool ReadsBeforeCompletedStep(uint64_t, const ShardProgress&) const override {
    return false;
  }
};

// SSP with staleness s (< 0: unbounded), optionally with the staleness-aware
// learning rate and DC-ASGD.
class Ssp : public ConsistencyRule {
 public:
  explicit Ssp(const ConsistencyOptions& o)
      : staleness_(o.staleness),
        staleness_aware_lr_(o.staleness_aware_lr),
        dc_lambda_(o.dc_lambda),
        base_lr_scale_(o.lr_per_worker ? 1.0 / o.num_workers : 1.0),
        num_workers_(o.num_workers),
        model_clock_pushes_(o.model_clock_steps * o.num_workers) {}

  bool Readable(uint64_t clock, const ShardProgress& p) const override {
    // Model clock: the model is done; whoever reads learns it and stops.
    if (model_clock_pushes_ > 0 && p.version >= model_clock_pushes_) {
      return true;
    }
    return p.min_clock >= RequiredClock(clock, p);
  }
  // The SSP bound, and at a checkpoint cut c not yet captured a read at
  // clock >= c waits for every worker to reach c: no push of clock >= c can
  // then arrive before the cut (every push follows its read), so the shard
  // passes through the state "every clock == c" and captures it there.
  uint64_t RequiredClock(uint64_t clock,
                         const ShardProgress& p) const override {
    uint64_t need = 0;
    if (staleness_ >= 0 && clock > static_cast<uint64_t>(staleness_)) {
      need = clock - static_cast<uint64_t>(staleness_);
    }
    if (p.next_cut > 0 && clock >= p.next_cut) {
      need = std::max(need, p.next_cut);
    }
    return need;
  }
  uint64_t ReadMinClock(uint64_t, const ShardProgress& p) const override {
    return p.min_clock;
  }
  absl::StatusOr<PushDecision> OnPush(uint64_t clock, uint64_t staleness,
                                      const ShardProgress& p) const override {
    PushDecision d;
    d.action = PushDecision::Action::kApply;
    // Model clock: the pushes before this one, N per model step.
    d.schedule_step =
        model_clock_pushes_ > 0 ? p.version / num_workers_ : clock;
    d.lr_scale = base_lr_scale_;
    if (staleness_aware_lr_ && staleness > 1) {
      d.lr_scale /= static_cast<double>(staleness);
    }
    return d;
  }
  double dc_lambda() const override { return dc_lambda_; }
  bool AcknowledgesRejoinedPushes() const override { return true; }
  // Cuts are clock cuts: cut c is the state where every worker (departed
  // ones included) has pushed exactly c clocks.
  bool HoldsReadsAtCuts() const override { return true; }
  uint64_t ReachedCut(const CutProgress& p) const override {
    return p.min_clock;
  }
  bool AtCut(uint64_t cut, const CutProgress& p) const override {
    return p.lowest_clock == cut && p.highest_clock == cut;
  }
  bool PastCut(uint64_t cut, const CutProgress& p) const override {
    return p.highest_clock > cut;
  }

 private:
  const int64_t staleness_;
  const bool staleness_aware_lr_;
  const double dc_lambda_;
  const double base_lr_scale_;  // 1, or 1 / num_workers
  const uint64_t num_workers_;
  const uint64_t model_clock_pushes_;  // 0: the worker clock
};

}  // namespace

ConsistencyOptions ConsistencyOptionsFromTraining(
    const pstrain::v1::TrainingConfig& t, uint32_t num_workers) {
  ConsistencyOptions r;
  switch (t.mode()) {
    case pstrain::v1::MODE_SYNC:
      r.kind = ConsistencyOptions::Kind::kBsp;
      break;
    case pstrain::v1::MODE_ASYNC:
      r.kind = ConsistencyOptions::Kind::kSsp;
      break;
    default:
      r.kind = ConsistencyOptions::Kind::kUnspecified;
  }
  r.num_workers = num_workers;
  r.backup_workers = t.backup_workers();
  r.staleness = t.staleness();
  r.staleness_aware_lr = t.staleness_aware_lr();
  r.dc_lambda = t.dc_lambda();
  r.lr_per_worker =
      t.async_lr_per_push() == pstrain::v1::TrainingConfig::SCALED;
  if (t.mode() == pstrain::v1::MODE_ASYNC &&
      t.clock() == pstrain::v1::TrainingConfig::CLOCK_MODEL && t.steps() > 0) {
    r.model_clock_steps = static_cast<uint64_t>(t.steps());
  }
  return r;
}

absl::StatusOr<std::unique_ptr<ConsistencyRule>> MakeConsistencyRule(
    const ConsistencyOptions& o) {
  using Kind = ConsistencyOptions::Kind;
  if (o.num_workers == 0) {
    return absl::InvalidArgumentError("job has no workers");
  }
  if (o.kind != Kind::kBsp && o.kind != Kind::kSsp) {
    return absl::InvalidArgumentError(
        "job mode must be MODE_SYNC or MODE_ASYNC");
  }
  const bool sync = o.kind == Kind::kBsp;
  if (o.backup_workers > 0 && (!sync || o.backup_workers >= o.num_workers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backup_workers needs MODE_SYNC and must be below num_workers (",
        o.num_workers, "), got ", o.backup_workers));
  }
  if ((o.staleness_aware_lr || o.dc_lambda != 0 || o.lr_per_worker) && sync) {
    return absl::InvalidArgumentError(
        "staleness_aware_lr, dc_lambda and async_lr_per_push scaled need "
        "MODE_ASYNC");
  }
  if (!(o.dc_lambda >= 0) || !std::isfinite(o.dc_lambda)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dc_lambda must be finite and >= 0, got ", o.dc_lambda));
  }
  if (o.model_clock_steps > 0 && sync) {
    return absl::InvalidArgumentError(
        "model_clock_steps (training.clock model) needs MODE_ASYNC");
  }
  if (!sync) return std::unique_ptr<ConsistencyRule>(new Ssp(o));
  if (o.backup_workers > 0) {
    return std::unique_ptr<ConsistencyRule>(
        new BspWithBackups(o.num_workers, o.backup_workers));
  }
  return std::unique_ptr<ConsistencyRule>(new Bsp(o.num_workers));
}

}  // namespace pstrain
