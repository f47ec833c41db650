// `psctl study scaling`: the scaling study of issue 28. The same job (fixed
// local batch, emulated compute) runs with N = 1, 2, 4, 8 workers in four
// designs: the synchronous parameter server with K = 1, 2 or 4 servers
// ("ps:K") and ring all-reduce ("allreduce"), on links shaped by tc so that
// bytes, not compute, bound a step. Per design and N the report gives the
// steady-state seconds per step (median and min-max over repeats), the
// throughput, the speedup over N = 1 and the scaling efficiency (speedup /
// N), beside an analytic model of the bytes each link carries per step and
// the time they take at the shaped rate. Its claims are decided here, by
// code, from the medians: each is "supported" or "not supported" with the
// numbers it rests on.
//
// Analytic model (M: the model's bytes, R: the link rate in bytes/s, c: the
// compute time of one step):
//   ps:K       each server's link carries N x M / K each way per step (every
//              worker pushes its gradient slice to it and pulls the weights
//              back); each worker's link carries M each way. The push and the
//              pull are sequential (sync: pulls wait for every push), so
//              t = c + 2 x max(N x M / K, M) / R.
//   allreduce  each worker's link carries 2 (N - 1) / N x M each way (a
//              reduce-scatter and an all-gather of N - 1 chunks of M / N;
//              sending and receiving overlap), so t = c + 2 (N - 1) / N x M
//              / R; 0 bytes at N = 1.
// Latency, framing and the CPU are left out; the report says so.
//
// Everything here is a pure function of its arguments (no files, no clock).
#ifndef PSTRAIN_TOOLS_REPORT_SCALING_STUDY_H_
#define PSTRAIN_TOOLS_REPORT_SCALING_STUDY_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/run_record.h"
#include "nlohmann/json.hpp"
#include "tools/report/report_math.h"

namespace pstrain {

inline constexpr char kRingDesign[] = "allreduce";

// Efficiency below this is "saturated": the design's saturation point is the
// smallest N of the grid whose median efficiency falls below it.
inline constexpr double kSaturatedBelow = 0.8;
// "Falls": the efficiency at the largest N is at least this much (absolute)
// below the efficiency at the smallest N >= 2. "Stays": it is less than
// kStays below it.
inline constexpr double kFalls = 0.15;
inline constexpr double kStays = 0.10;
// The analytic model "explains" a cell when its predicted s / step is within
// this relative distance of the measured median.
inline constexpr double kModelTolerance = 0.30;

// A design label: "ps:K" (K >= 1) or "allreduce". Returns K for "ps:K", 0
// for the ring; INVALID_ARGUMENT naming the label otherwise.
absl::StatusOr<int> ServersOfDesign(const std::string& design);

// Steady-state seconds per step from metrics.csv rows: over the training
// rows (those with a loss) after the first `warmup` steps, (wall at the last
// step - wall at step `warmup`) / (the steps between); with warmup 0, from
// the first training row. `measured_steps` gets the number of steps it spans.
// FAILED_PRECONDITION when fewer than two training rows are left to span.
absl::StatusOr<double> SteadySecondsPerStep(const std::vector<MetricsRow>& rows,
                                            int64_t warmup,
                                            int64_t* measured_steps);

struct ScalingRun {
  bool failed = false;
  std::string why;  // failed: the reason
  double s_per_step = 0;
  int64_t measured_steps = 0;
  // Bytes one worker sent per step, as the run counted them (its pushes, or
  // its ring sends): the model's per-worker figure, measured.
  double sent_bytes_per_worker_step = 0;
};

// design -> N -> runs (one per repeat).
using ScalingRuns =
    std::map<std::string, std::map<int, std::vector<ScalingRun>>>;

struct ScalingSetup {
  double model_bytes = 0;  // M: the model's fp32 bytes
  // R in bytes/s; nullopt when the links were not shaped (loopback): the
  // bytes are still modelled, the times are not.
  std::optional<double> link_bytes_per_s;
  double compute_s = 0;  // c: emulated compute per step
  int64_t local_batch = 0;
  int64_t warmup_steps = 0;
  int64_t steps = 0;  // training.steps of every run
};

// The analytic model of one cell (see the top of this file).
struct LinkModel {
  double server_link_bytes = 0;  // per server link, each way (0 for the ring)
  double worker_link_bytes = 0;  // per worker link, each way
  std::optional<double> predicted_s_per_step;  // with a shaped rate only
};
LinkModel AnalyticModel(int servers, int workers, const ScalingSetup& setup);

// One cell of the table: a design at N workers.
struct ScalingPoint {
  std::string design;
  int workers = 0;
  int runs = 0;
  int runs_ok = 0;
  std::string why_failed;  // the first failure's reason
  std::optional<Spread> s_per_step;
  std::optional<double> samples_per_s;  // N x local batch / median s / step
  std::optional<double> sent_bytes_per_worker_step;  // median
  // Against the same design's median at N = 1: speedup = throughput(N) /
  // throughput(1), efficiency = speedup / N. nullopt without an N = 1 median.
  std::optional<double> speedup;
  std::optional<double> efficiency;
  LinkModel model;
  std::optional<double> predicted_efficiency;
};

// Every cell, designs in order ps:1, ps:2, ..., allreduce, N ascending.
std::vector<ScalingPoint> ScalingPoints(const ScalingRuns& runs,
                                        const ScalingSetup& setup);

struct ScalingClaim {
  std::string id;
  std::string statement;
  bool supported = false;
  std::string evidence;  // the numbers and the rule
};

// The claims, decided from the medians in `points`:
//  ps1-falls-ring-stays: from the smallest N >= 2 to the largest N, ps:1's
//    efficiency falls by >= kFalls while the ring's falls by < kStays (from
//    N >= 2, where both designs communicate: the ring sends nothing at N =
//    1);
//  servers-move-saturation: the saturation point (first N with efficiency
//    < kSaturatedBelow; beyond the grid when none) never moves down as K
//    grows and is later at the largest K than at the smallest, with the
//    smallest K saturating inside the grid;
//  model-explains-time: with shaped links, the analytic prediction is
//    within kModelTolerance of the measured median s / step in at least 3
//    of every 4 cells with N >= 2.
std::vector<ScalingClaim> JudgeScalingClaims(
    const std::vector<ScalingPoint>& points, const ScalingSetup& setup);

// The saturation point of `design`: the first N with efficiency below
// kSaturatedBelow (measured, or predicted when `predicted`); nullopt when
// none in the grid is (or no efficiency is known: see `known`).
std::optional<int> SaturationPoint(const std::vector<ScalingPoint>& points,
                                   const std::string& design, bool predicted,
                                   bool* known);

struct ScalingInputs {
  std::string command;  // how the study was run
  std::string setup;    // job, emulation, repeats (one paragraph)
  std::string links;    // the transport limits in force (one line)
  ScalingSetup model;
  ScalingRuns runs;
};

// A text plot of the median efficiency against N, one letter per design
// (A, B, C ... for ps:1, ps:2, ...; R for the ring).
std::string EfficiencyTextPlot(const std::vector<ScalingPoint>& points);
// The gnuplot script drawing efficiency.dat (written by ScalingPlotData) to
// efficiency.png and efficiency.svg in the current directory.
std::string ScalingPlotScript(const std::vector<ScalingPoint>& points);
std::string ScalingPlotData(const std::vector<ScalingPoint>& points);

// `plot`: a markdown line about the gnuplot plot (the image, or why none).
std::string ScalingMarkdown(const ScalingInputs& in,
                            const std::vector<ScalingPoint>& points,
                            const std::vector<ScalingClaim>& claims,
                            const std::string& plot);
nlohmann::json ScalingJson(const ScalingInputs& in,
                           const std::vector<ScalingPoint>& points,
                           const std::vector<ScalingClaim>& claims);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_SCALING_STUDY_H_
