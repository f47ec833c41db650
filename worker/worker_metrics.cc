#include "worker/worker_metrics.h"

namespace pstrain {

WorkerMetrics::WorkerMetrics(MetricsRegistry* r)
    : pull_(r->AddHistogram("pstrain_worker_pull_seconds",
                            "Pull of all shards, including barrier waits.",
                            ExponentialBuckets(1e-4, 2, 18))),
      push_(r->AddHistogram("pstrain_worker_push_seconds",
                            "Push to all shards.",
                            ExponentialBuckets(1e-4, 2, 18))),
      compute_(r->AddHistogram("pstrain_worker_compute_seconds",
                               "Gradient computation of one step.",
                               ExponentialBuckets(1e-4, 2, 18))),
      steps_(r->AddCounter("pstrain_worker_steps_total", "Steps completed.")),
      samples_(r->AddCounter("pstrain_worker_samples_total",
                             "Training examples processed.")),
      loss_(r->AddGauge("pstrain_worker_loss", "Loss of the last step.")),
      rate_(r->AddGauge("pstrain_worker_samples_per_second",
                        "Examples per second since the first step.")) {
  r->AddCallback("pstrain_worker_pushed_bytes_total",
                 "Bytes of push messages sent (allreduce: ring bytes sent).",
                 true, [this] {
                   const PsClient* c = client_.load();
                   const AllReducer* r = reducer_.load();
                   return c   ? static_cast<double>(c->bytes_pushed())
                          : r ? static_cast<double>(r->bytes_sent())
                              : 0.0;
                 });
  r->AddCallback("pstrain_worker_pulled_bytes_total",
                 "Bytes of pull messages received (allreduce: ring bytes "
                 "received).",
                 true, [this] {
                   const PsClient* c = client_.load();
                   const AllReducer* r = reducer_.load();
                   return c   ? static_cast<double>(c->bytes_pulled())
                          : r ? static_cast<double>(r->bytes_received())
                              : 0.0;
                 });
}

void WorkerMetrics::Record(const pstrain::v1::StepMetrics& m) {
  pull_->Observe(m.pull_s());
  if (m.samples() == 0) return;  // the final evaluation record
  push_->Observe(m.push_s());
  compute_->Observe(m.compute_s());
  steps_->Inc();
  samples_->Inc(static_cast<double>(m.samples()));
  loss_->Set(m.loss());
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
  if (elapsed > 0) rate_->Set(samples_->value() / elapsed);
}

}  // namespace pstrain
