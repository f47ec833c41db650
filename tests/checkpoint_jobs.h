// The small job the checkpoint and resume tests share.
#ifndef PSTRAIN_TESTS_CHECKPOINT_JOBS_H_
#define PSTRAIN_TESTS_CHECKPOINT_JOBS_H_

#include <cstdint>
#include <string>

#include "common/job_config.h"

namespace pstrain::checkpoint_jobs {

// Job `name` in `mode` with 2 workers of local batch 8 for `steps` steps:
// an MLP 16 -> 24 -> 4 (seed 5) on synthetic data (16 features, 4 classes,
// seed 9, 64 test examples), trained by Adam (two slots) with a cosine
// schedule after 3 warm-up steps, so a resumed job must get the moments and
// the schedule step right, not only the weights; checkpoints every
// `every_steps` steps into `dir`. Not finalized: callers change what their
// test needs, then call FinalizeJobConfig.
JobConfig SmallAdamJob(const std::string& name,
                       pstrain::v1::ConsistencyMode mode, int64_t steps,
                       const std::string& dir, int64_t every_steps);

}  // namespace pstrain::checkpoint_jobs

#endif  // PSTRAIN_TESTS_CHECKPOINT_JOBS_H_
