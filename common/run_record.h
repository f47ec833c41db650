// The run record: what a job leaves in its output directory, metrics.csv
// (one row per step) and summary.json (one object). This file is the only
// writer and the only reader of both; the coordinator writes them, ps_report
// and the shell tests (through `ps_report summary-get`) read them. Keys and
// columns are a user-facing contract, documented in docs/observability.md:
// add, never rename or drop.
#ifndef PSTRAIN_COMMON_RUN_RECORD_H_
#define PSTRAIN_COMMON_RUN_RECORD_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
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
  // Parameter-server modes: pulling and pushing. All-reduce: pull_s is the
  // ring all-reduce and push_s is 0; comm_s = pull_s + push_s is the
  // mode-neutral name (communication time of the step).
  double pull_s = 0;
  double push_s = 0;
  double comm_s = 0;
  std::optional<double> eval_accuracy;  // rows with an evaluation only
  std::optional<double> eval_loss;
};

// The first failure of a job: which process and what it said.
struct RunFailure {
  std::string process;  // "worker", "server", "coordinator"
  int64_t rank = -1;    // process "worker": its rank
  int64_t shard = -1;   // process "server": its shard
  std::string message;
};

// summary.json. Keys a mode does not produce keep these defaults. A loss
// that is NaN or infinite is written as null (and `diverged` is set by the
// coordinator); a null read back is NaN. final_eval_loss is NaN (null) when
// the job made no final evaluation (it failed, or has no test set).
struct RunSummary {
  std::string job;
  std::string mode;       // "sync", "async", "allreduce"
  std::string staleness;  // "0", "2", "inf"
  int workers = 0;
  int servers = 0;
  int64_t steps = 0;  // steps completed by every worker
  int64_t local_batch = 0;
  int64_t global_batch = 0;
  double wall_s = 0;
  uint64_t samples = 0;
  double samples_per_s = 0;
  double final_loss = 0;
  double final_eval_loss = 0;
  std::optional<double> final_accuracy;  // null for regressors
  // All workers. Parameter-server modes: bytes pushed to / pulled from the
  // servers; all-reduce: ring bytes sent / received. bytes_sent and
  // bytes_received are the mode-neutral names of the same numbers.
  uint64_t bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
  uint64_t staleness_max = 0;
  double staleness_mean = 0;
  std::vector<uint64_t> staleness_histogram;  // bucket i counts staleness i
  double barrier_wait_s = 0;                  // summed over shards
  // Row-sparse tensors (docs/sparse.md), by tensor, summed over shards: the
  // rows stored at the end of the job and the rows evicted during it
  // (server.sparse_max_rows). Empty (and not written) without them.
  std::map<std::string, uint64_t> rows_stored;
  std::map<std::string, uint64_t> rows_evicted;
  bool diverged = false;  // some loss was NaN or infinite
  bool failed = false;
  std::string message;                // why it failed ("" when it did not)
  std::optional<RunFailure> failure;  // the first failure's cause
};

// metrics.csv ----------------------------------------------------------------

// The header line (with '\n') and one row (with '\n').
std::string MetricsCsvHeader();
std::string FormatMetricsRow(const MetricsRow& row);

// Appends rows to metrics.csv. Not thread-safe: callers serialise.
class MetricsCsvWriter {
 public:
  // Opens `path` for appending (creating it and writing the header when it
  // is new or empty: a restarted coordinator never truncates what an
  // earlier one wrote); INVALID_ARGUMENT naming the path when it cannot.
  static absl::StatusOr<std::unique_ptr<MetricsCsvWriter>> Create(
      const std::string& path);
  ~MetricsCsvWriter();
  MetricsCsvWriter(const MetricsCsvWriter&) = delete;
  MetricsCsvWriter& operator=(const MetricsCsvWriter&) = delete;

  // Writes and flushes; DATA_LOSS naming the path on a write error.
  absl::Status Append(const std::vector<MetricsRow>& rows);

 private:
  MetricsCsvWriter(std::string path, std::FILE* file);
  const std::string path_;
  std::FILE* file_;
};

// Columns are found by their header names, so added columns are ignored.
// Errors name `source` and the line.
absl::StatusOr<std::vector<MetricsRow>> ParseMetricsCsv(
    const std::string& text, const std::string& source);

// summary.json ---------------------------------------------------------------

// Always valid JSON (non-finite numbers become null).
std::string SummaryToJson(const RunSummary& summary);
// Writes `path` atomically (a temporary file renamed over it).
absl::Status WriteSummaryJson(const std::string& path,
                              const RunSummary& summary);
absl::StatusOr<RunSummary> ParseSummaryJson(const std::string& text,
                                            const std::string& source);
// The value of `key` in summary.json text, as a shell reads it: strings
// bare, numbers and booleans as JSON, null as "null", objects and arrays as
// compact JSON. A dotted key walks into objects ("failure.process").
// NOT_FOUND naming the key when absent.
absl::StatusOr<std::string> SummaryValue(const std::string& text,
                                         const std::string& key,
                                         const std::string& source);
// One line for people: "worker 2: <message>", "coordinator: <message>".
std::string DescribeFailure(const RunFailure& failure);

// The whole file as text; NOT_FOUND naming `path` if it cannot be read.
absl::StatusOr<std::string> ReadFileText(const std::string& path);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_RUN_RECORD_H_
