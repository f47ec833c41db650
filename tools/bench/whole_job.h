// ps_bench's whole-job goals (issue 9): real jobs of an MLP with 4 workers
// and 2 servers, separate processes on loopback, sync mode, emulated compute
// (worker.compute_ms), read back from metrics.csv and summary.json.
//
// Per model and round, four jobs one after the other:
//  1. no emulated compute: the communication per step (median over steps of
//     the workers' mean pull_s + push_s, metrics.csv comm_s) against the
//     ideal time (bytes all workers moved in a step, summary.json
//     bytes_pushed / steps + bytes_pulled / (steps + 1) for the final pull,
//     over iperf3's rate of the same round: the workers and servers share
//     this host's loopback, so their traffic together meets one wire);
//     goal <= 1.5; and, no goal, against the same bytes over a bare gRPC
//     stream's rate of the round (what gRPC itself would need);
//  1b. the same with network.push_streams kSplitPushStreams (every push
//     split over two streams): its communication against job 1's (no goal;
//     why the default is one stream);
//  2. worker.compute_ms set to the communication time of job 1 (so both
//     matter equally: the case overlap helps most) and worker.overlap: the
//     step time (median over steps of the difference of consecutive wall_s)
//     against max(compute, communication) = max(the workers' mean compute_s
//     of this job, the communication of job 1); goal <= 1.1 (1.0 is perfect
//     overlap, 2.0 none);
//  3. the same without overlap, for comparison (no goal);
//  4., 5. as job 1, with the workers' freed heap returned to the kernel
//     (ps_worker --heap_reuse=false), and with every worker's matrix
//     products on all the cores (--compute_threads): their step time
//     against job 1's (no goal; what the shipped settings buy).
// For jobs 2 and 3 also the share of the CPUs their processes kept busy
// (no goal): near 1, the cores bound the step, not the schedule.
// The first step (connections, first allocations) is left out.
#ifndef PSTRAIN_TOOLS_BENCH_WHOLE_JOB_H_
#define PSTRAIN_TOOLS_BENCH_WHOLE_JOB_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/run_record.h"

namespace pstrain::bench {

// The streams of job 1b's split pushes (network.push_streams).
inline constexpr int kSplitPushStreams = 2;

struct WholeJobModel {
  std::string name;  // "4M": series and figures are named after it
  int input_dim = 0;
  std::vector<int> hidden;
  int num_classes = 10;
  int steps = 8;
};

// 4 M and 25 M parameters; --quick: 0.5 M only (short CI run).
std::vector<WholeJobModel> WholeJobModels(bool quick);

// Number of parameters of the MLP (weights and biases).
int64_t WholeJobParams(const WholeJobModel& model);

struct WholeJobSample {
  std::string name;  // e.g. "job_4M_comm"
  std::string unit;
  double value;
};

// Runs the jobs of one round for `model` (binaries under bin_dir, files
// under work_dir) and returns its figures: job_<name>_comm and
// job_<name>_comm_split (ms),
// job_<name>_ideal (ms, needs iperf_bytes_per_s > 0, else left out),
// job_<name>_bytes (MB per step), job_<name>_step, job_<name>_compute,
// job_<name>_bound = max(compute, comm) and job_<name>_step_no_overlap (ms),
// job_<name>_step_alone, _step_heap_off and _step_all_cores (ms, jobs 1, 4
// and 5), job_<name>_cpu_busy and job_<name>_cpu_busy_no_overlap (the share
// of the CPUs the jobs of steps 2 and 3 kept busy, getrusage of the
// children over their whole run), job_<name>_steady_busy and
// _steady_busy_no_overlap (the same from step 1's end to the last step's:
// JobRunResult.steady), job_<name>_cpu_bound (ms: job 3's CPU time per step
// there over the cores) and job_<name>_one (1, the shares' denominator).
// Errors name the job's logs.
// `bare_bytes_per_s` (> 0, else left out): a bare gRPC stream's rate in the
// same round, for job_<name>_ideal_bare (ms; no goal): the bytes over that
// rate, the communication gRPC itself would need.
absl::StatusOr<std::vector<WholeJobSample>> MeasureWholeJob(
    const WholeJobModel& model, const std::string& bin_dir,
    const std::string& work_dir, double iperf_bytes_per_s,
    double bare_bytes_per_s = 0);

// The real-job rows of issue 26: `workers` ps_worker and `servers`
// ps_server processes through the coordinator (RunJobProcesses, as ./psctl
// run starts them), sync SGD (lr 0.01), local batch 4, synthetic data, no
// emulated compute, an MLP of 1024 inputs, one hidden layer and 10 classes
// sized to about `bytes` of fp32 parameters (RealJobModel), `steps` steps.
// Its communication per step comes from metrics.csv (whose times are the
// workers' means of each step): the medians of pull_s and push_s over steps
// kRealJobFirstStep..steps-1 (steps 0..2 warm up the connections and the
// first pages).
inline constexpr int kRealJobFirstStep = 3;
struct RealJobComm {
  int64_t params = 0;
  double pull_s = 0;
  double push_s = 0;
  int steps_used = 0;  // rows the medians are over
};
// The model's name says its size and layout: "4MB_1w1s", "16MB_4w2s".
WholeJobModel RealJobModel(uint64_t bytes, int steps, int workers = 1,
                           int servers = 1);
// The job file of that job (sync SGD, no emulated compute, no overlap);
// `tcp_congestion_control` not empty: network.tcp_congestion_control.
std::string RealJobYaml(uint64_t bytes, int steps, int workers, int servers,
                        const std::string& tcp_congestion_control = "");
// The medians of the rows of steps first..steps-1 (the final evaluation
// row, step >= steps, left out). FAILED_PRECONDITION naming `source` when
// no row is in that range.
absl::StatusOr<RealJobComm> RealJobCommFromRows(
    const std::vector<MetricsRow>& rows, int first, int steps,
    const std::string& source);
// Runs the job under work_dir with the binaries of bin_dir, every ps_worker
// also given `worker_flags` and, when not empty, the job file
// `network.tcp_congestion_control: <tcp_congestion_control>` (the servers'
// connections); errors name the job's folder and logs. steps >=
// kRealJobFirstStep + 1; workers, servers >= 1.
absl::StatusOr<RealJobComm> MeasureRealJobComm(
    uint64_t bytes, int steps, int workers, int servers,
    const std::string& bin_dir, const std::string& work_dir,
    const std::vector<std::string>& worker_flags = {},
    const std::string& tcp_congestion_control = "");

// The ps_worker flag of the real job measured beside the shipped one (no
// goal): OpenBLAS's own idle time, 2^28 cycles, where the worker's default
// is 2^20 (worker/compute/cpu_backend.h, LimitOpenBlasSpin).
inline constexpr char kOpenBlasSpinFlag[] = "--openblas_thread_timeout=28";

struct WholeJobGoal {
  std::string figure;
  std::string measured;                // the series shown as measured (ms)
  std::string numerator, denominator;  // the ratio's series
  double goal;              // ratio <= goal; 0: a figure without a goal
  std::string unit = "ms";  // of `measured`
};
std::vector<WholeJobGoal> WholeJobGoals(const std::vector<WholeJobModel>& m);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_WHOLE_JOB_H_
