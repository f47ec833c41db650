#include "tools/report/scaling_study.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// M = 1 MB, R = 100 MB/s (M / R = 10 ms), compute 100 ms.
ScalingSetup StudySetup(bool shaped = true) {
  ScalingSetup s;
  s.model_bytes = 1e6;
  if (shaped) s.link_bytes_per_s = 1e8;
  s.compute_s = 0.1;
  s.local_batch = 32;
  s.warmup_steps = 5;
  s.steps = 25;
  return s;
}

ScalingRun OkRun(double s) {
  ScalingRun r;
  r.s_per_step = s;
  r.measured_steps = 20;
  return r;
}

ScalingRun Failed(const std::string& why) {
  ScalingRun r;
  r.failed = true;
  r.why = why;
  return r;
}

// Three repeats around each time, so medians are the middle value.
void Add(ScalingRuns* runs, const std::string& design, int n, double s) {
  for (double f : {0.98, 1.0, 1.03}) (*runs)[design][n].push_back(OkRun(s * f));
}

// Every cell at exactly what the analytic model predicts.
ScalingRuns AsModelled(const ScalingSetup& setup) {
  ScalingRuns runs;
  for (const std::string design : {"ps:1", "ps:2", "ps:4", "allreduce"}) {
    const int k = *ServersOfDesign(design);
    for (int n : {1, 2, 4, 8}) {
      Add(&runs, design, n, *AnalyticModel(k, n, setup).predicted_s_per_step);
    }
  }
  return runs;
}

const ScalingClaim& Claim(const std::vector<ScalingClaim>& claims,
                          const std::string& id) {
  for (const ScalingClaim& c : claims) {
    if (c.id == id) return c;
  }
  ADD_FAILURE() << "no claim " << id;
  static const ScalingClaim none;
  return none;
}

const ScalingPoint& Point(const std::vector<ScalingPoint>& points,
                          const std::string& design, int n) {
  for (const ScalingPoint& p : points) {
    if (p.design == design && p.workers == n) return p;
  }
  ADD_FAILURE() << "no point " << design << " N = " << n;
  static const ScalingPoint none;
  return none;
}

TEST(ScalingStudyTest, DesignLabels) {
  EXPECT_EQ(*ServersOfDesign("ps:1"), 1);
  EXPECT_EQ(*ServersOfDesign("ps:12"), 12);
  EXPECT_EQ(*ServersOfDesign("allreduce"), 0);
  for (const char* bad : {"ps:0", "ps:", "ps:2x", "ps", "sync", "ps:-1"}) {
    absl::StatusOr<int> k = ServersOfDesign(bad);
    ASSERT_FALSE(k.ok()) << bad;
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(k.status().message().find(bad), std::string::npos);
  }
}

TEST(ScalingStudyTest, SteadyStateSkipsWarmupAndEvaluationRows) {
  std::vector<MetricsRow> rows;
  for (int step = 0; step <= 10; ++step) {
    MetricsRow r;
    r.step = step;
    // A slow step 1 (3 s after step 0), then 0.5 s per step.
    r.wall_s = step == 0 ? 5.0 : 8.0 + 0.5 * (step - 1);
    r.loss = 1.0;
    rows.push_back(r);
  }
  MetricsRow eval;  // the final evaluation: no loss, later wall time
  eval.step = 10;
  eval.wall_s = 100;
  rows.push_back(eval);
  int64_t measured = 0;
  absl::StatusOr<double> s = SteadySecondsPerStep(rows, 2, &measured);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(*s, 0.5);
  EXPECT_EQ(measured, 8);
  // Without skipping, the slow start counts.
  s = SteadySecondsPerStep(rows, 0, &measured);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(*s, 0.75);  // (12.5 - 5) / 10
  EXPECT_EQ(measured, 10);
  // Nothing left to span after the warm-up.
  s = SteadySecondsPerStep(rows, 10, &measured);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ScalingStudyTest, AnalyticModelBytesPerLink) {
  const ScalingSetup setup = StudySetup();
  // PS, K = 1, N = 8: the server's link carries 8 MB each way.
  LinkModel m = AnalyticModel(1, 8, setup);
  EXPECT_DOUBLE_EQ(m.server_link_bytes, 8e6);
  EXPECT_DOUBLE_EQ(m.worker_link_bytes, 1e6);
  EXPECT_DOUBLE_EQ(*m.predicted_s_per_step, 0.1 + 2 * 8e6 / 1e8);
  // K = 4, N = 2: the server links carry less than a worker's, which is
  // then the bottleneck.
  m = AnalyticModel(4, 2, setup);
  EXPECT_DOUBLE_EQ(m.server_link_bytes, 0.5e6);
  EXPECT_DOUBLE_EQ(*m.predicted_s_per_step, 0.1 + 2 * 1e6 / 1e8);
  // Ring: 2 (N - 1) / N x M per worker link; nothing at N = 1.
  m = AnalyticModel(0, 8, setup);
  EXPECT_DOUBLE_EQ(m.server_link_bytes, 0);
  EXPECT_DOUBLE_EQ(m.worker_link_bytes, 1.75e6);
  EXPECT_DOUBLE_EQ(*m.predicted_s_per_step, 0.1 + 1.75e6 / 1e8);
  EXPECT_DOUBLE_EQ(AnalyticModel(0, 1, setup).worker_link_bytes, 0);
  // Not shaped: bytes, no time.
  m = AnalyticModel(1, 8, StudySetup(/*shaped=*/false));
  EXPECT_DOUBLE_EQ(m.server_link_bytes, 8e6);
  EXPECT_FALSE(m.predicted_s_per_step.has_value());
}

TEST(ScalingStudyTest, SpeedupAndEfficiencyAgainstTheDesignsOwnN1) {
  ScalingRuns runs;
  runs["ps:1"][1] = {OkRun(0.2), OkRun(0.1), OkRun(0.3)};  // median 0.2
  runs["ps:1"][4] = {OkRun(0.4), Failed("worker 2: killed"), OkRun(0.4)};
  const std::vector<ScalingPoint> points = ScalingPoints(runs, StudySetup());
  const ScalingPoint& p = Point(points, "ps:1", 4);
  EXPECT_EQ(p.runs, 3);
  EXPECT_EQ(p.runs_ok, 2);
  EXPECT_EQ(p.why_failed, "worker 2: killed");
  EXPECT_DOUBLE_EQ(p.s_per_step->median, 0.4);
  EXPECT_DOUBLE_EQ(*p.samples_per_s, 4 * 32 / 0.4);
  EXPECT_DOUBLE_EQ(*p.speedup, 2.0);  // 4 x 0.2 / 0.4
  EXPECT_DOUBLE_EQ(*p.efficiency, 0.5);
  EXPECT_DOUBLE_EQ(Point(points, "ps:1", 1).s_per_step->min, 0.1);
  EXPECT_DOUBLE_EQ(*Point(points, "ps:1", 1).efficiency, 1.0);
}

TEST(ScalingStudyTest, NoEfficiencyWithoutAnN1Run) {
  ScalingRuns runs;
  runs["ps:1"][1] = {Failed("did not start")};
  runs["ps:1"][2] = {OkRun(0.3)};
  const std::vector<ScalingPoint> points = ScalingPoints(runs, StudySetup());
  EXPECT_FALSE(Point(points, "ps:1", 2).efficiency.has_value());
  EXPECT_TRUE(Point(points, "ps:1", 2).s_per_step.has_value());
}

// Measured exactly as the model predicts (1 MB at 100 MB/s, 100 ms
// compute): the PS at K = 1 saturates at N = 4, K = 2 at N = 8, K = 4
// beyond the grid; the ring loses little. Every claim holds.
TEST(ScalingStudyTest, SupportedWhenTheNetworkBehavesAsModelled) {
  const ScalingSetup setup = StudySetup();
  const std::vector<ScalingPoint> points =
      ScalingPoints(AsModelled(setup), setup);
  const std::vector<ScalingClaim> claims = JudgeScalingClaims(points, setup);
  ASSERT_EQ(claims.size(), 3u);
  for (const ScalingClaim& c : claims) {
    EXPECT_TRUE(c.supported) << c.id << ": " << c.evidence;
    EXPECT_NE(c.evidence.find("Rule:"), std::string::npos) << c.id;
  }
  EXPECT_NE(Claim(claims, "ps1-falls-ring-stays")
                .evidence.find("`ps:1` 0.86 -> 0.46"),
            std::string::npos)
      << Claim(claims, "ps1-falls-ring-stays").evidence;
  bool known = false;
  EXPECT_EQ(SaturationPoint(points, "ps:1", false, &known), 4);
  EXPECT_TRUE(known);
  EXPECT_EQ(SaturationPoint(points, "ps:2", false, &known), 8);
  EXPECT_EQ(SaturationPoint(points, "ps:4", false, &known), std::nullopt);
  EXPECT_TRUE(known);
  const std::string& sat = Claim(claims, "servers-move-saturation").evidence;
  EXPECT_NE(sat.find("`ps:1` N = 4, `ps:2` N = 8, `ps:4` beyond N = 8"),
            std::string::npos)
      << sat;
  EXPECT_NE(
      Claim(claims, "model-explains-time").evidence.find("12 of 12 cells"),
      std::string::npos);
}

// A ring that degrades like the PS: the first claim fails on the ring.
TEST(ScalingStudyTest, NotSupportedWhenTheRingFallsToo) {
  const ScalingSetup setup = StudySetup();
  ScalingRuns runs = AsModelled(setup);
  runs["allreduce"][8].clear();
  Add(&runs, "allreduce", 8, 0.2);  // efficiency 0.5
  const std::vector<ScalingClaim> claims =
      JudgeScalingClaims(ScalingPoints(runs, setup), setup);
  const ScalingClaim& c = Claim(claims, "ps1-falls-ring-stays");
  EXPECT_FALSE(c.supported) << c.evidence;
  EXPECT_NE(c.evidence.find("`allreduce` 0.91 -> 0.50"), std::string::npos)
      << c.evidence;
}

// A PS that does not lose efficiency (e.g. compute-bound): not supported.
TEST(ScalingStudyTest, NotSupportedWhenThePsDoesNotFall) {
  const ScalingSetup setup = StudySetup();
  ScalingRuns runs;
  for (const std::string design : {"ps:1", "ps:2", "ps:4", "allreduce"}) {
    for (int n : {1, 2, 4, 8}) Add(&runs, design, n, 0.1);
  }
  const std::vector<ScalingClaim> claims =
      JudgeScalingClaims(ScalingPoints(runs, setup), setup);
  EXPECT_FALSE(Claim(claims, "ps1-falls-ring-stays").supported);
  // No design saturates inside the grid: nothing moved.
  const ScalingClaim& sat = Claim(claims, "servers-move-saturation");
  EXPECT_FALSE(sat.supported);
  EXPECT_NE(sat.evidence.find("`ps:1` beyond N = 8"), std::string::npos)
      << sat.evidence;
  // Measured 0.1 s everywhere vs the model's up to 0.26 s.
  EXPECT_FALSE(Claim(claims, "model-explains-time").supported);
}

// More servers that saturate earlier (the opposite order): not supported.
TEST(ScalingStudyTest, NotSupportedWhenMoreServersSaturateEarlier) {
  const ScalingSetup setup = StudySetup();
  ScalingRuns runs;
  Add(&runs, "ps:1", 1, 0.1);
  Add(&runs, "ps:1", 2, 0.1);
  Add(&runs, "ps:1", 4, 0.2);  // saturates at 4
  Add(&runs, "ps:4", 1, 0.1);
  Add(&runs, "ps:4", 2, 0.2);  // saturates at 2
  Add(&runs, "ps:4", 4, 0.3);
  const ScalingClaim sat =
      Claim(JudgeScalingClaims(ScalingPoints(runs, setup), setup),
            "servers-move-saturation");
  EXPECT_FALSE(sat.supported);
  EXPECT_NE(sat.evidence.find("`ps:1` N = 4, `ps:4` N = 2"), std::string::npos)
      << sat.evidence;
  // Same saturation point for both: not moved either.
  ScalingRuns same;
  Add(&same, "ps:1", 1, 0.1);
  Add(&same, "ps:1", 2, 0.2);
  Add(&same, "ps:2", 1, 0.1);
  Add(&same, "ps:2", 2, 0.2);
  EXPECT_FALSE(Claim(JudgeScalingClaims(ScalingPoints(same, setup), setup),
                     "servers-move-saturation")
                   .supported);
}

// The smoke grid (N = 1, 2) and loopback: each claim says which data is
// missing, never "supported".
TEST(ScalingStudyTest, MissingDataIsNotSupportedAndSaysWhy) {
  const ScalingSetup setup = StudySetup(/*shaped=*/false);
  ScalingRuns runs;
  for (const std::string design : {"ps:1", "ps:2", "allreduce"}) {
    Add(&runs, design, 1, 0.1);
    Add(&runs, design, 2, 0.1);
  }
  const std::vector<ScalingClaim> claims =
      JudgeScalingClaims(ScalingPoints(runs, setup), setup);
  ASSERT_EQ(claims.size(), 3u);
  EXPECT_FALSE(Claim(claims, "ps1-falls-ring-stays").supported);
  EXPECT_NE(Claim(claims, "ps1-falls-ring-stays")
                .evidence.find("needs two values of N >= 2"),
            std::string::npos);
  EXPECT_FALSE(Claim(claims, "model-explains-time").supported);
  EXPECT_NE(Claim(claims, "model-explains-time")
                .evidence.find("links were not shaped"),
            std::string::npos);
  // Every ps:1 run failed: no efficiency to judge.
  ScalingRuns failed = AsModelled(StudySetup());
  for (auto& [n, list] : failed["ps:1"]) list = {Failed("x")};
  const ScalingClaim c = Claim(
      JudgeScalingClaims(ScalingPoints(failed, StudySetup()), StudySetup()),
      "ps1-falls-ring-stays");
  EXPECT_FALSE(c.supported);
  EXPECT_NE(c.evidence.find("no data"), std::string::npos);
}

TEST(ScalingStudyTest, ReportHasTableModelPlotAndVerdicts) {
  ScalingInputs in;
  in.command = "./psctl study scaling";
  in.setup = "a setup";
  in.links = "shaped to 0.8 Gbit/s";
  in.model = StudySetup();
  in.runs = AsModelled(in.model);
  const std::vector<ScalingPoint> points = ScalingPoints(in.runs, in.model);
  const std::vector<ScalingClaim> claims = JudgeScalingClaims(points, in.model);
  const std::string md = ScalingMarkdown(in, points, claims, "PLOT LINE");
  EXPECT_NE(md.find("**Transport limits in force:** shaped to 0.8 Gbit/s"),
            std::string::npos);
  EXPECT_NE(md.find("| `ps:1` | 8 | 3/3 | 0.2600 (0.2548–0.2678) | 985 | "
                    "3.69 | 0.46 | 8 | 1 | 0 | 0.2600 | 0.46 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| `allreduce` | 8 | 3/3 |"), std::string::npos);
  EXPECT_NE(md.find("PLOT LINE"), std::string::npos);
  EXPECT_NE(md.find("**supported** — "), std::string::npos);
  EXPECT_NE(md.find("In short: at N = 8"), std::string::npos);
  const std::string plot = EfficiencyTextPlot(points);
  EXPECT_NE(plot.find("A ps:1, B ps:2, C ps:4, R allreduce"), std::string::npos)
      << plot;
  const std::string data = ScalingPlotData(points);
  EXPECT_NE(data.find("# N ps:1 ps:2 ps:4 allreduce"), std::string::npos);
  EXPECT_NE(data.find("\n8 0.4615 0.6667 0.8571 0.8511"), std::string::npos)
      << data;
  nlohmann::json j = ScalingJson(in, points, claims);
  EXPECT_EQ(j["cells"].size(), 16u);
  EXPECT_EQ(j["claims"][0]["verdict"], "supported");
}

}  // namespace
}  // namespace pstrain
