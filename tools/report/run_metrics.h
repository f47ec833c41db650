// One run of `psctl compare`, loaded from its directory and measured with
// tools/report/report_math.h.
#ifndef PSTRAIN_TOOLS_REPORT_RUN_METRICS_H_
#define PSTRAIN_TOOLS_REPORT_RUN_METRICS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/run_record.h"
#include "tools/report/report_math.h"

namespace pstrain {

struct RunMetrics {
  std::string label;  // the mode as given: "sync", "async:2", "allreduce"
  std::string dir;
  bool failed = false;
  std::string message;  // why it failed

  RunSummary summary;
  std::vector<MetricsRow> rows;
  std::optional<TargetHit> target_hit;    // nullopt: no target, or not reached
  double bytes_sent_per_worker_step = 0;  // bytes_pushed / (N * steps)
  double bytes_received_per_worker_step = 0;  // bytes_pulled / (N * steps)
  std::optional<int64_t> staleness_p50, staleness_p99, staleness_max;
  std::optional<double> barrier_wait_share;
  std::optional<double> comm_s_per_step;
  // SteadySecondsPerStepMedian after SteadyWarmupSteps(steps) (report_math).
  std::optional<double> steady_s_per_step;
  // Effective communication rate / the wire's rate (WireShare); set by the
  // caller when the wire was measured.
  std::optional<double> wire_share;

  // From the job file the run was given (DIR/derived.yaml, else job.yaml);
  // config_loaded false when neither could be read.
  bool config_loaded = false;
  std::string config_mode;
  int config_workers = 0;
  int config_servers = 0;
  int64_t config_steps = 0;
  int64_t eval_every = 0;
  double compute_ms = 0;
  int64_t straggler_rank = -1;
  double straggler_factor = 1;
  double transient_p = 0;  // worker.transient_straggler_p
  double transient_factor = 1;
  int64_t pause_rank = -1;  // worker.pause_rank, pause_at_step, pause_s
  int64_t pause_at_step = 0;
  double pause_s = 0;
  int64_t backup_workers = 0;
  bool lr_scaled = false;    // training.async_lr_per_push: scaled
  bool model_clock = false;  // training.clock: model (mode async)
};

// Reads DIR/status (written by psctl compare: "ok", or why the run failed),
// DIR/summary.json, DIR/metrics.csv and the job file. Never fails: a run
// whose status is not "ok", whose summary says failed, or whose files are
// missing or malformed comes back with failed set and the reason.
RunMetrics LoadRunMetrics(const std::string& label, const std::string& dir,
                          const Target& target);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_RUN_METRICS_H_
