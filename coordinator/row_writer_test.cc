#include "coordinator/row_writer.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/metrics.h"
#include "common/run_record.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

std::string Read(const std::string& path) {
  return ReadFileText(path).value_or("");
}
MetricsRow Row(int64_t step, double loss, int64_t samples) {
  MetricsRow r;
  r.step = step;
  r.loss = loss;
  r.samples = samples;
  return r;
}

TEST(RowWriterTest, QueuedRowsReachTheCsvOnlyOnFlushInStepOrder) {
  const std::string path = TempPath("metrics.csv");
  auto writer = RowWriter::Create({path, /*progress=*/false, 3, nullptr});
  ASSERT_TRUE(writer.ok()) << writer.status();
  (*writer)->Queue({Row(0, 2.5, 8), Row(1, 2.0, 8)}, StepTotals{});
  (*writer)->Queue({Row(2, 1.5, 8)}, StepTotals{});
  auto before = ParseMetricsCsv(Read(path), path);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(before->empty());

  (*writer)->Flush();
  auto rows = ParseMetricsCsv(Read(path), path);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*rows)[i].step, i);
  EXPECT_EQ(*(*rows)[2].loss, 1.5);

  (*writer)->Flush();  // nothing queued: nothing written again
  EXPECT_EQ(ParseMetricsCsv(Read(path), path)->size(), 3u);
}

TEST(RowWriterTest, GaugesFollowTheTotalsAndTheCounts) {
  MetricsRegistry registry;
  auto writer = RowWriter::Create({"", false, 10, &registry});
  ASSERT_TRUE(writer.ok()) << writer.status();
  StepTotals totals;
  totals.steps = 2;
  totals.final_loss = 0.5;
  totals.samples = 32;
  totals.wall_s = 4;
  MetricsRow eval;  // the final evaluation row: no loss, not counted
  eval.step = 1;
  eval.samples = 100;
  eval.eval_accuracy = 0.75;
  (*writer)->Queue({Row(0, 1, 16), Row(1, 0.5, 16), eval}, totals);
  (*writer)->SetLiveWorkers(3);
  (*writer)->SetRegisteredServers(2);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("pstrain_coordinator_steps 2\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_coordinator_loss 0.5\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_coordinator_samples_total 32\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_coordinator_samples_per_second 8\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_coordinator_eval_accuracy 0.75\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_coordinator_live_workers 3\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_coordinator_registered_servers 2\n"));
}

TEST(RowWriterTest, AnUnwritableCsvIsRefusedNamingIt) {
  const std::string path = TempPath("no_such_dir/metrics.csv");
  auto writer = RowWriter::Create({path, false, 1, nullptr});
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(writer.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace pstrain
