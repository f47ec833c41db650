#include "coordinator/failure_policy.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

using pstrain::v1::TrainingConfig;

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
