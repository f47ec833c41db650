// `psctl study sparse`: the fourth study of issue 28, the regime parameter
// servers were built for. The wide-and-deep job runs with embedding tables
// of growing size under three ways of exchanging gradients: the sync
// parameter server (each worker pushes and pulls only the rows its batch
// touches), the dense ring all-reduce (the table's whole gradient) and the
// sparse all-gather (the touched rows, all-gathered around the ring); and,
// as the all-reduce users actually run, PyTorch DDP (gloo,
// DistributedDataParallel) on the same model with a dense table gradient.
// Per table size and mode the bytes sent per worker per step and the steady
// seconds per step are summarised (median and min-max over repeats with
// different data seeds), drawn on log-log axes, and the claims below are
// decided from the medians by code: "supported" or "not supported", with
// the numbers each rests on and its rule.
#ifndef PSTRAIN_TOOLS_REPORT_SPARSE_STUDY_H_
#define PSTRAIN_TOOLS_REPORT_SPARSE_STUDY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/run_record.h"
#include "nlohmann/json.hpp"
#include "tools/report/study_plot.h"

namespace pstrain {

// The modes (psctl compare's grammar).
inline constexpr char kSparsePs[] = "sync";
inline constexpr char kSparseDense[] = "allreduce:dense";
inline constexpr char kSparseAllgather[] = "allreduce:allgather";
// PyTorch DDP (psctl compare's mode ddp, examples/torch/train_wide_deep.py).
inline constexpr char kSparseDdp[] = "ddp";

// Bytes that change by less than this fraction "do not grow" (10%).
inline constexpr double kSparseFlat = 0.10;
// "Linear": the log-log slope of bytes against rows lies in [0.9, 1.1].
inline constexpr double kSparseSlopeTolerance = 0.10;
// The all-gather's bytes "stay near" the PS's: at most this many times
// theirs. A worker sends N - 1 blocks of its touched rows around the ring
// where it pushes its own rows once to the servers, so N - 1 = 3 for the
// study's 4 workers.
inline constexpr double kSparseAllgatherBytesFactor = 3.0;
// Time per step "does not grow" / "stays near" within this factor: wide,
// because steady s / step on a shared 2-core machine moves by tens of
// percent between repeats.
inline constexpr double kSparseTimeFactor = 1.5;
// Dense all-reduce "pays in time": at its largest table at least this many
// times the PS's s / step (and so must DDP).
inline constexpr double kSparseDenseSlowdown = 2.0;
// DDP's bytes "move the whole table like the dense ring": within this
// factor of allreduce:dense's, either way (both move 2(N - 1)/N x the fp32
// model per step; DDP's are computed, gloo exposing no counters).
inline constexpr double kSparseDdpBytesFactor = 1.25;

// One run: its figures from compare.json and its metrics.csv.
struct SparseRun {
  bool failed = false;
  double sent_bytes = 0;      // bytes sent per worker per step
  double received_bytes = 0;  // received per worker per step
  double s_per_step = 0;      // wall_s / steps (the first step included)
  // From metrics.csv (SteadySecondsPerStep); nullopt when it has too few
  // training rows.
  std::optional<double> steady_s_per_step;
  // summary.json says its bytes are computed, not counted (mode ddp: gloo
  // exposes no counters; python/pstrain/ddp.py).
  bool bytes_computed = false;
};

// table rows -> mode label -> runs (every repeat).
using SparseRuns =
    std::map<int64_t, std::map<std::string, std::vector<SparseRun>>>;

// Steady seconds per step of one run: (wall at the last training row -
// wall at the second) / the steps between them, so the first step (buffer
// allocation, first touches, connection set-up) is left out, and so is a
// final evaluation row (it has no loss). nullopt with fewer than three
// training rows.
std::optional<double> SteadySecondsPerStep(std::vector<MetricsRow> rows);

// Adds the runs of one compare.json text (named `source` in errors) to
// `runs[rows]`; each successful run's metrics.csv is read from
// COMPARE_DIR/<its dir>/metrics.csv (`compare_dir`), and its
// summary.json's "bytes_computed" (false when absent). INVALID_ARGUMENT for
// malformed JSON, a run without its byte counts, or an unreadable
// metrics.csv.
absl::Status AddSparseCompare(const std::string& text,
                              const std::string& source,
                              const std::string& compare_dir, int64_t rows,
                              SparseRuns* runs);

struct SparseClaim {
  std::string id;         // "ps-bytes-flat"
  std::string statement;  // the claim
  bool supported = false;
  std::string evidence;  // the numbers it rests on, and the rule applied
};

// The claims, decided from the medians of `runs` (failed runs left out):
//   ps-bytes-flat: the PS's bytes sent at the largest table are within
//     kSparseFlat of those at the smallest;
//   dense-bytes-linear: dense all-reduce's bytes sent grow with a log-log
//     slope in [1 - tol, 1 + tol] between its smallest and largest table;
//   allgather-bytes-near-ps: at every table both ran, the all-gather's
//     bytes sent are at most kSparseAllgatherBytesFactor x the PS's;
//   ps-time-flat: the PS's steady s / step at the largest table is at most
//     kSparseTimeFactor x that at the smallest;
//   dense-time-grows: dense all-reduce's steady s / step at its largest
//     table is at least kSparseDenseSlowdown x its own at the smallest and
//     x the PS's at that table;
//   allgather-time-near-ps: at every table both ran, the all-gather's
//     steady s / step is at most kSparseTimeFactor x the PS's;
//   ddp-bytes-like-dense: at every table both ran, DDP's bytes sent are
//     within kSparseDdpBytesFactor of allreduce:dense's, either way (the
//     evidence says when DDP's bytes are computed);
//   ddp-time-grows: DDP's steady s / step at its largest table is at least
//     kSparseDenseSlowdown x the PS's at that table.
// A claim without the data it needs (a mode that did not run or failed,
// fewer than two table sizes) is "not supported" and says what is missing.
std::vector<SparseClaim> JudgeSparseClaims(const SparseRuns& runs);

// The two log-log plots: bytes sent per worker per step and steady s / step
// against table rows, one series per mode.
std::vector<StudyPlot> SparsePlots(const SparseRuns& runs);

struct SparseStudyInputs {
  std::string command;  // how the study was run
  std::string setup;    // job, sizes, modes, repeats (one paragraph)
  SparseRuns runs;
};

std::string SparseStudyMarkdown(const SparseStudyInputs& in,
                                const std::vector<SparseClaim>& claims,
                                const StudyPlotOutcome& plots);
nlohmann::json SparseStudyJson(const SparseStudyInputs& in,
                               const std::vector<SparseClaim>& claims,
                               const StudyPlotOutcome& plots);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_SPARSE_STUDY_H_
