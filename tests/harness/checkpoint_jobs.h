// What the checkpoint and resume tests share: the small job, the undisturbed
// run a suite compares against, and the comparisons.
#ifndef PSTRAIN_TESTS_HARNESS_CHECKPOINT_JOBS_H_
#define PSTRAIN_TESTS_HARNESS_CHECKPOINT_JOBS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/job_config.h"
#include "tests/harness/in_process_job.h"
#include "tests/harness/test_files.h"

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

// Copies checkpoint `step` of root `from` into root `to`: the only state a
// job resumed from it has (later checkpoints "lost in the crash").
void CopyCheckpoint(const std::string& from, uint64_t step,
                    const std::string& to);

// Every tensor's weights, then its slots, in checkpoint `dir`, whatever its
// layout (any number of shards); empty, with a test failure, when it cannot
// be read.
std::vector<std::vector<float>> AllState(const std::string& dir);

// Expects `got` to be `want` (both from AllState), bit for bit.
void ExpectSameState(const std::vector<std::vector<float>>& got,
                     const std::vector<std::vector<float>>& want);

// Expects each worker of `got` to end with the weights the same worker of
// `want` ended with, bit for bit (as many workers, as many tensors).
void ExpectSameFinals(const InProcessJob& got, const InProcessJob& want);

// A suite whose tests compare against one undisturbed job, run once for the
// whole suite (in TempDir("full")): Derived::UndisturbedConfig(dir) is its
// config. Each test should ASSERT_NE(full_, nullptr) first (null when the
// job failed, which SetUpTestSuite reports).
template <typename Derived>
class UndisturbedJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    full_dir_ = new std::string(test_files::TempDir("full"));
    auto job = RunInProcessJob(Derived::UndisturbedConfig(*full_dir_));
    ASSERT_TRUE(job.ok()) << job.status();
    full_ = new InProcessJob(*std::move(job));
  }
  static void TearDownTestSuite() {
    delete full_;
    full_ = nullptr;
    delete full_dir_;
    full_dir_ = nullptr;
  }
  static std::string* full_dir_;
  static InProcessJob* full_;
};
template <typename Derived>
std::string* UndisturbedJobTest<Derived>::full_dir_ = nullptr;
template <typename Derived>
InProcessJob* UndisturbedJobTest<Derived>::full_ = nullptr;

}  // namespace pstrain::checkpoint_jobs

#endif  // PSTRAIN_TESTS_HARNESS_CHECKPOINT_JOBS_H_
