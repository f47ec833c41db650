#include "tools/report/run_metrics.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_config.h"

namespace pstrain {
namespace {

void LoadJobFile(RunMetrics* m) {
  for (const char* name : {"derived.yaml", "job.yaml"}) {
    absl::StatusOr<JobConfig> c =
        LoadJobConfig(absl::StrCat(m->dir, "/", name));
    if (!c.ok()) continue;
    m->config_loaded = true;
    m->config_mode = c->training().mode() == pstrain::v1::MODE_SYNC ? "sync"
                     : c->training().mode() == pstrain::v1::MODE_ASYNC
                         ? "async"
                         : "allreduce";
    m->config_workers = c->job().workers();
    m->config_servers = c->job().servers();
    m->config_steps = c->training().steps();
    m->eval_every = c->evaluation().every_steps();
    m->compute_ms = c->worker().compute_ms();
    m->straggler_rank = c->worker().straggler_rank();
    m->straggler_factor = c->worker().straggler_factor();
    m->transient_p = c->worker().transient_straggler_p();
    m->transient_factor = c->worker().transient_straggler_factor();
    m->pause_rank = c->worker().pause_rank();
    m->pause_at_step = c->worker().pause_at_step();
    m->pause_s = c->worker().pause_s();
    m->backup_workers = c->training().backup_workers();
    m->lr_scaled = c->training().async_lr_per_push() ==
                   pstrain::v1::TrainingConfig::SCALED;
    m->model_clock =
        c->training().mode() == pstrain::v1::MODE_ASYNC &&
        c->training().clock() == pstrain::v1::TrainingConfig::CLOCK_MODEL;
    return;
  }
}

}  // namespace

RunMetrics LoadRunMetrics(const std::string& label, const std::string& dir,
                          const Target& target) {
  RunMetrics m;
  m.label = label;
  m.dir = dir;
  LoadJobFile(&m);
  auto fail = [&](const std::string& why) {
    m.failed = true;
    m.message = why;
    return m;
  };
  absl::StatusOr<std::string> status = ReadFileText(dir + "/status");
  const std::string state =
      status.ok() ? std::string(absl::StripAsciiWhitespace(*status)) : "";
  absl::StatusOr<std::string> text = ReadFileText(dir + "/summary.json");
  if (status.ok() && state != "ok") {
    // The coordinator's own account, when it wrote one, says more.
    if (text.ok()) {
      absl::StatusOr<RunSummary> s = ParseSummaryJson(*text, "summary.json");
      if (s.ok() && s->failed && !s->message.empty() &&
          !absl::StrContains(state, s->message)) {
        return fail(absl::StrCat(state, "; coordinator: ", s->message));
      }
    }
    return fail(state.empty() ? "failed" : state);
  }
  if (!text.ok()) return fail(std::string(text.status().message()));
  absl::StatusOr<RunSummary> summary =
      ParseSummaryJson(*text, dir + "/summary.json");
  if (!summary.ok()) return fail(std::string(summary.status().message()));
  m.summary = *summary;
  if (m.summary.failed) {
    return fail(m.summary.message.empty() ? "the job failed"
                                          : m.summary.message);
  }
  absl::StatusOr<std::string> csv = ReadFileText(dir + "/metrics.csv");
  if (!csv.ok()) return fail(std::string(csv.status().message()));
  absl::StatusOr<std::vector<MetricsRow>> rows =
      ParseMetricsCsv(*csv, dir + "/metrics.csv");
  if (!rows.ok()) return fail(std::string(rows.status().message()));
  m.rows = std::move(*rows);

  const RunSummary& s = m.summary;
  m.target_hit = TimeToTarget(m.rows, target);
  m.bytes_sent_per_worker_step =
      PerWorkerPerStep(s.bytes_pushed, s.workers, s.steps);
  m.bytes_received_per_worker_step =
      PerWorkerPerStep(s.bytes_pulled, s.workers, s.steps);
  m.staleness_p50 = HistogramPercentile(s.staleness_histogram, 0.5);
  m.staleness_p99 = HistogramPercentile(s.staleness_histogram, 0.99);
  if (!s.staleness_histogram.empty()) {
    // The summary's maximum is exact; the histogram's last bucket also
    // counts anything larger.
    m.staleness_max = static_cast<int64_t>(s.staleness_max);
  }
  if (s.mode != "allreduce") {  // no shard, no barrier to wait on
    m.barrier_wait_share =
        BarrierWaitShare(s.barrier_wait_s, s.servers, s.workers, s.wall_s);
  }
  m.comm_s_per_step = MeanCommPerStep(m.rows);
  m.steady_s_per_step =
      SteadySecondsPerStepMedian(m.rows, SteadyWarmupSteps(s.steps));
  return m;
}

}  // namespace pstrain
