#include "coordinator/job_outcome.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/client_text.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

StepTotals Totals(double wall_s) {
  StepTotals t;
  t.steps = 4;
  t.samples = 64;
  t.wall_s = wall_s;
  t.final_loss = 0.25;
  t.has_final_eval = true;
  t.final_eval_loss = 0.5;
  return t;
}

TEST(JobOutcomeRecorderTest, KeepsTheFirstFailureOnly) {
  JobOutcomeRecorder r(2);
  EXPECT_TRUE(r.Fail({"worker", 1, -1, "boom"}, kStart));
  EXPECT_FALSE(r.Fail({"server", -1, 0, "later"}, kStart + absl::Seconds(1)));
  EXPECT_TRUE(r.failed());
  EXPECT_EQ(r.message(), DescribeFailure({"worker", 1, -1, "boom"}));
  const JobOutcome o = r.Summary(Totals(1), kStart);
  ASSERT_TRUE(o.failure.has_value());
  EXPECT_EQ(o.failure->process, "worker");
  EXPECT_EQ(o.failure->rank, 1);
  EXPECT_EQ(o.message, r.message());
}

// A Ctrl-C read in the wrong order (coordinator_service.h,
// CoordinatorStoppedToo): the cause changes, the time of the failure stays;
// a job that has not failed has no cause to replace.
TEST(JobOutcomeRecorderTest, ReattributeReplacesTheCauseOnly) {
  JobOutcomeRecorder r(1);
  r.Reattribute({"coordinator", -1, -1, "stopped"});
  EXPECT_FALSE(r.failed());
  ASSERT_TRUE(r.Fail({"worker", 0, -1, "stopped by signal"},
                     kStart + absl::Seconds(3)));
  r.Reattribute({"coordinator", -1, -1, "stopped"});
  EXPECT_EQ(r.message(), DescribeFailure({"coordinator", -1, -1, "stopped"}));
  const JobOutcome o = r.Summary(Totals(1), kStart);
  ASSERT_TRUE(o.failure.has_value());
  EXPECT_EQ(o.failure->process, "coordinator");
  EXPECT_EQ(o.message, r.message());
  EXPECT_DOUBLE_EQ(o.wall_s, 3);  // until the failure, as before
}

TEST(JobOutcomeRecorderTest, AFailedJobRanUntilItFailed) {
  JobOutcomeRecorder r(1);
  ASSERT_TRUE(r.Fail({"worker", 0, -1, "hung"}, kStart + absl::Seconds(70)));
  EXPECT_DOUBLE_EQ(r.Summary(Totals(6.3), kStart).wall_s, 70);
  // Never started: the last complete step's time stands.
  EXPECT_DOUBLE_EQ(r.Summary(Totals(6.3), absl::InfinitePast()).wall_s, 6.3);
}

TEST(JobOutcomeRecorderTest, ASucceededJobTakesTheTotalsAndSumsTheBytes) {
  JobOutcomeRecorder r(3);
  r.SetBytes(0, 10, 1);
  r.SetBytes(2, 20, 2);
  r.SetBytes(0, 15, 3);  // a later report's totals replace the earlier ones
  EXPECT_TRUE(r.Diverged());
  EXPECT_FALSE(r.Diverged());
  const JobOutcome o = r.Summary(Totals(2.5), kStart);
  EXPECT_FALSE(o.failed);
  EXPECT_TRUE(o.diverged);
  EXPECT_EQ(o.steps, 4u);
  EXPECT_EQ(o.samples, 64u);
  EXPECT_DOUBLE_EQ(o.wall_s, 2.5);
  EXPECT_DOUBLE_EQ(o.final_loss, 0.25);
  EXPECT_TRUE(o.has_final_eval);
  EXPECT_DOUBLE_EQ(o.final_eval_loss, 0.5);
  EXPECT_EQ(o.bytes_pushed, 35u);
  EXPECT_EQ(o.bytes_pulled, 5u);
}

TEST(WorkerErrorFailureTest, DropsTheWorkersPrefixAndCutsLongText) {
  const RunFailure f = WorkerErrorFailure(2, "worker 2: out of memory");
  EXPECT_EQ(f.process, "worker");
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.message, "out of memory");
  // Another rank's prefix is kept: it says something.
  EXPECT_EQ(WorkerErrorFailure(1, "worker 2: x").message, "worker 2: x");
  const std::string long_text(kMaxMessageBytes + 10, 'a');
  EXPECT_EQ(WorkerErrorFailure(0, long_text).message,
            absl::StrCat(std::string(kMaxMessageBytes, 'a'), "...(",
                         kMaxMessageBytes + 10, " bytes)"));
}

TEST(DivergenceTextTest, NamesTheLossAndTheStep) {
  Divergence d;
  d.step = 12;
  d.value = std::numeric_limits<double>::infinity();
  EXPECT_EQ(DivergenceText(d), "training diverged: loss is inf at step 12");
  d.eval = true;
  EXPECT_EQ(DivergenceText(d),
            "training diverged: evaluation loss is inf at step 12");
}

}  // namespace
}  // namespace pstrain
