// A worker's pstrain_worker_* metrics (docs/observability.md), updated from the
// trainer's per-step records.
#ifndef PSTRAIN_WORKER_WORKER_METRICS_H_
#define PSTRAIN_WORKER_WORKER_METRICS_H_

#include <atomic>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "proto/pstrain.pb.h"
#include "worker/allreduce/allreducer.h"
#include "worker/ps/ps_client.h"

namespace pstrain {

// pstrain_worker_* metrics, updated from the trainer's per-step records.
// Record: one thread; the byte callbacks may run on the metrics server's.
class WorkerMetrics {
 public:
  // Registers the metrics in `r`, which must outlive this.
  explicit WorkerMetrics(MetricsRegistry* r);

  // Where the byte counters come from (PS modes: the client; allreduce: the
  // ring); may stay null.
  void set_client(const PsClient* client) { client_.store(client); }
  void set_reducer(const AllReducer* reducer) { reducer_.store(reducer); }

  // One step's record (a record without samples: the final evaluation).
  void Record(const pstrain::v1::StepMetrics& m);

 private:
  Histogram* const pull_;
  Histogram* const push_;
  Histogram* const compute_;
  Counter* const steps_;
  Counter* const samples_;
  Gauge* const loss_;
  Gauge* const rate_;
  std::atomic<const PsClient*> client_{nullptr};
  std::atomic<const AllReducer*> reducer_{nullptr};
  const absl::Time start_ = absl::Now();
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WORKER_METRICS_H_
