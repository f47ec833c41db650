#include "coordinator/row_writer.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<RowWriter>> RowWriter::Create(
    RowWriterOptions options) {
  std::unique_ptr<MetricsCsvWriter> csv;
  if (!options.metrics_csv.empty()) {
    PS_ASSIGN_OR_RETURN(csv, MetricsCsvWriter::Create(options.metrics_csv));
  }
  return std::unique_ptr<RowWriter>(
      new RowWriter(std::move(options), std::move(csv)));
}

RowWriter::RowWriter(RowWriterOptions options,
                     std::unique_ptr<MetricsCsvWriter> csv)
    : options_(std::move(options)), csv_(std::move(csv)) {
  MetricsRegistry* r = options_.metrics;
  if (r == nullptr) return;
  gauges_ = std::make_unique<Gauges>(Gauges{
      r->AddGauge("pstrain_coordinator_steps",
                  "Training steps completed by every worker."),
      r->AddGauge("pstrain_coordinator_loss",
                  "Training loss of the last complete step."),
      r->AddGauge("pstrain_coordinator_samples_per_second",
                  "Training throughput since the start."),
      r->AddGauge("pstrain_coordinator_eval_accuracy",
                  "Last evaluation accuracy (summed counts / total)."),
      r->AddGauge("pstrain_coordinator_live_workers",
                  "Workers registered and not yet finished."),
      r->AddGauge("pstrain_coordinator_registered_servers",
                  "Server shards registered."),
      r->AddCounter("pstrain_coordinator_samples_total",
                    "Training examples processed by all workers."),
  });
}

void RowWriter::SetLiveWorkers(int n) {
  if (gauges_ != nullptr) gauges_->live_workers->Set(n);
}

void RowWriter::SetRegisteredServers(int n) {
  if (gauges_ != nullptr) gauges_->registered_servers->Set(n);
}

void RowWriter::Queue(const std::vector<MetricsRow>& rows,
                      const StepTotals& totals) {
  if (rows.empty()) return;
  if (gauges_ != nullptr) {
    uint64_t new_samples = 0;
    for (const MetricsRow& r : rows) {
      if (r.loss) new_samples += r.samples;
      if (r.eval_accuracy) gauges_->eval_accuracy->Set(*r.eval_accuracy);
    }
    gauges_->steps->Set(static_cast<double>(totals.steps));
    gauges_->loss->Set(totals.final_loss);
    gauges_->samples->Inc(static_cast<double>(new_samples));
    gauges_->samples_per_second->Set(
        totals.wall_s > 0 ? totals.samples / totals.wall_s : 0);
  }
  absl::MutexLock q(&queue_mu_);
  queue_.insert(queue_.end(), rows.begin(), rows.end());
}

void RowWriter::Flush() {
  absl::MutexLock write(&write_mu_);
  std::vector<MetricsRow> rows;
  {
    absl::MutexLock q(&queue_mu_);
    rows.assign(queue_.begin(), queue_.end());
    queue_.clear();
  }
  if (rows.empty()) return;
  if (csv_ != nullptr) {
    absl::Status st = csv_->Append(rows);
    if (!st.ok()) {
      PS_LOG_ERROR("%s; no more rows are written", st.message());
      csv_.reset();
    }
  }
  if (!options_.progress) return;
  const int64_t total = options_.total_steps;
  for (const MetricsRow& r : rows) {
    if (!r.loss) continue;  // the final evaluation row
    const absl::Time now = absl::Now();
    if (now - last_progress_ > absl::Seconds(1) || r.step + 1 == total) {
      last_progress_ = now;
      PS_LOG_INFO("step %d/%d  loss %.5f  %.0f samples/s  %.1fs%s", r.step + 1,
                  total, *r.loss, r.samples_per_s, r.wall_s,
                  r.eval_accuracy
                      ? absl::StrFormat("  eval acc %.6f", *r.eval_accuracy)
                      : "");
    }
  }
}

}  // namespace pstrain
