// Aggregation of the workers' per-step reports into metrics.csv rows and the
// job's totals. A plain value class (no locking, no I/O): the coordinator
// service holds it under its mutex and writes the rows it returns after
// releasing the mutex (StepRowWriter).
//
// Records (StepMetrics) are keyed by (worker, step). Step `steps` (one past
// the last training step) is the final evaluation. A step becomes a row once
// every worker has reported it (in sync with backup workers b: once N - b
// have, as the servers apply the step then; records_per_row), and rows come
// out in step order.
// - Idempotent: a record of a (worker, step) already counted, or of a step
//   already turned into a row, is ignored (a retried Report counts once).
// - Bounded: a step beyond `steps` is OUT_OF_RANGE; at most
//   `max_pending_steps` steps may wait for reports (RESOURCE_EXHAUSTED
//   beyond), so records that can never complete cannot grow memory without
//   bound. A batch is checked whole before any record is counted.
// - Divergence: the first record with a non-finite loss or evaluation loss
//   is remembered (divergence()).
// - Elastic workers (coordinator/elastic.h): a worker can be excused from a
//   step on (its rank was abandoned): rows then complete without its
//   records, and are averaged over the records they have; Expect() makes it
//   count again from a later step (a worker joined the rank).
#ifndef PSTRAIN_COORDINATOR_STEP_LOG_H_
#define PSTRAIN_COORDINATOR_STEP_LOG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/run_record.h"
#include "google/protobuf/repeated_field.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

struct StepLogOptions {
  uint32_t num_workers = 1;
  int64_t steps = 0;  // training steps; record `steps` is the final eval
  // A job resumed from a checkpoint at step k: rows start at k (earlier
  // steps count as done; a record of one is ignored like a repeat).
  int64_t first_step = 0;
  bool classifier = false;  // rows and totals carry an accuracy
  // Steps that may be waiting for reports at once. Async workers may run
  // ahead of the slowest by any number of steps (staleness inf), so this is
  // a memory bound, not a staleness bound: about 150 bytes per step, so
  // about 10 MB at the default.
  int64_t max_pending_steps = 1 << 16;
  // A step becomes a row once this many workers reported it (0: every
  // worker). Sync with backup workers b: N - b, the pushes the servers apply
  // a step with (Chen et al. 2016), so rows, their wall time and the totals
  // follow the model, not the slowest worker, whose later records of a step
  // that is a row already are ignored like repeats. A row's loss, samples
  // and evaluation are those of the records it has: the evaluation covers
  // the test slices of the workers that reported the step.
  uint32_t records_per_row = 0;
  // training.clock model (mode async): records are rows by their
  // StepMetrics.model_step, not their own step (a worker may have several
  // records in one row, or none); a row completes with num_workers records
  // (the N pushes of one model step); the `finished` records make the final
  // row (`steps`), one per worker. A worker's own steps may run past
  // `steps` (to num_workers x steps); a record of a push that came after
  // the model's last step (model_step >= steps) is counted in
  // records_past_end() and makes no row. Repeats are found by the worker's
  // own step (records come in step order).
  bool model_clock = false;
};

// Totals of the complete training steps (summary.json).
struct StepTotals {
  int64_t steps = 0;  // training steps completed by every worker
  uint64_t samples = 0;
  double wall_s = 0;      // end of the last complete step since the start
  double final_loss = 0;  // training loss of the last complete step
  bool has_accuracy = false;
  double final_accuracy = 0;  // final evaluation (summed counts / total)
  double final_eval_loss = 0;
  bool has_final_eval = false;  // the final evaluation was reported
};

// The first non-finite loss seen.
struct Divergence {
  uint32_t worker = 0;
  uint64_t step = 0;
  double value = 0;
  bool eval = false;  // the evaluation loss, not the training loss
};

class StepLog {
 public:
  explicit StepLog(StepLogOptions options);

  // Counts `worker`'s records (each must name `worker`: INVALID_ARGUMENT
  // otherwise). The caller has checked that `worker` is registered.
  absl::Status Add(uint32_t worker, const google::protobuf::RepeatedPtrField<
                                        pstrain::v1::StepMetrics>& records);
  // The rows completed since the last call, in step order; `train_start`
  // is when every worker had registered (the zero of wall_s).
  std::vector<MetricsRow> TakeCompleteRows(absl::Time train_start);

  // The first step `worker` has not reported (records come in step order).
  uint64_t NextStep(uint32_t worker) const;
  // `worker` reports no step >= `from` (until Expect).
  void Excuse(uint32_t worker, uint64_t from);
  // `worker` reports again from step `from` on.
  void Expect(uint32_t worker, uint64_t from);
  // training.on_failure: restart rolled the job back to `step`: every worker
  // did every step below it, but records of those steps that were not
  // reported (a killed worker's, or those a survivor dropped at the
  // generation change) never will be. So steps below `step` become rows
  // with the records they have, and steps below it without any record are
  // skipped (no row). Steps at or above `step` are redone and complete as
  // usual (a record already counted stays counted).
  void RolledBack(uint64_t step);

  const StepTotals& totals() const { return totals_; }
  const std::optional<Divergence>& divergence() const { return divergence_; }
  size_t pending_steps() const { return pending_.size(); }
  // model_clock: records of pushes after the model's last step.
  uint64_t records_past_end() const { return records_past_end_; }

 private:
  struct Pending {
    std::vector<bool> reported;  // by worker
    uint32_t reports = 0;
    double loss_sum = 0;  // sample-weighted
    uint64_t samples = 0;
    double compute_s = 0, pull_s = 0, push_s = 0;
    double end_unix_s = 0;
    uint64_t eval_correct = 0, eval_total = 0;
    double eval_loss_sum = 0;
  };
  // Whether every worker expected at `step` reported it.
  bool Complete(uint64_t step, const Pending& p) const;
  // The pending step of the next row, past steps RolledBack skips.
  std::map<uint64_t, Pending>::iterator NextRow();
  // The row a record counts for: its step, or with model_clock its model
  // step (`steps` for a finished record).
  uint64_t RowOf(const pstrain::v1::StepMetrics& m) const;

  const StepLogOptions options_;
  std::map<uint64_t, Pending> pending_;
  // By worker: [from, to) step ranges it is excused from (to = max: open).
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> excused_;
  uint64_t next_row_ = 0;        // steps below this are rows already
  uint64_t rolled_back_to_ = 0;  // steps below it need no further record
  StepTotals totals_;
  std::optional<Divergence> divergence_;
  // model_clock: by worker, the next own step not counted yet.
  std::vector<uint64_t> next_own_step_;
  uint64_t records_past_end_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_STEP_LOG_H_
