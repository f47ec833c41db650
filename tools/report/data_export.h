// The C++ worker's examples of one rank, written to a file for a Python
// worker (docs/python.md, "Synthetic data"): the Python package does not
// generate the synthetic task; it reads this export, so a Python worker
// trains on the very examples worker/data generates, bit for bit.
#ifndef PSTRAIN_TOOLS_REPORT_DATA_EXPORT_H_
#define PSTRAIN_TOOLS_REPORT_DATA_EXPORT_H_

#include <string>

#include "absl/status/status.h"
#include "common/job_config.h"

namespace pstrain {

// File layout (little-endian, no padding):
//   8 bytes  magic "PSDATA1\n"
//   int64    rank, world, from_step, to_step, slice (examples per step:
//            local_batch x grad_accum_steps), train_n = (to_step -
//            from_step) x slice, dim, num_cat, test_n
//   float32  train x [train_n, dim]; float32 train y [train_n];
//   uint64   train cat [train_n, num_cat];
//   float32  test x [test_n, dim]; float32 test y [test_n];
//   uint64   test cat [test_n, num_cat]
// Train rows are rank `rank`'s examples of steps from_step .. to_step - 1 in
// step order: step t's rows are the ids FirstExampleId(t, rank, world, slice)
// .. + slice - 1, as the C++ worker reads them. The test rows are the whole
// test set (ids 0 .. test_n - 1; each rank evaluates its TestSliceRange).
// y holds class ids as floats (or regression targets), as Batch does.
inline constexpr char kDataExportMagic[] = "PSDATA1\n";

// Writes the export of `config`'s data (any source worker/data reads) for
// `rank` of job.workers and steps [from_step, to_step) to `path`.
// INVALID_ARGUMENT naming the argument for a rank outside [0, job.workers)
// or steps outside [0, training.steps]; the data source's own errors
// (data.* keys, missing files) as DataSource::Create gives them; a file
// that cannot be written is the path and errno's text. Nothing is left at
// `path` on error (written to a temporary file, then renamed).
absl::Status ExportRankData(const JobConfig& config, int rank,
                            int64_t from_step, int64_t to_step,
                            const std::string& path);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_DATA_EXPORT_H_
