// Where the coordinator's completed step rows go (coordinator/step_log.h
// makes them): metrics.csv, the progress line in the log (about one a
// second, and the last step's) and the pstrain_coordinator_* gauges.
//
// Rows are queued in step order by the coordinator service under its own
// mutex (Queue) and written later without it (Flush), so a slow disk never
// holds up a handler. Thread-safe; lock order: the service's mutex before
// this one's queue mutex, Flush's writer mutex before the queue mutex.
// Every method may be called from any thread.
#ifndef PSTRAIN_COORDINATOR_ROW_WRITER_H_
#define PSTRAIN_COORDINATOR_ROW_WRITER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/run_record.h"
#include "coordinator/step_log.h"

namespace pstrain {

struct RowWriterOptions {
  std::string metrics_csv;  // path, or "" for none
  bool progress = true;     // log a progress line about every second
  int64_t total_steps = 0;  // training.steps, for the progress line
  // Where to publish pstrain_coordinator_* metrics; may be null. Must
  // outlive the writer.
  MetricsRegistry* metrics = nullptr;
};

class RowWriter {
 public:
  // Creates metrics.csv when options.metrics_csv is set (appending to an
  // existing one); INVALID_ARGUMENT naming it when it cannot.
  static absl::StatusOr<std::unique_ptr<RowWriter>> Create(
      RowWriterOptions options);

  // Queues `rows` (complete, in step order, after every row queued before)
  // and sets the gauges from them and `totals` (the step log's after them).
  void Queue(const std::vector<MetricsRow>& rows, const StepTotals& totals)
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Writes the queued rows to metrics.csv and logs progress. After a write
  // error (logged once) no more rows are written; the gauges go on.
  void Flush() ABSL_LOCKS_EXCLUDED(write_mu_, queue_mu_);

  // Gauges: workers registered and not yet finished; shards registered.
  void SetLiveWorkers(int n);
  void SetRegisteredServers(int n);

 private:
  struct Gauges {
    Gauge* steps;
    Gauge* loss;
    Gauge* samples_per_second;
    Gauge* eval_accuracy;
    Gauge* live_workers;
    Gauge* registered_servers;
    Counter* samples;
  };
  RowWriter(RowWriterOptions options, std::unique_ptr<MetricsCsvWriter> csv);

  const RowWriterOptions options_;
  std::unique_ptr<Gauges> gauges_;  // null without a registry

  absl::Mutex write_mu_;
  std::unique_ptr<MetricsCsvWriter> csv_ ABSL_GUARDED_BY(write_mu_);
  absl::Time last_progress_ ABSL_GUARDED_BY(write_mu_) = absl::InfinitePast();
  absl::Mutex queue_mu_ ABSL_ACQUIRED_AFTER(write_mu_);
  std::deque<MetricsRow> queue_ ABSL_GUARDED_BY(queue_mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_ROW_WRITER_H_
