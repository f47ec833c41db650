#include "coordinator/failure_policy.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace pstrain {
namespace {

using pstrain::v1::AllReduceConfig;
using pstrain::v1::JobConfig;
using pstrain::v1::ModelConfig;
using pstrain::v1::TrainingConfig;

absl::Status OnFailureError(absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("training.on_failure: ", message));
}

bool WideDeep(const JobConfig& c) {
  return c.model().type() == ModelConfig::WIDE_DEEP;
}

// What a policy that rolls an all-reduce ring back (restart, elastic: a
// live worker hosts the lost rank) needs there: every rank reloads rank 0's
// checkpoint and the ring re-forms, which the NCCL backend cannot do (its
// communicator is built once from one unique id), and the checkpoint must
// hold every tensor.
absl::Status CheckRingRollback(const JobConfig& c, absl::string_view name) {
  if (c.training().mode() != pstrain::v1::MODE_ALLREDUCE) {
    return absl::OkStatus();
  }
  if (c.allreduce().backend() == AllReduceConfig::NCCL) {
    return OnFailureError(
        absl::StrCat("'", name,
                     "' in mode allreduce needs allreduce.backend: "
                     "grpc (a NCCL communicator is not re-formed "
                     "after a loss); use 'fail' and resume from a "
                     "checkpoint (psctl run --resume latest)"));
  }
  // Mode allreduce keeps a replica of a row-sparse table on every worker
  // (worker/allreduce/allreduce_trainer.h); its checkpoints and rollbacks
  // hold dense tensors only (docs/sparse.md, "Parameter server vs all-reduce
  // on the sparse model").
  if (WideDeep(c)) {
    return OnFailureError(absl::StrCat(name,
                                       " in mode allreduce needs checkpoints, "
                                       "which row-sparse tables (model.type "
                                       "wide_deep) do not have there yet: use "
                                       "fail"));
  }
  return absl::OkStatus();
}

ElasticOptions MakeElastic(int num_workers, int min_workers, bool takeover) {
  ElasticOptions e;
  e.num_workers = num_workers;
  e.min_workers = min_workers;
  e.takeover = takeover;
  return e;
}

// What psctl run does under elastic, in every mode: a lost worker is
// started again once its lease has run out and rejoins its rank (sync and
// async: Rejoins; the ring: RingMembers take the rank back); the job goes on
// without it once training.max_restarts are used. Servers are not covered.
class ElasticPolicy : public FailurePolicy {
 public:
  explicit ElasticPolicy(int64_t max_restarts) : max_restarts_(max_restarts) {}
  const char* name() const override { return "elastic"; }
  Relaunch RelaunchOnExit(LeaseHolder holder) const override {
    return holder == LeaseHolder::kWorker ? Relaunch::kToRejoin
                                          : Relaunch::kNever;
  }
  absl::Duration RelaunchDelay(absl::Duration lease) const override {
    return lease + absl::Seconds(1);
  }
  int64_t max_relaunches() const override { return max_restarts_; }
  bool GoesOnWithout(LeaseHolder holder) const override {
    return holder == LeaseHolder::kWorker;
  }

 private:
  const int64_t max_restarts_;
};

class FailPolicy final : public FailurePolicy {
 public:
  const char* name() const override { return "fail"; }
  LossResponse OnLost(LeaseHolder) const override {
    return LossResponse::kFailJob;
  }
};

class RestartPolicy final : public FailurePolicy {
 public:
  explicit RestartPolicy(int64_t max_restarts) : max_restarts_(max_restarts) {}
  const char* name() const override { return "restart"; }
  LossResponse OnLost(LeaseHolder) const override {
    return LossResponse::kRollBack;
  }
  bool NewcomerReplacesHolder() const override { return true; }
  int64_t max_rollbacks() const override { return max_restarts_; }
  uint64_t max_shard_generation() const override {
    return static_cast<uint64_t>(std::max<int64_t>(max_restarts_, 0));
  }
  bool RollsBack() const override { return true; }
  Relaunch RelaunchOnExit(LeaseHolder) const override { return Relaunch::kNow; }
  int64_t max_relaunches() const override { return max_restarts_; }
  bool EndsLostProcesses() const override { return true; }
  absl::Status CheckJob(const JobConfig& config) const override {
    return CheckRingRollback(config, name());
  }

 private:
  const int64_t max_restarts_;
};

// Elastic workers on parameter servers: a lost worker's rank departs; the
// shards hold the weights, so nobody rolls back. Servers are not covered.
class ElasticWorkersPolicy final : public ElasticPolicy {
 public:
  ElasticWorkersPolicy(int64_t max_restarts, bool sync, int min_workers)
      : ElasticPolicy(max_restarts), sync_(sync), min_workers_(min_workers) {}
  LossResponse OnLost(LeaseHolder holder) const override {
    return holder == LeaseHolder::kWorker ? LossResponse::kTakeOver
                                          : LossResponse::kFailJob;
  }
  std::string FailureNote(LeaseHolder holder) const override {
    return " (training.on_failure: elastic covers workers only)";
  }
  std::optional<ElasticOptions> Elastic(int num_workers) const override {
    // Async: nobody waits for a departed rank's micro-batches.
    return MakeElastic(num_workers, min_workers_, /*takeover=*/sync_);
  }
  bool Rejoins() const override { return true; }
  bool HandsOver() const override { return sync_; }
  bool StandsIn() const override { return sync_; }
  absl::Status CheckJob(const JobConfig& config) const override {
    if (WideDeep(config) && !sync_) {
      return OnFailureError(
          "elastic with row-sparse tables (model.type wide_deep) "
          "needs training.mode sync: the row clocks do not follow "
          "the elastic membership in async; use fail or restart");
    }
    // Mode sync: a live worker takes a dead rank over and re-pushes its
    // steps (coordinator/elastic.h); backup workers would let a step
    // complete without the rank, so the takeover could no longer keep it
    // bit-exact.
    if (sync_ && config.training().backup_workers() > 0) {
      return OnFailureError(
          "'elastic' in mode sync needs training.backup_workers: "
          "0 (a taken-over rank's steps are exact only when every "
          "step waits for every rank)");
    }
    return absl::OkStatus();
  }

 private:
  const bool sync_;
  const int min_workers_;
};

// Elastic all-reduce: a live worker hosts the lost rank as a second ring
// member, so the ring keeps its N members and its sum order, and every rank
// rolls back as under restart. Its bound is training.min_workers, not
// training.max_restarts (which counts the worker processes psctl starts).
class ElasticRingPolicy final : public ElasticPolicy {
 public:
  ElasticRingPolicy(int64_t max_restarts, int min_workers)
      : ElasticPolicy(max_restarts), min_workers_(min_workers) {}
  LossResponse OnLost(LeaseHolder holder) const override {
    return holder == LeaseHolder::kWorker ? LossResponse::kHostAndRollBack
                                          : LossResponse::kFailJob;
  }
  std::optional<ElasticOptions> Elastic(int num_workers) const override {
    return MakeElastic(num_workers, min_workers_, /*takeover=*/true);
  }
  bool RingMembers() const override { return true; }
  int64_t max_rollbacks() const override {
    return std::numeric_limits<int64_t>::max();
  }
  bool RollsBack() const override { return true; }
  bool HostsRanks() const override { return true; }
  absl::Status CheckJob(const JobConfig& config) const override {
    return CheckRingRollback(config, name());
  }

 private:
  const int min_workers_;
};

}  // namespace

std::string FailurePolicy::FailureNote(LeaseHolder) const {
  return absl::StrCat(" (", Described(), ")");
}

std::string FailurePolicy::Described() const {
  return absl::StrCat("training.on_failure: ", name());
}

std::unique_ptr<FailurePolicy> FailurePolicy::ForJob(
    const TrainingConfig& training) {
  const int min_workers =
      static_cast<int>(std::max<int64_t>(training.min_workers(), 1));
  switch (training.on_failure()) {
    case TrainingConfig::RESTART:
      return std::make_unique<RestartPolicy>(training.max_restarts());
    case TrainingConfig::ELASTIC:
      if (training.mode() == pstrain::v1::MODE_ALLREDUCE) {
        return std::make_unique<ElasticRingPolicy>(training.max_restarts(),
                                                   min_workers);
      }
      return std::make_unique<ElasticWorkersPolicy>(
          training.max_restarts(), training.mode() == pstrain::v1::MODE_SYNC,
          min_workers);
    default:
      return std::make_unique<FailPolicy>();
  }
}

}  // namespace pstrain
