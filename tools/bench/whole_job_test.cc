#include "tools/bench/whole_job.h"

#include <string>
#include <utility>
#include <vector>

#include "common/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::bench {
namespace {

MetricsRow Row(int64_t step, double pull_s, double push_s) {
  MetricsRow r;
  r.step = step;
  r.pull_s = pull_s;
  r.push_s = push_s;
  r.comm_s = pull_s + push_s;
  return r;
}

// The warm-up steps and the final evaluation row are left out; medians of
// the rest.
TEST(RealJobComm, MediansOfTheWarmStepsOnly) {
  const std::vector<MetricsRow> rows = {
      Row(0, 9, 9),    Row(1, 8, 8), Row(2, 7, 7),  // warm-up
      Row(3, 1, 4),    Row(4, 3, 6), Row(5, 2, 5),  // steps 3..5
      Row(6, 100, 100)};                            // evaluation (step 6)
  absl::StatusOr<RealJobComm> c = RealJobCommFromRows(rows, 3, 6, "m.csv");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->pull_s, 2);
  EXPECT_DOUBLE_EQ(c->push_s, 5);
  EXPECT_EQ(c->steps_used, 3);
}

TEST(RealJobComm, NoWarmRowIsAnErrorNamingTheFile) {
  absl::StatusOr<RealJobComm> c =
      RealJobCommFromRows({Row(0, 1, 1), Row(1, 1, 1)}, 3, 6, "dir/m.csv");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(c.status().message()),
              testing::HasSubstr("dir/m.csv"));
}

// The MLP is sized to the bytes asked for, within one hidden unit's worth.
TEST(RealJobModel, ParamsMatchTheBytes) {
  for (uint64_t bytes : {4000000u, 16000000u, 64000000u}) {
    const WholeJobModel m = RealJobModel(bytes, 25);
    const int64_t params = WholeJobParams(m);
    EXPECT_LE(params * 4, static_cast<int64_t>(bytes));
    EXPECT_GT(params * 4, static_cast<int64_t>(bytes) - 4 * (1024 + 11));
    EXPECT_EQ(m.steps, 25);
  }
}

// The layout is in the name, so the jobs' folders and figures of two
// layouts never mix.
TEST(RealJobModel, NameSaysSizeAndLayout) {
  EXPECT_EQ(RealJobModel(4000000, 10).name, "4MB_1w1s");
  EXPECT_EQ(RealJobModel(16000000, 10, 4, 2).name, "16MB_4w2s");
}

TEST(MeasureRealJobComm, RejectsALayoutWithoutProcesses) {
  for (auto [workers, servers] : {std::pair{0, 1}, std::pair{1, 0}}) {
    absl::StatusOr<RealJobComm> c =
        MeasureRealJobComm(4000000, 10, workers, servers, "no_bin", "no_dir");
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
        << workers << " workers, " << servers << " servers";
  }
}

// The job file a real job runs: a valid job of that layout, with the
// servers' congestion control only when one is asked for.
TEST(RealJobYaml, IsAValidJobWithTheCongestionControlAskedFor) {
  for (const std::string cc : {"", "cubic"}) {
    const std::string yaml = RealJobYaml(16000000, 25, 4, 2, cc);
    absl::StatusOr<JobConfig> config = ParseJobConfig(yaml, "real_job.yaml");
    ASSERT_TRUE(config.ok()) << config.status() << "\n" << yaml;
    EXPECT_TRUE(ValidateJobConfig(*config).ok()) << yaml;
    EXPECT_EQ(config->job().workers(), 4);
    EXPECT_EQ(config->job().servers(), 2);
    EXPECT_EQ(config->training().steps(), 25);
    EXPECT_EQ(config->network().tcp_congestion_control(), cc);
    EXPECT_EQ(yaml.find("network:") != std::string::npos, !cc.empty()) << yaml;
  }
}

}  // namespace
}  // namespace pstrain::bench
