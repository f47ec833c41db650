#include "tools/report/report_math.h"

#include <cmath>
#include <limits>

#include "common/run_record.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(HistogramPercentileTest, EmptyOrAllZeroHasNone) {
  EXPECT_FALSE(HistogramPercentile({}, 0.5));
  EXPECT_FALSE(HistogramPercentile({0, 0, 0}, 0.5));
  EXPECT_FALSE(HistogramMax({}));
  EXPECT_FALSE(HistogramMax({0, 0}));
}

TEST(HistogramPercentileTest, NearestRank) {
  // 100 pushes: 50 at staleness 0, 30 at 1, 15 at 2, 5 at 3.
  const std::vector<uint64_t> h = {50, 30, 15, 5};
  EXPECT_EQ(HistogramPercentile(h, 0.0), 0);   // rank 1
  EXPECT_EQ(HistogramPercentile(h, 0.5), 0);   // rank 50: last of bucket 0
  EXPECT_EQ(HistogramPercentile(h, 0.51), 1);  // rank 51
  EXPECT_EQ(HistogramPercentile(h, 0.8), 1);   // rank 80
  EXPECT_EQ(HistogramPercentile(h, 0.95), 2);  // rank 95
  EXPECT_EQ(HistogramPercentile(h, 0.99), 3);  // rank 99
  EXPECT_EQ(HistogramPercentile(h, 1.0), 3);
  EXPECT_EQ(HistogramMax(h), 3);
}

TEST(HistogramPercentileTest, SyncAndLeadingZeros) {
  EXPECT_EQ(HistogramPercentile({240}, 0.5), 0);  // sync: all at 0
  EXPECT_EQ(HistogramPercentile({240}, 0.99), 0);
  EXPECT_EQ(HistogramPercentile({0, 0, 4}, 0.5), 2);
  EXPECT_EQ(HistogramMax({1, 0, 3, 0, 0}), 2);
  // p99 of 1000 pushes with 11 at staleness 5: rank 990 falls in bucket 0.
  EXPECT_EQ(HistogramPercentile({989, 0, 0, 0, 0, 11}, 0.99), 5);
  EXPECT_EQ(HistogramPercentile({990, 0, 0, 0, 0, 10}, 0.99), 0);
}

MetricsRow Row(int64_t step, double wall, std::optional<double> loss,
               std::optional<double> acc = std::nullopt,
               std::optional<double> eval_loss = std::nullopt) {
  MetricsRow r;
  r.step = step;
  r.wall_s = wall;
  r.loss = loss;
  r.eval_accuracy = acc;
  r.eval_loss = eval_loss;
  return r;
}

TEST(TimeToTargetTest, FirstEvaluationThatMeetsTheTarget) {
  const std::vector<MetricsRow> rows = {
      Row(0, 0.1, 2.0),
      Row(5, 0.6, 1.0, 0.70, 0.9),
      Row(10, 1.1, 0.5, 0.91, 0.4),  // first >= 0.9
      Row(15, 1.6, 0.4, 0.89, 0.45),
      Row(20, 2.1, 0.3, 0.95, 0.2),
      Row(21, 2.3, std::nullopt, 0.96, 0.18),  // final evaluation
  };
  auto hit = TimeToTarget(rows, {Target::kAccuracy, 0.9});
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->step, 10);
  EXPECT_DOUBLE_EQ(hit->wall_s, 1.1);
  hit = TimeToTarget(rows, {Target::kAccuracy, 0.91});  // >= counts
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->step, 10);
  hit = TimeToTarget(rows, {Target::kAccuracy, 0.96});  // only the final row
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->step, 21);
  hit = TimeToTarget(rows, {Target::kLoss, 0.2});  // eval loss <= 0.2
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->step, 20);
  EXPECT_DOUBLE_EQ(hit->wall_s, 2.1);
  EXPECT_FALSE(TimeToTarget(rows, {Target::kAccuracy, 0.99}));
  EXPECT_FALSE(TimeToTarget(rows, {Target::kLoss, 0.1}));
  EXPECT_FALSE(TimeToTarget(rows, {Target::kNone, 0}));
  // The training loss column does not count, only evaluations.
  EXPECT_FALSE(TimeToTarget({Row(0, 0.1, 0.01)}, {Target::kLoss, 0.5}));
}

TEST(MedianSpreadTest, OddEvenInfiniteEmpty) {
  EXPECT_FALSE(MedianSpread({}));
  auto s = MedianSpread({3, 1, 2});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->median, 2);
  EXPECT_EQ(s->min, 1);
  EXPECT_EQ(s->max, 3);
  EXPECT_EQ(s->count, 3);
  s = MedianSpread({4, 1, 3, 2});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->median, 2.5);
  s = MedianSpread({7});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->median, 7);
  EXPECT_EQ(s->min, 7);
  EXPECT_EQ(s->max, 7);
  // A target not reached in one of three runs: it sorts last.
  s = MedianSpread({10, kInf, 12});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->median, 12);
  EXPECT_EQ(s->min, 10);
  EXPECT_TRUE(std::isinf(s->max));
  s = MedianSpread({kInf, 5});
  ASSERT_TRUE(s);
  EXPECT_TRUE(std::isinf(s->median));
}

TEST(PerWorkerPerStepTest, DividesByWorkersAndSteps) {
  EXPECT_DOUBLE_EQ(PerWorkerPerStep(1177536, 2, 60), 1177536.0 / 120);
  EXPECT_DOUBLE_EQ(PerWorkerPerStep(4000, 4, 10), 100);
  EXPECT_EQ(PerWorkerPerStep(4000, 0, 10), 0);
  EXPECT_EQ(PerWorkerPerStep(4000, 4, 0), 0);
}

TEST(BarrierWaitShareTest, PerWorkerShareOfWallTime) {
  // 2 shards each saw 4 workers wait 1 s in total: every worker waited
  // 1 s / 4 on both shards at once, of 10 s.
  auto share = BarrierWaitShare(2.0, 2, 4, 10.0);
  ASSERT_TRUE(share);
  EXPECT_DOUBLE_EQ(*share, 0.025);
  EXPECT_FALSE(BarrierWaitShare(1.0, 0, 4, 10.0));  // no servers
  EXPECT_FALSE(BarrierWaitShare(1.0, 2, 4, 0.0));
}

TEST(MeanCommPerStepTest, TrainingRowsOnly) {
  std::vector<MetricsRow> rows = {Row(0, 0.1, 1.0), Row(1, 0.2, 0.9),
                                  Row(2, 0.3, std::nullopt, 0.5)};
  rows[0].pull_s = 0.002;
  rows[0].push_s = 0.001;
  rows[1].pull_s = 0.004;
  rows[1].push_s = 0.003;
  rows[2].pull_s = 10;  // final evaluation: ignored
  auto comm = MeanCommPerStep(rows);
  ASSERT_TRUE(comm);
  EXPECT_DOUBLE_EQ(*comm, 0.005);
  EXPECT_FALSE(MeanCommPerStep({Row(2, 0.3, std::nullopt)}));
}

TEST(SteadySecondsPerStepMedianTest, MedianStepAfterTheWarmUp) {
  // Steps 0-1 are slow (warm-up), step 4 ran an evaluation (0.9 s), the
  // final row has no loss: the median of steps 3, 4, 5, 6 is 0.1 s.
  std::vector<MetricsRow> rows = {
      Row(0, 2.0, 1.0),      Row(1, 3.0, 1.0),
      Row(2, 3.1, 1.0),      Row(3, 3.2, 1.0),
      Row(4, 4.1, 1.0, 0.5), Row(5, 4.2, 1.0),
      Row(6, 4.3, 1.0),      Row(7, 9.0, std::nullopt, 0.6)};
  std::optional<double> s = SteadySecondsPerStepMedian(rows, 2);
  ASSERT_TRUE(s);
  EXPECT_NEAR(*s, 0.1, 1e-9);
  // Without the warm-up, step 1's 1 s is one more value above the median.
  s = SteadySecondsPerStepMedian(rows, 0);
  ASSERT_TRUE(s);
  EXPECT_NEAR(*s, 0.1, 1e-9);
  // Order in the file does not matter; a gap (a missing row) is skipped.
  std::vector<MetricsRow> gap = {Row(5, 2.0, 1.0), Row(3, 1.0, 1.0),
                                 Row(6, 2.25, 1.0), Row(4, 1.5, 1.0)};
  s = SteadySecondsPerStepMedian(gap, 0);
  ASSERT_TRUE(s);
  EXPECT_NEAR(*s, 0.5, 1e-9);  // 0.5, 0.5, 0.25
  gap.erase(gap.begin() + 3);  // no step 4: 3 -> 5 is not one step
  s = SteadySecondsPerStepMedian(gap, 0);
  ASSERT_TRUE(s);
  EXPECT_NEAR(*s, 0.25, 1e-9);
  // Too few rows after the warm-up: none.
  EXPECT_FALSE(SteadySecondsPerStepMedian(rows, 6));
  EXPECT_FALSE(SteadySecondsPerStepMedian({Row(0, 1.0, 1.0)}, 0));
  EXPECT_EQ(SteadyWarmupSteps(25), 5);
  EXPECT_EQ(SteadyWarmupSteps(80), 5);
  EXPECT_EQ(SteadyWarmupSteps(8), 1);
  EXPECT_EQ(SteadyWarmupSteps(4), 0);
}

TEST(WireShareTest, EffectiveRateOverTheWire) {
  // 2 MB per worker per step in 4 ms = 0.5 GB/s over a 2 GB/s wire.
  auto share = WireShare(2e6, 0.004, 2e9);
  ASSERT_TRUE(share);
  EXPECT_DOUBLE_EQ(*share, 0.25);
  EXPECT_FALSE(WireShare(2e6, std::nullopt, 2e9));  // no training rows
  EXPECT_FALSE(WireShare(2e6, 0.004, 0));           // wire not measured
  EXPECT_FALSE(WireShare(0, 0.004, 2e9));           // nothing moved
}

TEST(ParseMetricsCsvTest, ReadsColumnsByName) {
  const std::string csv =
      "step,wall_s,loss,samples,samples_per_s,compute_s,pull_s,push_s,"
      "eval_accuracy,eval_loss,extra\n"
      "0,0.008294,1.8566478,64,7716.32,0.000163,0.004854,0.002185,,,x\n"
      "5,0.030000,1.2,64,9000,0.0001,0.002,0.001,0.650000,0.9,y\n"
      "60,0.2,,128,0,0,0.001,0,0.798500,0.68976655,\n";
  auto rows = ParseMetricsCsv(csv, "metrics.csv");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].step, 0);
  EXPECT_DOUBLE_EQ((*rows)[0].pull_s, 0.004854);
  EXPECT_FALSE((*rows)[0].eval_accuracy);
  EXPECT_DOUBLE_EQ(*(*rows)[1].eval_accuracy, 0.65);
  EXPECT_FALSE((*rows)[2].loss);
  EXPECT_DOUBLE_EQ(*(*rows)[2].eval_loss, 0.68976655);
}

TEST(ParseMetricsCsvTest, ErrorsNameFileAndLine) {
  auto rows = ParseMetricsCsv("step,wall_s,loss\n0,0.1,1\n1,fast,1\n", "m.csv");
  ASSERT_FALSE(rows.ok());
  EXPECT_THAT(std::string(rows.status().message()), HasSubstr("m.csv:3"));
  EXPECT_THAT(std::string(rows.status().message()), HasSubstr("wall_s"));
  rows = ParseMetricsCsv("step,loss\n", "m.csv");
  ASSERT_FALSE(rows.ok());
  EXPECT_THAT(std::string(rows.status().message()), HasSubstr("wall_s"));
}

TEST(ParseSummaryJsonTest, ReadsTheCoordinatorsSummary) {
  const std::string json = R"({
  "job": "default", "mode": "async", "staleness": "inf", "workers": 2,
  "servers": 2, "steps": 60, "local_batch": 32, "global_batch": 64,
  "wall_s": 0.1590, "samples": 3840, "samples_per_s": 24153.85,
  "final_loss": 0.57527185, "final_eval_loss": 0.68976655,
  "final_accuracy": null, "bytes_pushed": 1177536, "bytes_pulled": 1195462,
  "staleness_max": 3, "staleness_mean": 0.5, "staleness_histogram": [100, 20, 0, 1],
  "barrier_wait_s": 0.0197, "failed": false, "message": ""})";
  auto s = ParseSummaryJson(json, "summary.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->mode, "async");
  EXPECT_EQ(s->staleness, "inf");
  EXPECT_EQ(s->workers, 2);
  EXPECT_EQ(s->steps, 60);
  EXPECT_EQ(s->global_batch, 64);
  EXPECT_FALSE(s->final_accuracy);
  EXPECT_EQ(s->bytes_pulled, 1195462u);
  EXPECT_EQ(s->staleness_histogram, (std::vector<uint64_t>{100, 20, 0, 1}));
  EXPECT_DOUBLE_EQ(s->barrier_wait_s, 0.0197);
  // Numbers for staleness, absent keys keep their defaults.
  s = ParseSummaryJson(R"({"staleness": 2, "workers": 3})", "s.json");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->staleness, "2");
  EXPECT_TRUE(s->staleness_histogram.empty());
  EXPECT_FALSE(ParseSummaryJson("{", "s.json").ok());
  EXPECT_FALSE(ParseSummaryJson(R"({"workers": "two"})", "s.json").ok());
}

TEST(ReportMathTest, TwoEfficienciesMultiplyToTimeToTarget) {
  EXPECT_EQ(SecondsPerStep(2.0, 40), 0.05);
  EXPECT_FALSE(SecondsPerStep(2.0, 0));
  EXPECT_FALSE(SecondsPerStep(0, 40));
  EXPECT_EQ(UpdatesPerStep("async", 4), 4);
  EXPECT_EQ(UpdatesPerStep("sync", 4), 1);
  EXPECT_EQ(UpdatesPerStep("allreduce", 4), 1);
  // The README's persistent-straggler case: the same s / step, 15 steps
  // instead of 20: async wins on statistical efficiency alone.
  std::optional<EfficiencyRatio> r = CompareEfficiency(0.066, 15, 0.066, 20);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->hardware, 1.0);
  EXPECT_DOUBLE_EQ(r->statistical, 0.75);
  EXPECT_DOUBLE_EQ(r->time, 0.75);
  r = CompareEfficiency(0.05, 30, 0.1, 20);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->hardware, 0.5);
  EXPECT_DOUBLE_EQ(r->statistical, 1.5);
  EXPECT_DOUBLE_EQ(r->time, 0.75);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(CompareEfficiency(0.05, inf, 0.1, 20));  // not reached
  EXPECT_FALSE(CompareEfficiency(0.05, 10, 0.1, 0));
}

}  // namespace
}  // namespace pstrain
