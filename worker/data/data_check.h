// The job's data, loaded and checked against the model: what every worker
// does before it trains, and what `ps_worker --check_config` (the plan step
// of `psctl run` and `psctl compare`) does before any process is launched, so
// a missing or malformed data file or a model that does not fit the data is
// found first.
#ifndef PSTRAIN_WORKER_DATA_DATA_CHECK_H_
#define PSTRAIN_WORKER_DATA_DATA_CHECK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "worker/data/data.h"

namespace pstrain {

// DataSource::Create(config.data()) (errors name the file and line of a bad
// row; NOT_FOUND names a missing file), then, except for the scalar model,
// checks that the data's feature and class counts equal model.input_dim and
// model.num_classes (INVALID_ARGUMENT naming both and the data file).
absl::StatusOr<std::unique_ptr<DataSource>> LoadJobData(
    const JobConfig& config);

// `ps_worker --check_config`: loads and validates the job file at `path`
// (errors name its line and key), tries network.tcp_congestion_control on
// this host (CheckCongestionControl), then LoadJobData.
absl::Status CheckJobFile(const std::string& path);

// `ps_worker --check_config PATH`'s whole run: CheckJobFile, one line
// ("ps_worker: --check_config PATH: ok" on stdout, or the error on stderr),
// and the exit status, 0 or 2.
int CheckJobFileMain(const std::string& path);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DATA_DATA_CHECK_H_
