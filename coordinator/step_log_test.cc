#include "coordinator/step_log.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "absl/time/time.h"

namespace pstrain {
namespace {

using Records = google::protobuf::RepeatedPtrField<pstrain::v1::StepMetrics>;

pstrain::v1::StepMetrics Record(uint32_t worker, uint64_t step, double loss,
                                uint64_t samples = 10) {
  pstrain::v1::StepMetrics m;
  m.set_worker(worker);
  m.set_step(step);
  m.set_loss(loss);
  m.set_samples(samples);
  m.set_pull_s(0.25);
  m.set_push_s(0.5);
  m.set_end_unix_s(100 + step);
  return m;
}

Records Batch(std::initializer_list<pstrain::v1::StepMetrics> ms) {
  Records r;
  for (const auto& m : ms) *r.Add() = m;
  return r;
}

StepLogOptions Options(uint32_t workers, int64_t steps) {
  StepLogOptions o;
  o.num_workers = workers;
  o.steps = steps;
  o.classifier = true;
  return o;
}

const absl::Time kStart = absl::FromUnixSeconds(100);

TEST(StepLogTest, RowsComeOutInStepOrderWithSampleWeightedLoss) {
  StepLog log(Options(2, 3));
  ASSERT_TRUE(log.Add(0, Batch({Record(0, 0, 1.0), Record(0, 1, 2.0)})).ok());
  EXPECT_TRUE(log.TakeCompleteRows(kStart).empty());
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 1, 4.0, 30)})).ok());
  EXPECT_TRUE(log.TakeCompleteRows(kStart).empty());  // step 0 incomplete
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 0, 3.0)})).ok());
  std::vector<MetricsRow> rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].step, 0);
  EXPECT_DOUBLE_EQ(*rows[0].loss, 2.0);
  EXPECT_EQ(rows[1].step, 1);
  EXPECT_DOUBLE_EQ(*rows[1].loss, (2.0 * 10 + 4.0 * 30) / 40);
  EXPECT_DOUBLE_EQ(rows[1].wall_s, 1.0);
  EXPECT_DOUBLE_EQ(rows[1].comm_s, 0.75);
  EXPECT_EQ(log.totals().steps, 2);
  EXPECT_EQ(log.totals().samples, 60u);
  EXPECT_EQ(log.pending_steps(), 0u);
}

// Issue 11 #5: a repeated report of a step counted twice, so one worker's
// two copies completed a step of two workers.
TEST(StepLogTest, AResumedJobsRowsStartAtItsFirstStep) {
  StepLogOptions o = Options(2, 6);
  o.first_step = 4;
  StepLog log(o);
  EXPECT_EQ(log.totals().steps, 4);  // steps 0..3 were done before the resume
  ASSERT_TRUE(log.Add(0, Batch({Record(0, 4, 1.0)})).ok());
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 4, 3.0)})).ok());
  std::vector<MetricsRow> rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].step, 4);
  EXPECT_EQ(log.totals().steps, 5);
  // A record of a step before the resume is ignored, like a repeat.
  ASSERT_TRUE(log.Add(0, Batch({Record(0, 2, 9.0)})).ok());
  EXPECT_EQ(log.pending_steps(), 0u);
}

TEST(StepLogTest, RepeatedReportsOfAStepCountOnce) {
  StepLog log(Options(2, 3));
  ASSERT_TRUE(log.Add(0, Batch({Record(0, 0, 1.0)})).ok());
  ASSERT_TRUE(log.Add(0, Batch({Record(0, 0, 1.0)})).ok());
  EXPECT_TRUE(log.TakeCompleteRows(kStart).empty());
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 0, 3.0)})).ok());
  std::vector<MetricsRow> rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].samples, 20);
  EXPECT_DOUBLE_EQ(*rows[0].loss, 2.0);
  // A repeat after the row went out is ignored too.
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 0, 3.0)})).ok());
  EXPECT_EQ(log.pending_steps(), 0u);
  EXPECT_TRUE(log.TakeCompleteRows(kStart).empty());
  EXPECT_EQ(log.totals().samples, 20u);
}

// Issue 11 #2 (coordinator part): records that can never complete were
// kept without bound.
TEST(StepLogTest, StepsBeyondTheJobAreOutOfRange) {
  StepLog log(Options(2, 3));
  absl::Status st = log.Add(0, Batch({Record(0, 1, 1.0), Record(0, 4, 1.0)}));
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("step 4"), std::string::npos);
  EXPECT_EQ(log.pending_steps(), 0u);  // all or nothing
  // Step `steps` is the final evaluation, and legal.
  EXPECT_TRUE(log.Add(0, Batch({Record(0, 3, 0.0)})).ok());
}

TEST(StepLogTest, PendingStepsAreCapped) {
  StepLogOptions o = Options(2, 1000);
  o.max_pending_steps = 4;
  StepLog log(o);
  ASSERT_TRUE(
      log.Add(0, Batch({Record(0, 0, 1), Record(0, 1, 1), Record(0, 2, 1)}))
          .ok());
  absl::Status st = log.Add(0, Batch({Record(0, 3, 1), Record(0, 4, 1)}));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(log.pending_steps(), 3u);
  // The other worker's reports complete steps and make room.
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 0, 1), Record(1, 1, 1)})).ok());
  EXPECT_EQ(log.TakeCompleteRows(kStart).size(), 2u);
  EXPECT_TRUE(log.Add(0, Batch({Record(0, 3, 1), Record(0, 4, 1)})).ok());
}

TEST(StepLogTest, RecordsMustNameTheReportingWorker) {
  StepLog log(Options(2, 3));
  EXPECT_EQ(log.Add(0, Batch({Record(1, 0, 1.0)})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(log.pending_steps(), 0u);
}

TEST(StepLogTest, FirstNonFiniteLossIsRemembered) {
  StepLog log(Options(2, 3));
  ASSERT_TRUE(log.Add(0, Batch({Record(0, 0, 1.0)})).ok());
  EXPECT_FALSE(log.divergence().has_value());
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 0, std::nan(""))})).ok());
  ASSERT_TRUE(
      log.Add(0, Batch({Record(0, 1, std::numeric_limits<double>::infinity())}))
          .ok());
  ASSERT_TRUE(log.divergence().has_value());
  EXPECT_EQ(log.divergence()->worker, 1u);
  EXPECT_EQ(log.divergence()->step, 0u);
  EXPECT_FALSE(log.divergence()->eval);
}

TEST(StepLogTest, FinalEvaluationSetsAccuracyNotATrainingStep) {
  StepLog log(Options(2, 1));
  for (uint32_t w = 0; w < 2; ++w) {
    pstrain::v1::StepMetrics fin = Record(w, 1, 0, 0);
    fin.set_eval_correct(w == 0 ? 3 : 4);
    fin.set_eval_total(5);
    fin.set_eval_loss_sum(2.5);
    ASSERT_TRUE(log.Add(w, Batch({Record(w, 0, 1.0), fin})).ok());
  }
  std::vector<MetricsRow> rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_FALSE(rows[1].loss.has_value());
  EXPECT_DOUBLE_EQ(*rows[1].eval_accuracy, 0.7);
  EXPECT_DOUBLE_EQ(*rows[1].eval_loss, 0.5);
  EXPECT_EQ(log.totals().steps, 1);
  EXPECT_TRUE(log.totals().has_accuracy);
  EXPECT_DOUBLE_EQ(log.totals().final_accuracy, 0.7);
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

TEST(StepLogTest, ExcusedWorkerIsNotWaitedForUntilExpectedAgain) {
  StepLog log(Options(2, 10));
  ASSERT_TRUE(log.Add(0, Batch({Record(0, 0, 1.0), Record(0, 1, 1.0),
                                Record(0, 2, 1.0), Record(0, 3, 1.0)}))
                  .ok());
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 0, 3.0)})).ok());
  EXPECT_EQ(log.TakeCompleteRows(kStart).size(), 1u);
  EXPECT_EQ(log.NextStep(1), 1u);
  EXPECT_EQ(log.NextStep(0), 4u);
  log.Excuse(1, log.NextStep(1));
  std::vector<MetricsRow> rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 3u);  // steps 1..3 with worker 0 alone
  EXPECT_EQ(rows[0].samples, 10);
  EXPECT_DOUBLE_EQ(rows[0].comm_s, 0.75);  // averaged over one record
  // Worker 1 counts again from step 5: step 4 alone, step 5 needs both.
  log.Expect(1, 5);
  ASSERT_TRUE(log.Add(0, Batch({Record(0, 4, 1.0), Record(0, 5, 1.0)})).ok());
  EXPECT_EQ(log.TakeCompleteRows(kStart).size(), 1u);
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 5, 3.0)})).ok());
  rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].samples, 20);
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

TEST(StepLogTest, WithBackupWorkersAStepIsARowOnceNMinusBReportedIt) {
  StepLogOptions o = Options(3, 2);
  o.records_per_row = 2;  // 3 workers, 1 backup
  StepLog log(o);
  // Workers 0 and 1 are fast; worker 2 (the straggler) is still at step 0.
  ASSERT_TRUE(log.Add(0, Batch({Record(0, 0, 1.0), Record(0, 1, 1.0)})).ok());
  EXPECT_TRUE(log.TakeCompleteRows(kStart).empty());  // one of two
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 0, 3.0), Record(1, 1, 3.0)})).ok());
  std::vector<MetricsRow> rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(*rows[0].loss, 2.0);
  EXPECT_EQ(rows[0].samples, 20);
  EXPECT_DOUBLE_EQ(rows[1].wall_s, 1.0);  // when the model got there
  // The final evaluation too: the fast workers' test slices.
  pstrain::v1::StepMetrics e0 = Record(0, 2, 0), e1 = Record(1, 2, 0);
  e0.set_eval_correct(8);
  e0.set_eval_total(10);
  e1.set_eval_correct(6);
  e1.set_eval_total(10);
  ASSERT_TRUE(log.Add(0, Batch({e0})).ok());
  ASSERT_TRUE(log.Add(1, Batch({e1})).ok());
  rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(*rows[0].eval_accuracy, 0.7);
  EXPECT_EQ(log.totals().steps, 2);
  EXPECT_EQ(log.totals().samples, 40u);
  // The straggler's records of steps that are rows change nothing.
  pstrain::v1::StepMetrics late = Record(2, 2, 0);
  late.set_eval_correct(0);
  late.set_eval_total(10);
  ASSERT_TRUE(
      log.Add(2, Batch({Record(2, 0, 100.0), Record(2, 1, 100.0), late})).ok());
  EXPECT_TRUE(log.TakeCompleteRows(kStart).empty());
  EXPECT_EQ(log.totals().samples, 40u);
  EXPECT_DOUBLE_EQ(log.totals().final_accuracy, 0.7);
  EXPECT_EQ(log.pending_steps(), 0u);
}

pstrain::v1::StepMetrics ModelRecord(uint32_t worker, uint64_t step,
                                     uint64_t model_step, double loss) {
  pstrain::v1::StepMetrics m = Record(worker, step, loss);
  m.set_model_step(model_step);
  m.set_end_unix_s(100 + model_step);
  return m;
}

// training.clock model (async): a row is the N pushes of one model step,
// whoever made them; the fast worker's steps past `steps` count, a push
// after the model's last step makes no row, and the final row waits for
// every worker's finished record.
TEST(StepLogTest, OnTheModelClockARowIsNPushesOfOneModelStep) {
  StepLogOptions o = Options(2, 2);
  o.model_clock = true;
  StepLog log(o);
  // Worker 0 is three times as fast as worker 1: it makes pushes 1, 2, 3 (model
  // steps 0, 0, 1) while worker 1 makes push 4 (model step 1) at its step 0.
  ASSERT_TRUE(
      log.Add(0, Batch({ModelRecord(0, 0, 0, 1.0), ModelRecord(0, 1, 0, 3.0)}))
          .ok());
  std::vector<MetricsRow> rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 1u);  // two records of worker 0: model step 0
  EXPECT_EQ(rows[0].step, 0);
  EXPECT_DOUBLE_EQ(*rows[0].loss, 2.0);
  EXPECT_EQ(rows[0].samples, 20);
  // A retried report counts once (by the worker's own step).
  ASSERT_TRUE(
      log.Add(0, Batch({ModelRecord(0, 1, 0, 3.0), ModelRecord(0, 2, 1, 5.0)}))
          .ok());
  EXPECT_TRUE(log.TakeCompleteRows(kStart).empty());
  // Worker 1's first push, then a push that landed after the model's last
  // step (model step 2 of a 2-step job): counted past the end, no row.
  ASSERT_TRUE(log.Add(1, Batch({ModelRecord(1, 0, 1, 7.0)})).ok());
  ASSERT_TRUE(log.Add(0, Batch({ModelRecord(0, 3, 2, 9.0)})).ok());
  rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].step, 1);
  EXPECT_DOUBLE_EQ(*rows[0].loss, 6.0);
  EXPECT_DOUBLE_EQ(rows[0].wall_s, 1.0);
  EXPECT_EQ(log.records_past_end(), 1u);
  EXPECT_EQ(log.totals().steps, 2);
  EXPECT_EQ(log.totals().samples, 40u);
  // The final row: both workers' finished records (whole test set each).
  pstrain::v1::StepMetrics f0 = Record(0, 4, 0, 0), f1 = Record(1, 1, 0, 0);
  for (auto* f : {&f0, &f1}) {
    f->set_finished(true);
    f->set_model_step(2);
    f->set_eval_total(10);
  }
  f0.set_eval_correct(9);
  f1.set_eval_correct(7);
  ASSERT_TRUE(log.Add(0, Batch({f0})).ok());
  EXPECT_TRUE(log.TakeCompleteRows(kStart).empty());
  ASSERT_TRUE(log.Add(1, Batch({f1})).ok());
  rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].step, 2);
  EXPECT_DOUBLE_EQ(*rows[0].eval_accuracy, 0.8);
  EXPECT_DOUBLE_EQ(log.totals().final_accuracy, 0.8);
  EXPECT_EQ(log.totals().steps, 2);
  EXPECT_EQ(log.pending_steps(), 0u);
  // Own steps may pass `steps` but not N x steps.
  EXPECT_EQ(log.Add(1, Batch({ModelRecord(1, 5, 1, 1.0)})).code(),
            absl::StatusCode::kOutOfRange);
}

// training.on_failure: restart (coordinator/coordinator_service.cc,
// FinishRollback).
TEST(StepLogTest, ARollbackTurnsTheStepsBelowItIntoRowsWithWhatTheyHave) {
  StepLog log(Options(2, 10));
  // Worker 0 reported steps 0..2, 4 and 5 (its report of step 3 was lost),
  // worker 1 (then killed) only step 0: the job rolls back to step 5.
  ASSERT_TRUE(
      log.Add(0, Batch({Record(0, 0, 1.0), Record(0, 1, 1.0), Record(0, 2, 1.0),
                        Record(0, 4, 1.0), Record(0, 5, 1.0)}))
          .ok());
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 0, 3.0)})).ok());
  EXPECT_EQ(log.TakeCompleteRows(kStart).size(), 1u);
  EXPECT_TRUE(log.TakeCompleteRows(kStart).empty());  // stuck at step 1
  log.RolledBack(5);
  std::vector<MetricsRow> rows = log.TakeCompleteRows(kStart);
  // Steps 1, 2 and 4 with worker 0's records; step 3 has none: no row.
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].step, 1);
  EXPECT_EQ(rows[1].step, 2);
  EXPECT_EQ(rows[2].step, 4);
  EXPECT_EQ(rows[2].samples, 10);
  // Step 5 is redone: worker 0's record stays counted, and the row waits
  // for worker 1's.
  ASSERT_TRUE(log.Add(0, Batch({Record(0, 5, 7.0)})).ok());
  EXPECT_TRUE(log.TakeCompleteRows(kStart).empty());
  ASSERT_TRUE(log.Add(1, Batch({Record(1, 5, 3.0), Record(1, 6, 3.0)})).ok());
  rows = log.TakeCompleteRows(kStart);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].step, 5);
  EXPECT_DOUBLE_EQ(*rows[0].loss, 2.0);  // (1.0 + 3.0) / 2: the first 5 kept
  EXPECT_EQ(log.totals().steps, 6);
  EXPECT_EQ(log.NextStep(0), 6u);
}

}  // namespace
}  // namespace pstrain
