#include "common/run_record.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

RunSummary Sample() {
  RunSummary s;
  s.job = "j \"quoted\"\n";
  s.mode = "async";
  s.staleness = "2";
  s.workers = 4;
  s.servers = 2;
  s.steps = 10;
  s.local_batch = 8;
  s.global_batch = 32;
  s.wall_s = 1.25;
  s.samples = 320;
  s.samples_per_s = 256;
  s.final_loss = 0.5;
  s.final_eval_loss = 0.75;
  s.final_accuracy = 0.875;
  s.bytes_pushed = 1000;
  s.bytes_pulled = 2000;
  s.staleness_max = 2;
  s.staleness_mean = 0.5;
  s.staleness_histogram = {5, 3, 2};
  s.barrier_wait_s = 0.125;
  return s;
}

TEST(RunRecordTest, SummaryRoundTrips) {
  RunSummary s = Sample();
  s.failed = true;
  s.message = "worker 3: UNAVAILABLE";
  s.failure = RunFailure{"worker", 3, -1, "UNAVAILABLE: shard 1"};
  absl::StatusOr<RunSummary> back = ParseSummaryJson(SummaryToJson(s), "t");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job, s.job);
  EXPECT_EQ(back->mode, "async");
  EXPECT_EQ(back->staleness, "2");
  EXPECT_EQ(back->workers, 4);
  EXPECT_EQ(back->global_batch, 32);
  EXPECT_EQ(back->samples, 320u);
  EXPECT_DOUBLE_EQ(back->final_loss, 0.5);
  EXPECT_DOUBLE_EQ(*back->final_accuracy, 0.875);
  EXPECT_EQ(back->bytes_pulled, 2000u);
  EXPECT_EQ(back->staleness_histogram, s.staleness_histogram);
  EXPECT_TRUE(back->failed);
  ASSERT_TRUE(back->failure.has_value());
  EXPECT_EQ(back->failure->process, "worker");
  EXPECT_EQ(back->failure->rank, 3);
  EXPECT_EQ(back->failure->shard, -1);
  EXPECT_EQ(DescribeFailure(*back->failure), "worker 3: UNAVAILABLE: shard 1");
}

// Row-sparse tensors: rows stored and evicted by tensor, written only by a
// job that has them.
TEST(RunRecordTest, RowCountsRoundTripAndAreAbsentWithoutTables) {
  RunSummary s = Sample();
  EXPECT_FALSE(nlohmann::json::parse(SummaryToJson(s)).contains("rows_stored"));
  s.rows_stored = {{"embedding", 1234}};
  s.rows_evicted = {{"embedding", 56}};
  absl::StatusOr<RunSummary> back = ParseSummaryJson(SummaryToJson(s), "t");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rows_stored, s.rows_stored);
  EXPECT_EQ(back->rows_evicted, s.rows_evicted);
  absl::StatusOr<std::string> v =
      SummaryValue(SummaryToJson(s), "rows_stored.embedding", "t");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "1234");
}

TEST(RunRecordTest, InfiniteStalenessIsAString) {
  RunSummary s = Sample();
  s.staleness = "inf";
  auto j = nlohmann::json::parse(SummaryToJson(s));
  EXPECT_EQ(j["staleness"], "inf");
  s.staleness = "3";
  EXPECT_EQ(nlohmann::json::parse(SummaryToJson(s))["staleness"], 3);
}

// Issue 11 #3: a NaN loss once produced `nan` in summary.json.
TEST(RunRecordTest, NonFiniteNumbersAreNullAndTheJsonStaysValid) {
  RunSummary s = Sample();
  s.final_loss = std::nan("");
  s.final_eval_loss = -std::numeric_limits<double>::infinity();
  s.final_accuracy = std::nan("");
  s.diverged = true;
  const std::string text = SummaryToJson(s);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
  EXPECT_TRUE(j["final_loss"].is_null());
  EXPECT_TRUE(j["final_eval_loss"].is_null());
  EXPECT_TRUE(j["final_accuracy"].is_null());
  EXPECT_EQ(j["diverged"], true);
  absl::StatusOr<RunSummary> back = ParseSummaryJson(text, "t");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(std::isnan(back->final_loss));
  EXPECT_TRUE(back->diverged);
}

TEST(RunRecordTest, ModeNeutralByteNamesBesideTheDocumentedOnes) {
  auto j = nlohmann::json::parse(SummaryToJson(Sample()));
  EXPECT_EQ(j["bytes_sent"], j["bytes_pushed"]);
  EXPECT_EQ(j["bytes_received"], j["bytes_pulled"]);
}

TEST(RunRecordTest, SummaryValueReadsKeysForTheShell) {
  RunSummary s = Sample();
  s.failure = RunFailure{"server", -1, 1, "shard 1 stopped"};
  const std::string text = SummaryToJson(s);
  EXPECT_EQ(*SummaryValue(text, "mode", "t"), "async");
  EXPECT_EQ(*SummaryValue(text, "steps", "t"), "10");
  EXPECT_EQ(*SummaryValue(text, "final_accuracy", "t"), "0.875");
  EXPECT_EQ(*SummaryValue(text, "failed", "t"), "false");
  EXPECT_EQ(*SummaryValue(text, "failure.shard", "t"), "1");
  EXPECT_EQ(*SummaryValue(text, "staleness_histogram", "t"), "[5,3,2]");
  absl::StatusOr<std::string> missing = SummaryValue(text, "nope", "f.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("f.json: no key 'nope'"),
            std::string::npos);
  EXPECT_EQ(SummaryValue(text, "failure.process.x", "t").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SummaryValue("{bad", "mode", "t").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RunRecordTest, MetricsRowsRoundTripWithTheDocumentedColumns) {
  EXPECT_EQ(MetricsCsvHeader(),
            "step,wall_s,loss,samples,samples_per_s,compute_s,pull_s,push_s,"
            "eval_accuracy,eval_loss,comm_s\n");
  MetricsRow r;
  r.step = 3;
  r.wall_s = 0.5;
  r.loss = 1.25;
  r.samples = 64;
  r.samples_per_s = 128;
  r.compute_s = 0.01;
  r.pull_s = 0.002;
  r.push_s = 0.003;
  r.comm_s = 0.005;
  r.eval_accuracy = 0.5;
  r.eval_loss = 0.75;
  MetricsRow fin;  // the final evaluation row: no training loss
  fin.step = 4;
  fin.eval_loss = 0.7;
  const std::string text =
      MetricsCsvHeader() + FormatMetricsRow(r) + FormatMetricsRow(fin);
  EXPECT_EQ(FormatMetricsRow(r),
            "3,0.500000,1.25,64,128.00,0.010000,0.002000,0.003000,0.500000,"
            "0.75,0.005000\n");
  absl::StatusOr<std::vector<MetricsRow>> rows = ParseMetricsCsv(text, "m");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].step, 3);
  EXPECT_DOUBLE_EQ(*(*rows)[0].loss, 1.25);
  EXPECT_DOUBLE_EQ((*rows)[0].comm_s, 0.005);
  EXPECT_FALSE((*rows)[1].loss.has_value());
  EXPECT_FALSE((*rows)[1].eval_accuracy.has_value());
  EXPECT_DOUBLE_EQ(*(*rows)[1].eval_loss, 0.7);
}

TEST(RunRecordTest, OldMetricsWithoutCommColumnSumPullAndPush) {
  absl::StatusOr<std::vector<MetricsRow>> rows = ParseMetricsCsv(
      "step,wall_s,loss,pull_s,push_s\n0,0.1,2,0.25,0.5\n", "m");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_DOUBLE_EQ((*rows)[0].comm_s, 0.75);
}

TEST(RunRecordTest, BadCellsNameTheFileLineAndColumn) {
  absl::StatusOr<std::vector<MetricsRow>> rows =
      ParseMetricsCsv("step,wall_s,loss\n0,0.1,x\n", "runs/a/metrics.csv");
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rows.status().message().find("runs/a/metrics.csv:2: column 'loss'"),
            std::string::npos);
}

}  // namespace
}  // namespace pstrain
