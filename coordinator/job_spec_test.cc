// The JobSpec the coordinator publishes: the failure policy's answers for
// workers (JobSpec.worker_recovery), which Python workers read instead of
// training.on_failure.
#include "coordinator/job_spec.h"

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/job_config.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

namespace v1 = pstrain::v1;
using v1::TrainingConfig;

struct RecoveryCase {
  TrainingConfig::OnFailure on_failure;
  v1::ConsistencyMode mode;
  bool rolls_back;
  bool stands_in;
  bool hosts_ranks;
};

TEST(JobSpecTest, WorkerRecoveryHoldsThePolicysAnswers) {
  const RecoveryCase cases[] = {
      {TrainingConfig::FAIL, v1::MODE_SYNC, false, false, false},
      {TrainingConfig::FAIL, v1::MODE_ASYNC, false, false, false},
      {TrainingConfig::FAIL, v1::MODE_ALLREDUCE, false, false, false},
      {TrainingConfig::RESTART, v1::MODE_SYNC, true, false, false},
      {TrainingConfig::RESTART, v1::MODE_ASYNC, true, false, false},
      {TrainingConfig::RESTART, v1::MODE_ALLREDUCE, true, false, false},
      {TrainingConfig::ELASTIC, v1::MODE_SYNC, false, true, false},
      {TrainingConfig::ELASTIC, v1::MODE_ASYNC, false, false, false},
      {TrainingConfig::ELASTIC, v1::MODE_ALLREDUCE, true, false, true},
  };
  for (const RecoveryCase& k : cases) {
    JobConfig c = DefaultJobConfig();
    c.mutable_job()->set_workers(3);
    c.mutable_training()->set_mode(k.mode);
    c.mutable_training()->set_on_failure(k.on_failure);
    c.mutable_training()->set_min_workers(2);
    absl::StatusOr<v1::JobSpec> job = MakeJobSpec(c);
    const std::string what =
        absl::StrCat(TrainingConfig::OnFailure_Name(k.on_failure), " in ",
                     v1::ConsistencyMode_Name(k.mode));
    ASSERT_TRUE(job.ok()) << what << ": " << job.status();
    ASSERT_TRUE(job->has_worker_recovery()) << what;
    EXPECT_EQ(job->worker_recovery().rolls_back(), k.rolls_back) << what;
    EXPECT_EQ(job->worker_recovery().stands_in(), k.stands_in) << what;
    EXPECT_EQ(job->worker_recovery().hosts_ranks(), k.hosts_ranks) << what;
  }
}

}  // namespace
}  // namespace pstrain
