#include "tools/bench/whole_job.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_config.h"
#include "common/run_record.h"
#include "tools/bench/job_processes.h"
#include "tools/bench/stats.h"

namespace pstrain::bench {
namespace {

constexpr int kWorkers = 4;
constexpr int kServers = 2;

// `push_streams` > 0: network.push_streams (else the default); a
// `tcp_congestion_control` not empty: network.tcp_congestion_control.
std::string JobYaml(const WholeJobModel& m, int compute_ms, bool overlap,
                    int push_streams, int workers = kWorkers,
                    int servers = kServers,
                    const std::string& tcp_congestion_control = "") {
  std::string network;
  if (push_streams > 0) {
    absl::StrAppend(&network, "  push_streams: ", push_streams, "\n");
  }
  if (!tcp_congestion_control.empty()) {
    absl::StrAppend(&network,
                    "  tcp_congestion_control: ", tcp_congestion_control, "\n");
  }
  return absl::StrCat(
      "# ps_bench whole job ", m.name,
      ": written by tools/bench/whole_job.cc\n", "job:\n  name: bench_", m.name,
      "\n  workers: ", workers, "\n  servers: ", servers,
      "\ntraining:\n  mode: sync\n  optimizer: sgd\n  base_lr: 0.01\n"
      "  local_batch: 4\n  steps: ",
      m.steps, "\n  fail_on_divergence: false\n",
      "model:\n  type: mlp\n  input_dim: ", m.input_dim, "\n  hidden: [",
      absl::StrJoin(m.hidden, ", "), "]\n  num_classes: ", m.num_classes,
      "\n  classifier: true\n",
      "data:\n  source: synthetic\n  num_features: ", m.input_dim,
      "\n  num_classes: ", m.num_classes, "\n  test_examples: 64\n",
      "worker:\n  device: cpu\n  compute_ms: ", compute_ms,
      "\n  overlap: ", overlap ? "true" : "false", "\n",
      network.empty() ? "" : "network:\n", network);
}

// A fresh folder work_dir/ps_bench_job_<name>_XXXXXX holding job.yaml.
absl::StatusOr<std::string> NewJobDir(const std::string& work_dir,
                                      const std::string& name,
                                      const std::string& yaml) {
  std::string tmpl = absl::StrCat(work_dir, "/ps_bench_job_", name, "_XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, " failed"));
  }
  const std::string config = tmpl + "/job.yaml";
  std::ofstream out(config);
  out << yaml;
  out.close();
  if (!out) return absl::InternalError("cannot write " + config);
  return tmpl;
}

absl::StatusOr<std::vector<MetricsRow>> ReadMetrics(const std::string& dir) {
  absl::StatusOr<std::string> csv = ReadFileText(dir + "/metrics.csv");
  if (!csv.ok()) return csv.status();
  return ParseMetricsCsv(*csv, dir + "/metrics.csv");
}

struct JobFigures {
  double comm_s, compute_s, step_s, bytes_per_step;
  // The share of the CPUs the job's processes kept busy, start to end (1:
  // every core all the time).
  double cpu_busy;
  // The same from step 1's end to the last step's (JobRunResult.steady),
  // and the CPU seconds the job's processes used per step there; NaN when
  // that window was not seen.
  double steady_busy, steady_cpu_per_step_s;
};

// `worker_flags`: extra ps_worker flags, with `tag` in the job's folder name.
absl::StatusOr<JobFigures> RunOne(
    const WholeJobModel& m, int compute_ms, bool overlap,
    const std::string& bin_dir, const std::string& work_dir,
    int push_streams = 0, const std::vector<std::string>& worker_flags = {},
    const std::string& tag = "") {
  absl::StatusOr<std::string> dir = NewJobDir(
      work_dir,
      absl::StrCat(
          m.name, "_", compute_ms, "ms", overlap ? "_overlap" : "",
          push_streams > 0 ? absl::StrCat("_", push_streams, "streams") : "",
          tag.empty() ? "" : "_" + tag),
      JobYaml(m, compute_ms, overlap, push_streams));
  if (!dir.ok()) return dir.status();
  JobRunOptions o;
  o.bin_dir = bin_dir;
  o.config = *dir + "/job.yaml";
  o.work_dir = *dir;
  o.workers = kWorkers;
  o.servers = kServers;
  o.steps = m.steps;
  o.worker_flags = worker_flags;
  o.timeout = absl::Seconds(300);
  const CpuTimes cpu_before = ReadChildrenCpuTimes();
  absl::StatusOr<JobRunResult> run = RunJobProcesses(o);
  if (!run.ok()) return run.status();
  const double cpu_busy =
      BusyShare(AddCpuDelta({}, cpu_before, ReadChildrenCpuTimes()));
  absl::StatusOr<std::vector<MetricsRow>> rows = ReadMetrics(*dir);
  if (!rows.ok()) return rows.status();
  absl::StatusOr<std::string> json = ReadFileText(*dir + "/summary.json");
  if (!json.ok()) return json.status();
  absl::StatusOr<RunSummary> summary =
      ParseSummaryJson(*json, *dir + "/summary.json");
  if (!summary.ok()) return summary.status();
  std::vector<double> comm, compute, step;
  const MetricsRow* previous = nullptr;
  for (const MetricsRow& r : *rows) {
    if (r.step >= m.steps) break;  // the final evaluation row
    if (r.step >= 1) {             // step 0 warms up connections
      comm.push_back(r.comm_s);
      compute.push_back(r.compute_s);
      if (previous != nullptr && previous->step == r.step - 1) {
        step.push_back(r.wall_s - previous->wall_s);
      }
    }
    previous = &r;
  }
  if (step.empty() || summary->steps < m.steps) {
    return absl::InternalError(absl::StrCat("job ", *dir, " recorded ",
                                            rows->size(), " rows, ",
                                            summary->steps, " steps"));
  }
  JobFigures f;
  f.comm_s = Median(comm);
  f.compute_s = Median(compute);
  f.step_s = Median(step);
  f.bytes_per_step = double(summary->bytes_pushed) / summary->steps +
                     double(summary->bytes_pulled) / (summary->steps + 1);
  f.cpu_busy = cpu_busy;
  const SteadyWindow& w = run->steady;
  f.steady_busy = w.steps > 0 && w.wall_s > 0 ? w.cpu_s / w.wall_s / HostCores()
                                              : std::nan("");
  f.steady_cpu_per_step_s = w.steps > 0 ? w.cpu_s / w.steps : std::nan("");
  return f;
}

}  // namespace

std::vector<WholeJobModel> WholeJobModels(bool quick) {
  if (quick) return {{"0.5M", 256, {1024, 256}, 10, 5}};
  return {{"4M", 512, {4096, 512}, 10, 8}, {"25M", 1024, {8192, 2048}, 10, 6}};
}

int64_t WholeJobParams(const WholeJobModel& m) {
  int64_t params = 0, in = m.input_dim;
  std::vector<int> widths = m.hidden;
  widths.push_back(m.num_classes);
  for (int w : widths) {
    params += in * w + w;
    in = w;
  }
  return params;
}

absl::StatusOr<std::vector<WholeJobSample>> MeasureWholeJob(
    const WholeJobModel& m, const std::string& bin_dir,
    const std::string& work_dir, double iperf_bytes_per_s,
    double bare_bytes_per_s) {
  absl::StatusOr<JobFigures> alone = RunOne(m, 0, false, bin_dir, work_dir);
  if (!alone.ok()) return alone.status();
  // The same with every push split over two streams (no goal: why the
  // default is one stream: docs/architecture.md, "One push over several
  // streams").
  absl::StatusOr<JobFigures> split =
      RunOne(m, 0, false, bin_dir, work_dir, kSplitPushStreams);
  if (!split.ok()) return split.status();
  const int compute_ms = std::max(1, int(std::lround(alone->comm_s * 1e3)));
  absl::StatusOr<JobFigures> both =
      RunOne(m, compute_ms, true, bin_dir, work_dir);
  if (!both.ok()) return both.status();
  absl::StatusOr<JobFigures> serial =
      RunOne(m, compute_ms, false, bin_dir, work_dir);
  if (!serial.ok()) return serial.status();
  // The workers' settings, each undone in a job of its own, as job 1
  // otherwise (no goal): freed heap returned to the kernel, and every
  // worker's matrix products on all the cores.
  absl::StatusOr<JobFigures> heap_off = RunOne(
      m, 0, false, bin_dir, work_dir, 0, {"--heap_reuse=false"}, "heap_off");
  if (!heap_off.ok()) return heap_off.status();
  absl::StatusOr<JobFigures> all_cores =
      RunOne(m, 0, false, bin_dir, work_dir, 0,
             {absl::StrCat("--compute_threads=", HostCores())}, "all_cores");
  if (!all_cores.ok()) return all_cores.status();
  const std::string p = "job_" + m.name + "_";
  std::vector<WholeJobSample> out = {
      {p + "comm", "ms", alone->comm_s * 1e3},
      {p + "comm_split", "ms", split->comm_s * 1e3},
      {p + "bytes", "MB", alone->bytes_per_step / 1e6},
      {p + "step", "ms", both->step_s * 1e3},
      {p + "compute", "ms", both->compute_s * 1e3},
      {p + "bound", "ms", std::max(both->compute_s, alone->comm_s) * 1e3},
      {p + "step_no_overlap", "ms", serial->step_s * 1e3},
      {p + "step_alone", "ms", alone->step_s * 1e3},
      {p + "step_heap_off", "ms", heap_off->step_s * 1e3},
      {p + "step_all_cores", "ms", all_cores->step_s * 1e3},
      {p + "cpu_busy", "", both->cpu_busy},
      {p + "cpu_busy_no_overlap", "", serial->cpu_busy},
      {p + "steady_busy", "", both->steady_busy},
      {p + "steady_busy_no_overlap", "", serial->steady_busy},
      // What the cores allow: the CPU time a step of the overlapped job
      // used, spread over all the cores.
      {p + "cpu_bound", "ms", both->steady_cpu_per_step_s / HostCores() * 1e3},
      {p + "one", "", 1.0},
  };
  if (iperf_bytes_per_s > 0) {
    out.push_back(
        {p + "ideal", "ms", alone->bytes_per_step / iperf_bytes_per_s * 1e3});
  }
  if (bare_bytes_per_s > 0) {
    out.push_back({p + "ideal_bare", "ms",
                   alone->bytes_per_step / bare_bytes_per_s * 1e3});
  }
  return out;
}

WholeJobModel RealJobModel(uint64_t bytes, int steps, int workers,
                           int servers) {
  constexpr int kInputs = 1024, kClasses = 10;
  const int64_t params = static_cast<int64_t>(bytes / sizeof(float));
  // params = inputs * h + h + h * classes + classes.
  const int hidden = static_cast<int>(
      std::max<int64_t>(1, (params - kClasses) / (kInputs + 1 + kClasses)));
  return {absl::StrCat(bytes / 1000000, "MB_", workers, "w", servers, "s"),
          kInputs,
          {hidden},
          kClasses,
          steps};
}

std::string RealJobYaml(uint64_t bytes, int steps, int workers, int servers,
                        const std::string& tcp_congestion_control) {
  return JobYaml(RealJobModel(bytes, steps, workers, servers), 0, false, 0,
                 workers, servers, tcp_congestion_control);
}

absl::StatusOr<RealJobComm> RealJobCommFromRows(
    const std::vector<MetricsRow>& rows, int first, int steps,
    const std::string& source) {
  std::vector<double> pull, push;
  for (const MetricsRow& r : rows) {
    if (r.step < first || r.step >= steps) continue;
    pull.push_back(r.pull_s);
    push.push_back(r.push_s);
  }
  if (pull.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": no row of steps ", first, "..", steps - 1, " (",
                     rows.size(), " rows)"));
  }
  RealJobComm c;
  c.pull_s = Median(pull);
  c.push_s = Median(push);
  c.steps_used = static_cast<int>(pull.size());
  return c;
}

absl::StatusOr<RealJobComm> MeasureRealJobComm(
    uint64_t bytes, int steps, int workers, int servers,
    const std::string& bin_dir, const std::string& work_dir,
    const std::vector<std::string>& worker_flags,
    const std::string& tcp_congestion_control) {
  if (steps <= kRealJobFirstStep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "real job: steps ", steps, " must be > ", kRealJobFirstStep));
  }
  if (workers < 1 || servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "real job: ", workers, " workers, ", servers, " servers: need >= 1"));
  }
  const WholeJobModel m = RealJobModel(bytes, steps, workers, servers);
  absl::StatusOr<std::string> dir = NewJobDir(
      work_dir, m.name,
      RealJobYaml(bytes, steps, workers, servers, tcp_congestion_control));
  if (!dir.ok()) return dir.status();
  JobRunOptions o;
  o.bin_dir = bin_dir;
  o.config = *dir + "/job.yaml";
  o.work_dir = *dir;
  o.workers = workers;
  o.servers = servers;
  o.steps = steps;
  o.worker_flags = worker_flags;
  o.timeout = absl::Seconds(300);
  absl::StatusOr<JobRunResult> run = RunJobProcesses(o);
  if (!run.ok()) return run.status();
  absl::StatusOr<std::vector<MetricsRow>> rows = ReadMetrics(*dir);
  if (!rows.ok()) return rows.status();
  absl::StatusOr<RealJobComm> c = RealJobCommFromRows(
      *rows, kRealJobFirstStep, steps, *dir + "/metrics.csv");
  if (!c.ok()) return c.status();
  c->params = WholeJobParams(m);
  return c;
}

std::vector<WholeJobGoal> WholeJobGoals(const std::vector<WholeJobModel>& ms) {
  std::vector<WholeJobGoal> goals;
  for (const WholeJobModel& m : ms) {
    const std::string p = "job_" + m.name + "_";
    const std::string what = absl::StrCat(
        "whole job, MLP ", m.name, " (", WholeJobParams(m), " params), ",
        kWorkers, " workers, ", kServers, " servers, sync: ");
    goals.push_back({what + "communication per step / (bytes all workers "
                            "moved / iperf3 rate)",
                     p + "comm", p + "comm", p + "ideal", 1.5});
    goals.push_back({what + "communication per step / (the same bytes / a "
                            "bare gRPC stream's rate: the round's largest "
                            "size up to 64 MB, up and down)",
                     p + "comm", p + "comm", p + "ideal_bare", 0});
    goals.push_back({what + absl::StrCat("communication with every push split "
                                         "over ",
                                         kSplitPushStreams,
                                         " streams / as shipped (one stream)"),
                     p + "comm_split", p + "comm_split", p + "comm", 0});
    goals.push_back({what + "step time with compute_ms = comm and "
                            "worker.overlap / max(compute, comm)",
                     p + "step", p + "step", p + "bound", 1.1});
    goals.push_back({what + "the same without overlap / max(compute, comm)",
                     p + "step_no_overlap", p + "step_no_overlap", p + "bound",
                     0});
    // Near 1, the machine's CPUs, not the schedule, bound the step: the
    // emulated compute sleeps, but the real math, the servers and the
    // loopback transfers all run on these cores.
    // A share of the CPUs: no unit, over 1.
    auto share = [&](const std::string& label, const std::string& series) {
      goals.push_back({what + label, p + series, p + series, p + "one", 0, ""});
    };
    share(
        "with overlap: share of the CPUs the job's processes kept busy "
        "(1 = all, all the time)",
        "cpu_busy");
    share("without overlap: the same share", "cpu_busy_no_overlap");
    share(
        "with overlap, steps 1 to the last: share of the CPUs busy (no "
        "start-up, no shutdown)",
        "steady_busy");
    share("without overlap, steps 1 to the last: the same",
          "steady_busy_no_overlap");
    goals.push_back(
        {what + absl::StrCat("step time with overlap / (the CPU time its "
                             "processes used per step / ",
                             HostCores(), " cores)"),
         p + "step", p + "step", p + "cpu_bound", 0});
    goals.push_back({what + "no emulated compute: step time with the "
                            "workers' freed heap returned to the kernel "
                            "(ps_worker --heap_reuse=false) / as shipped",
                     p + "step_heap_off", p + "step_heap_off", p + "step_alone",
                     0});
    goals.push_back(
        {what + absl::StrCat("no emulated compute: step time with every "
                             "worker's matrix products on all ",
                             HostCores(), " cores / as shipped (",
                             WorkerComputeThreads(kWorkers), ")"),
         p + "step_all_cores", p + "step_all_cores", p + "step_alone", 0});
  }
  return goals;
}

}  // namespace pstrain::bench
