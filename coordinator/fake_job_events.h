// A JobEvents for tests of ElasticRanks and Rollbacks (no service): records
// the failures and losses it is told; the job has ended once it failed.
#ifndef PSTRAIN_COORDINATOR_FAKE_JOB_EVENTS_H_
#define PSTRAIN_COORDINATOR_FAKE_JOB_EVENTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/elastic_ranks.h"

namespace pstrain {

class FakeJobEvents : public JobEvents {
 public:
  bool ended() const override { return !failures.empty(); }
  absl::Status EndedError() const override {
    return absl::FailedPreconditionError("ended");
  }
  void Fail(const RunFailure& failure) override { failures.push_back(failure); }
  void Lose(LeaseHolder holder, int id, const std::string& why) override {
    lost.push_back(id);
  }

  std::vector<RunFailure> failures;
  std::vector<int> lost;  // ids, in order
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_FAKE_JOB_EVENTS_H_
