// What one `psctl run` leaves behind, read back: summary.json and the rows of
// metrics.csv (see README "Running jobs" for both formats).
#ifndef PSTRAIN_COMMON_REPORT_RUN_DATA_H_
#define PSTRAIN_COMMON_REPORT_RUN_DATA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

// One metrics.csv row. Times are worker means of that step; the last row
// (step == steps) is the final evaluation and has no training loss.
struct MetricsRow {
  int64_t step = 0;
  double wall_s = 0;
  std::optional<double> loss;  // absent on the final evaluation row
  int64_t samples = 0;
  double samples_per_s = 0;
  double compute_s = 0;
  double pull_s = 0;
  double push_s = 0;
  std::optional<double> eval_accuracy;  // rows with an evaluation only
  std::optional<double> eval_loss;
};

// summary.json. Keys a mode does not produce keep these defaults.
struct RunSummary {
  std::string mode;
  std::string staleness;  // "0", "2", "inf"
  int workers = 0;
  int servers = 0;
  int64_t steps = 0;
  int64_t global_batch = 0;
  double wall_s = 0;
  double samples_per_s = 0;
  double final_loss = 0;
  double final_eval_loss = 0;
  std::optional<double> final_accuracy;  // null for regressors
  uint64_t bytes_pushed = 0;             // all workers
  uint64_t bytes_pulled = 0;
  uint64_t staleness_max = 0;
  std::vector<uint64_t> staleness_histogram;  // bucket i counts staleness i
  double barrier_wait_s = 0;                  // summed over shards
  bool failed = false;
  std::string message;
};

// Columns are found by their header names, so added columns are ignored.
// Errors name `source` and the line.
absl::StatusOr<std::vector<MetricsRow>> ParseMetricsCsv(
    const std::string& text, const std::string& source);
absl::StatusOr<RunSummary> ParseSummaryJson(const std::string& text,
                                            const std::string& source);

// The whole file as text; NOT_FOUND naming `path` if it cannot be read.
absl::StatusOr<std::string> ReadFileText(const std::string& path);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_REPORT_RUN_DATA_H_
