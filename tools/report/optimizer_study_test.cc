#include "tools/report/optimizer_study.h"

#include <limits>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

StudyRun Run(double steps) {
  StudyRun r;
  r.s_per_step = 0.05;
  r.samples_per_s = 2560;
  r.steps_to_target = steps;
  r.time_to_target_s = std::isinf(steps) ? kInf : steps * 0.05;
  return r;
}

// Three repeats with the given median (one interval of 5 either side).
void Add(OptimizerRuns* runs, const std::string& opt, const std::string& mode,
         double steps) {
  for (double d : {-5.0, 0.0, 5.0}) {
    (*runs)[opt][mode].push_back(Run(std::isinf(steps) ? steps : steps + d));
  }
}

const char* kModes[] = {"async:0", "async:1", "async:2",
                        "async:4", "async:8", "async:inf"};

// Median steps per optimizer for s = 0, 1, 2, 4, 8, inf.
OptimizerRuns Grid(const std::map<std::string, std::vector<double>>& steps) {
  OptimizerRuns runs;
  for (const auto& [opt, v] : steps) {
    for (size_t i = 0; i < v.size(); ++i) Add(&runs, opt, kModes[i], v[i]);
  }
  return runs;
}

const OptimizerClaim& Claim(const std::vector<OptimizerClaim>& v,
                            const std::string& opt) {
  for (const OptimizerClaim& c : v) {
    if (c.optimizer == opt) return c;
  }
  ADD_FAILURE() << "no claim for " << opt;
  return v.front();
}

TEST(OptimizerStudyTest, StalenessOfMode) {
  EXPECT_EQ(StalenessOfMode("async:0"), 0);
  EXPECT_EQ(StalenessOfMode("async:8"), 8);
  EXPECT_EQ(StalenessOfMode("async:2:scaled"), 2);
  EXPECT_TRUE(std::isinf(*StalenessOfMode("async:inf")));
  EXPECT_FALSE(StalenessOfMode("sync"));
  EXPECT_FALSE(StalenessOfMode("async"));
  EXPECT_FALSE(StalenessOfMode("async:x"));
  EXPECT_FALSE(StalenessOfMode("async:-1"));
  EXPECT_FALSE(StalenessOfMode("async:2:full"));
  EXPECT_FALSE(StalenessOfMode("backup:1"));
}

// Dai et al.'s shape: SGD barely moves with s, momentum and Adam slow down
// and Adam misses the target at s = inf.
TEST(OptimizerStudyTest, SupportedWhenMomentumAndAdamSlowDownMore) {
  const auto v =
      JudgeOptimizerClaims(Grid({{"sgd", {20, 20, 20, 20, 25, 25}},
                                 {"momentum", {20, 20, 25, 30, 40, 60}},
                                 {"adam", {20, 25, 30, 40, 60, kInf}}}));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(Claim(v, "momentum").verdict, OptVerdict::kSupported)
      << Claim(v, "momentum").evidence;
  EXPECT_EQ(Claim(v, "adam").verdict, OptVerdict::kSupported)
      << Claim(v, "adam").evidence;
  // The evidence quotes the numbers it rests on.
  EXPECT_THAT(Claim(v, "adam").evidence,
              HasSubstr("s = inf: not reached vs 25"));
  EXPECT_THAT(Claim(v, "momentum").evidence,
              HasSubstr("s = 8: 40 vs 25 (×2.00 vs ×1.25, more)"));
  EXPECT_THAT(Claim(v, "momentum").evidence, HasSubstr("Rule:"));
}

// Staleness hurts every optimizer alike (or none): not supported.
TEST(OptimizerStudyTest, NotSupportedWhenAllSlowDownAlike) {
  const auto v =
      JudgeOptimizerClaims(Grid({{"sgd", {20, 25, 30, 40, 50, 60}},
                                 {"momentum", {20, 25, 30, 40, 50, 60}},
                                 {"adam", {20, 20, 20, 20, 20, 20}}}));
  EXPECT_EQ(Claim(v, "momentum").verdict, OptVerdict::kNotSupported)
      << Claim(v, "momentum").evidence;
  // Adam is hurt less than SGD everywhere: not supported either.
  EXPECT_EQ(Claim(v, "adam").verdict, OptVerdict::kNotSupported)
      << Claim(v, "adam").evidence;
  EXPECT_THAT(Claim(v, "adam").evidence, HasSubstr("Hurt more at s ∈ {}"));
}

// More at some s, less at another; or no baseline: inconclusive.
TEST(OptimizerStudyTest, InconclusiveWhenMixedOrWithoutBaseline) {
  auto v = JudgeOptimizerClaims(Grid({{"sgd", {20, 30, 20, 20, 40, 40}},
                                      {"momentum", {20, 20, 30, 20, 40, 40}},
                                      {"adam", {kInf, 20, 20, 20, 20, 20}}}));
  EXPECT_EQ(Claim(v, "momentum").verdict, OptVerdict::kInconclusive)
      << Claim(v, "momentum").evidence;
  EXPECT_EQ(Claim(v, "adam").verdict, OptVerdict::kInconclusive);
  EXPECT_THAT(Claim(v, "adam").evidence,
              HasSubstr("`adam` at s = 0 did not reach the target"));

  // SGD's baseline failed in every repeat.
  OptimizerRuns runs = Grid({{"sgd", {20, 20, 20}},
                             {"momentum", {20, 30, 40}},
                             {"adam", {20, 30, 40}}});
  for (StudyRun& r : runs["sgd"]["async:0"]) r.failed = true;
  v = JudgeOptimizerClaims(runs);
  EXPECT_EQ(Claim(v, "momentum").verdict, OptVerdict::kInconclusive);
  EXPECT_THAT(Claim(v, "momentum").evidence,
              HasSubstr("`sgd` at s = 0 has no successful run"));

  // Only one s > 0 (the smoke grid): too little to judge.
  v = JudgeOptimizerClaims(
      Grid({{"sgd", {20, 20}}, {"momentum", {20, 40}}, {"adam", {20, 40}}}));
  EXPECT_EQ(Claim(v, "adam").verdict, OptVerdict::kInconclusive);
  EXPECT_THAT(Claim(v, "adam").evidence, HasSubstr("Fewer than two s > 0"));

  // No adam runs at all.
  v = JudgeOptimizerClaims(Grid({{"sgd", {20, 20, 20}}}));
  EXPECT_EQ(Claim(v, "adam").verdict, OptVerdict::kInconclusive);
}

// The margin: 10% more than SGD's slowdown counts, 5% does not.
TEST(OptimizerStudyTest, MarginDecides) {
  // r_momentum(s) = 22/20 = 1.10 vs SGD 1.0 at every s: more.
  auto v = JudgeOptimizerClaims(
      Grid({{"sgd", {20, 20, 20}}, {"momentum", {20, 22, 22}}}));
  EXPECT_EQ(Claim(v, "momentum").verdict, OptVerdict::kSupported)
      << Claim(v, "momentum").evidence;
  v = JudgeOptimizerClaims(
      Grid({{"sgd", {20, 20, 20}}, {"momentum", {20, 21, 21}}}));
  EXPECT_EQ(Claim(v, "momentum").verdict, OptVerdict::kNotSupported)
      << Claim(v, "momentum").evidence;
}

TEST(OptimizerStudyTest, ReportHasTablePlotAndVerdicts) {
  OptimizerStudyInputs in;
  in.command = "./psctl study optimizers";
  in.setup = "Job: test.";
  in.runs = Grid({{"sgd", {20, 20, 20, 20, 25, 25}},
                  {"momentum", {20, 20, 25, 30, 40, 60}},
                  {"adam", {20, 25, 30, 40, 60, kInf}}});
  in.runs["sgd"]["async:0"].push_back([] {
    StudyRun r;
    r.failed = true;
    return r;
  }());
  const auto claims = JudgeOptimizerClaims(in.runs);
  const std::string md = OptimizerStudyMarkdown(in, claims);
  EXPECT_THAT(
      md,
      HasSubstr(
          "| optimizer | s = 0 | s = 1 | s = 2 | s = 4 | s = 8 | s = inf |"));
  EXPECT_THAT(md,
              HasSubstr("| `momentum` | 20 (15–25) | 20 (15–25) | 25 (20–30) | "
                        "30 (25–35) | 40 (35–45) | 60 (55–65) |"));
  EXPECT_THAT(
      md, HasSubstr("| `adam` | ×1.00 | ×1.25 | ×1.50 | ×2.00 | ×3.00 | ∞ |"));
  EXPECT_THAT(md, HasSubstr("| `sgd` | `async:0` | 3/4 | 3/4 |"));
  EXPECT_THAT(
      md, HasSubstr("- **supported** — Dai et al. 2019: Staleness hurts Adam"));
  EXPECT_THAT(md, HasSubstr("./psctl study optimizers\n"));
  EXPECT_THAT(md, HasSubstr("is **supported** for both here"));
  // The plot: adam's s = inf on the not-reached row, momentum's 60 on top.
  const std::string plot = StepsVsStalenessPlot(in.runs);
  // Six columns 6 wide, each point in the middle (offset 3) of its column;
  // sgd, momentum and adam all take 20 steps at s = 0.
  EXPECT_THAT(plot, HasSubstr(absl::StrCat("    n/r |", std::string(33, ' '),
                                           "A  \n")));
  EXPECT_THAT(plot, HasSubstr(absl::StrCat("   60.0 |", std::string(27, ' '),
                                           "A     M  \n")));
  EXPECT_THAT(plot, HasSubstr("   18.0 |  SMA "));
  EXPECT_THAT(plot, HasSubstr("S sgd, M momentum, A adam"));

  const nlohmann::json j = OptimizerStudyJson(in, claims);
  EXPECT_EQ(j["study"], "optimizers");
  EXPECT_EQ(j["claims"][1]["verdict"], "supported");
  EXPECT_EQ(j["optimizers"]["adam"]["async:inf"]["reached"], 0);
  EXPECT_TRUE(j["optimizers"]["adam"]["async:inf"]["steps_to_target"]["median"]
                  .is_null());
  EXPECT_EQ(j["optimizers"]["adam"]["async:8"]["slowdown_vs_s0"], 3.0);
  EXPECT_EQ(j["optimizers"]["adam"]["async:inf"]["staleness"], "inf");
}

TEST(OptimizerStudyTest, GnuplotHasAColumnPerStalenessAndASeriesPerOptimizer) {
  const StudyPlot p =
      StepsVsStalenessGnuplot(Grid({{"sgd", {20, 20, 20, 20, 25, 25}},
                                    {"adam", {20, 25, 30, 40, 60, kInf}}}));
  EXPECT_EQ(p.xtics,
            (std::vector<std::string>{"0", "1", "2", "4", "8", "inf"}));
  ASSERT_EQ(p.series.size(), 2u);
  EXPECT_EQ(p.series[0].title, "sgd");
  EXPECT_EQ(p.series[0].points.size(), 6u);
  EXPECT_EQ(p.series[1].title, "adam");
  EXPECT_EQ(p.series[1].points.size(), 5u);  // not reached at inf: left out
  EXPECT_EQ(p.series[1].points[4].x, 4);
  EXPECT_EQ(p.series[1].points[4].median, 60);
}

TEST(OptimizerStudyTest, TheTextPlotIsTheFallbackOfTheImage) {
  OptimizerStudyInputs in;
  in.runs = Grid({{"sgd", {20, 20, 20, 20, 25, 25}}});
  const auto claims = JudgeOptimizerClaims(in.runs);
  EXPECT_THAT(OptimizerStudyMarkdown(in, claims),
              HasSubstr("median steps to target\n"));
  in.plots = StudyPlotOutcome{};
  in.plots->why_not = "gnuplot failed (x): bad";
  std::string md = OptimizerStudyMarkdown(in, claims);
  EXPECT_THAT(md, HasSubstr("No gnuplot plots: gnuplot failed (x): bad"));
  EXPECT_THAT(md, HasSubstr("median steps to target\n"));
  in.plots->made = true;
  in.plots->pngs = {{"steps", "plots/optimizers_steps_vs_staleness.png"}};
  md = OptimizerStudyMarkdown(in, claims);
  EXPECT_THAT(md,
              HasSubstr("![steps](plots/optimizers_steps_vs_staleness.png)"));
  EXPECT_EQ(md.find("median steps to target\n"), std::string::npos);
}

}  // namespace
}  // namespace pstrain
