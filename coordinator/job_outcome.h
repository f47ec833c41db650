// What a job produced, for summary.json (common/run_record.h writes it):
// the first failure and its cause, divergence, the byte counters of every
// worker, and the step log's totals. The coordinator service records into a
// JobOutcomeRecorder as the job runs and asks it for the JobOutcome at the
// end.
//
// A plain value class (no locking, no clock of its own): the service holds
// it under its mutex and passes the time in, so tests need no sleeps.
#ifndef PSTRAIN_COORDINATOR_JOB_OUTCOME_H_
#define PSTRAIN_COORDINATOR_JOB_OUTCOME_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/run_record.h"
#include "coordinator/step_log.h"

namespace pstrain {

// What the job produced, for summary.json.
struct JobOutcome {
  bool failed = false;
  std::string message;                // the first failure, for people
  std::optional<RunFailure> failure;  // the first failure's cause
  bool diverged = false;              // some loss was NaN or infinite
  double wall_s = 0;
  uint64_t steps = 0;  // steps completed by every worker
  uint64_t samples = 0;
  double final_loss = 0;  // training loss of the last complete step
  bool has_accuracy = false;
  double final_accuracy = 0;  // final evaluation (summed counts / total)
  double final_eval_loss = 0;
  bool has_final_eval = false;  // else final_eval_loss is null in summary.json
  uint64_t bytes_pushed = 0;    // all workers, payload messages
  uint64_t bytes_pulled = 0;
};

// The failure a worker's report states (ReportRequest.error): its text
// without the "worker RANK: " prefix workers add, kept whole up to
// kMaxMessageBytes (summary.json, the log); longer text is cut, saying how
// long it was.
RunFailure WorkerErrorFailure(uint32_t worker, absl::string_view error);

// "training diverged: loss is nan at step 12" (or "evaluation loss").
std::string DivergenceText(const Divergence& d);

class JobOutcomeRecorder {
 public:
  explicit JobOutcomeRecorder(int num_workers)
      : bytes_pushed_(num_workers, 0), bytes_pulled_(num_workers, 0) {}

  // The job failed at `now` because of `failure`: true if it is the first
  // failure (kept, with DescribeFailure's message); later ones change
  // nothing and return false.
  bool Fail(const RunFailure& failure, absl::Time now);
  // A failed job's cause was another: `failure` replaces the recorded one
  // (the time of the failure stays). No-op while the job has not failed.
  void Reattribute(const RunFailure& failure);
  // Some loss diverged: true the first time.
  bool Diverged();
  // Worker `rank`'s byte counters so far (each report carries its totals).
  void SetBytes(int rank, uint64_t pushed, uint64_t pulled);

  bool failed() const { return outcome_.failed; }
  // The first failure's message ("" while none).
  const std::string& message() const { return outcome_.message; }

  // The outcome with the step log's `totals`; training started at
  // `train_start` (InfinitePast if it never did). A failed job ran until it
  // failed, not until its last complete step (training may have stalled
  // long before: a hung process, a restart that never came), so its wall_s
  // is at least the time from the start to the failure.
  JobOutcome Summary(const StepTotals& totals, absl::Time train_start) const;

 private:
  JobOutcome outcome_;
  absl::Time failed_at_ = absl::InfinitePast();
  std::vector<uint64_t> bytes_pushed_;  // by rank
  std::vector<uint64_t> bytes_pulled_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_JOB_OUTCOME_H_
