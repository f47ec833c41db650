#include "tools/report/straggler_study.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

StudyRun Run(double s_per_step, double steps, double time) {
  StudyRun r;
  r.s_per_step = s_per_step;
  r.samples_per_s = 128 / s_per_step;
  r.steps_to_target = steps;
  r.time_to_target_s = time;
  return r;
}

// Three repeats around the given medians.
void Add(StudyRuns* runs, const std::string& scenario, const std::string& mode,
         double s_per_step, double steps, double time) {
  for (double k : {0.95, 1.0, 1.05}) {
    (*runs)[scenario][mode].push_back(
        Run(s_per_step * k, steps, std::isinf(time) ? time : time * k));
  }
}

// Numbers shaped like the literature: SSP wins under transient stragglers,
// a persistent straggler makes SSP wait, async:inf runs fast but needs
// more steps, backup workers win, and the full-lr async:2 wins by steps.
StudyRuns Literature() {
  StudyRuns r;
  Add(&r, kTransient, kStudySync, 0.10, 20, 2.0);
  Add(&r, kTransient, kStudySsp, 0.07, 21, 1.5);
  Add(&r, kPersistent, kStudySync, 0.15, 20, 3.0);
  Add(&r, kPersistent, kStudySsp, 0.145, 20, 2.9);
  Add(&r, kPersistent, kStudyAsync, 0.08, 28, 2.3);
  Add(&r, kPersistent, kStudyBackup, 0.06, 22, 1.35);
  Add(&r, kPersistent, kStudySspFullLr, 0.15, 15, 2.25);
  return r;
}

const ClaimVerdict& Claim(const std::vector<ClaimVerdict>& v,
                          const std::string& id) {
  for (const ClaimVerdict& c : v) {
    if (c.id == id) return c;
  }
  ADD_FAILURE() << "no claim " << id;
  return v.front();
}

TEST(StragglerStudyTest, ClaimsSupportedByTheNumbers) {
  const std::vector<ClaimVerdict> v = JudgeClaims(Literature());
  ASSERT_EQ(v.size(), 5u);
  for (const ClaimVerdict& c : v)
    EXPECT_TRUE(c.supported) << c.id << ": " << c.evidence;
  EXPECT_THAT(Claim(v, "ho-transient").evidence,
              HasSubstr("median time to target `async:2:scaled` 1.5 s vs "
                        "`sync` 2 s (×0.75)"));
  EXPECT_THAT(Claim(v, "ho-persistent-unbounded").evidence,
              HasSubstr("throughput gained"));
  EXPECT_THAT(Claim(v, "ho-persistent-unbounded").evidence,
              HasSubstr("steps to target 28 vs 20 (more steps: paid in "
                        "staleness)"));
  EXPECT_THAT(Claim(v, "chen-backup").evidence,
              HasSubstr("the best is `backup:1`"));
  EXPECT_THAT(Claim(v, "update-count").evidence,
              HasSubstr("steps to target 15 vs 20 (×0.75); at lr / N "
                        "(`async:2:scaled`) 20 steps"));
}

// Each claim flips when the numbers say otherwise.
TEST(StragglerStudyTest, ClaimsNotSupportedWhenTheNumbersDisagree) {
  StudyRuns r = Literature();
  r[kTransient][kStudySsp].clear();
  Add(&r, kTransient, kStudySsp, 0.07, 40, 2.8);  // more steps, slower
  r[kPersistent][kStudySsp].clear();
  Add(&r, kPersistent, kStudySsp, 0.10, 20, 2.0);  // 0.67 x BSP's s / step
  r[kPersistent][kStudyAsync].clear();
  Add(&r, kPersistent, kStudyAsync, 0.08, 18, 1.44);  // no staleness price
  r[kPersistent][kStudyBackup].clear();
  Add(&r, kPersistent, kStudyBackup, 0.15, kInf, kInf);  // never reached
  r[kPersistent][kStudySspFullLr].clear();
  Add(&r, kPersistent, kStudySspFullLr, 0.09, 15, 1.35);  // faster steps
  const std::vector<ClaimVerdict> v = JudgeClaims(r);
  for (const ClaimVerdict& c : v) EXPECT_FALSE(c.supported) << c.id;
  EXPECT_THAT(Claim(v, "ho-persistent-unbounded").evidence,
              HasSubstr("no more steps: no price"));
  EXPECT_THAT(Claim(v, "chen-backup").evidence,
              HasSubstr("`backup:1` not reached"));
}

TEST(StragglerStudyTest, MissingRunsAreNotSupportedAndSayWhy) {
  StudyRuns r = Literature();
  r.erase(kTransient);
  for (StudyRun& run : r[kPersistent][kStudyBackup]) run.failed = true;
  const std::vector<ClaimVerdict> v = JudgeClaims(r);
  EXPECT_FALSE(Claim(v, "ho-transient").supported);
  EXPECT_THAT(Claim(v, "ho-transient").evidence,
              HasSubstr("no data: no `async:2:scaled` runs"));
  EXPECT_FALSE(Claim(v, "chen-backup").supported);
  EXPECT_THAT(Claim(v, "chen-backup").evidence,
              HasSubstr("every `backup:1` run failed"));
}

TEST(StragglerStudyTest, ReadsCompareJsonAndWritesTheReport) {
  const std::string json = R"({"modes": [
    {"mode": "sync", "repeats": [
      {"failed": false, "target_reached": true, "s_per_step": 0.1,
       "samples_per_s": 1280, "steps_to_target": 20, "time_to_target_s": 2.1,
       "staleness_max": 0},
      {"failed": false, "target_reached": false, "s_per_step": 0.12,
       "samples_per_s": 1100, "steps_to_target": null,
       "time_to_target_s": null, "staleness_max": 0},
      {"failed": true, "message": "timed out"}]}]})";
  StudyRuns runs;
  ASSERT_TRUE(AddCompareJson(json, "c.json", kPause, &runs).ok());
  ASSERT_EQ(runs[kPause]["sync"].size(), 3u);
  EXPECT_EQ(runs[kPause]["sync"][1].steps_to_target, kInf);
  EXPECT_TRUE(runs[kPause]["sync"][2].failed);
  EXPECT_FALSE(AddCompareJson("{", "bad.json", kPause, &runs).ok());
  EXPECT_THAT(std::string(AddCompareJson(R"({"modes": [{"mode": "sync",
      "repeats": [{"failed": false}]}]})",
                                         "c2.json", kPause, &runs)
                              .message()),
              HasSubstr("c2.json: mode sync: a run without s_per_step"));

  StudyInputs in;
  in.command = "./psctl study stragglers";
  in.setup = "digits, 4 workers";
  in.runs = Literature();
  in.runs[kPause] = runs[kPause];
  const std::vector<ClaimVerdict> v = JudgeClaims(in.runs);
  const std::string md = StudyMarkdown(in, v);
  EXPECT_THAT(md, HasSubstr("./psctl study stragglers"));
  EXPECT_THAT(md, HasSubstr("- **supported** — Ho et al. 2013: Under "
                            "transient stragglers"));
  EXPECT_THAT(md, HasSubstr("## Scenario: pause"));
  EXPECT_LT(md.find("## Scenario: persistent"),
            md.find("## Scenario: transient"));
  EXPECT_LT(md.find("## Scenario: transient"), md.find("## Scenario: pause"));
  EXPECT_THAT(md, HasSubstr("| mode | runs ok | s / step (hardware) | "
                            "samples/s | steps to target (statistical) | "
                            "time to target (s) | staleness max |"));
  // Median of 20 and not reached (sorts last) is +inf with two runs: the
  // spread shows both.
  EXPECT_THAT(md, HasSubstr("| `sync` | 2/3 | 0.1100 (0.1000–0.1200) |"));
  const nlohmann::json j = StudyJson(in, v);
  EXPECT_EQ(j["claims"].size(), 5u);
  EXPECT_EQ(j["claims"][0]["verdict"], "supported");
  EXPECT_EQ(j["scenarios"]["pause"]["sync"]["runs_ok"], 2);
}

// The note under the tables says whether async rows followed the model
// (training.clock model, read from compare.json's repeats) or the slowest
// worker.
TEST(StragglerStudyTest, TheMeasurementNoteSaysWhichClockAsyncRanOn) {
  const std::string json = R"({"modes": [
    {"mode": "async:inf:scaled", "repeats": [
      {"failed": false, "target_reached": true, "s_per_step": 0.05,
       "samples_per_s": 2560, "steps_to_target": 25, "time_to_target_s": 1.3,
       "staleness_max": 40, "model_clock": true}]}]})";
  StudyRuns runs;
  ASSERT_TRUE(AddCompareJson(json, "c.json", kPersistent, &runs).ok());
  ASSERT_EQ(runs[kPersistent]["async:inf:scaled"].size(), 1u);
  EXPECT_TRUE(runs[kPersistent]["async:inf:scaled"][0].model_clock);
  StudyInputs in;
  in.runs = runs;
  EXPECT_THAT(StudyMarkdown(in, JudgeClaims(in.runs)),
              HasSubstr("Every row follows the model"));
  in.runs = Literature();  // Run() leaves model_clock false
  const std::string md = StudyMarkdown(in, JudgeClaims(in.runs));
  EXPECT_THAT(md, HasSubstr("Some async runs here were on the worker clock"));
  EXPECT_EQ(md.find("Every row follows the model"), std::string::npos);
}

TEST(StragglerStudyTest, PlotsPutModesOnXAndAScenarioPerSeries) {
  StudyRuns runs = Literature();
  runs[kPersistent][kStudySync][0].time_to_target_s =
      std::numeric_limits<double>::infinity();  // not reached: left out
  const std::vector<StudyPlot> plots = StragglerPlots(runs);
  ASSERT_EQ(plots.size(), 2u);
  EXPECT_EQ(plots[0].xtics,
            (std::vector<std::string>{"sync", "backup:1", "async:2:scaled",
                                      "async:inf:scaled", "async:2"}));
  EXPECT_TRUE(plots[0].points_only);
  ASSERT_EQ(plots[0].series.size(), 2u);  // persistent, transient
  EXPECT_EQ(plots[0].series[0].title, "persistent");
  ASSERT_EQ(plots[0].series[0].points.size(), 5u);
  EXPECT_DOUBLE_EQ(plots[0].series[0].points[0].median, 0.15);
  EXPECT_DOUBLE_EQ(plots[0].series[0].points[0].min, 0.15 * 0.95);
  EXPECT_EQ(plots[0].series[1].points.size(), 2u);  // transient: sync, SSP
  EXPECT_EQ(plots[0].series[1].points[1].x, 2);     // async:2:scaled's column
  // Time to target of persistent sync: the two runs that reached it.
  EXPECT_DOUBLE_EQ(plots[1].series[0].points[0].min, 3.0);
  EXPECT_DOUBLE_EQ(plots[1].series[0].points[0].max, 3.0 * 1.05);
}

TEST(StragglerStudyTest, ReportShowsThePlotsOrWhyNot) {
  StudyInputs in{"./psctl study stragglers", "Job.", Literature(), {}};
  EXPECT_EQ(StudyMarkdown(in, JudgeClaims(in.runs)).find("## Plots"),
            std::string::npos);
  in.plots = StudyPlotOutcome{};
  in.plots->why_not = "gnuplot is not installed";
  EXPECT_THAT(StudyMarkdown(in, JudgeClaims(in.runs)),
              HasSubstr("## Plots\n\nNo gnuplot plots: gnuplot is not "
                        "installed"));
  in.plots->made = true;
  in.plots->pngs = {{"time per step", "plots/stragglers_s_per_step.png"}};
  EXPECT_THAT(StudyMarkdown(in, JudgeClaims(in.runs)),
              HasSubstr("![time per step](plots/stragglers_s_per_step.png)"));
}

}  // namespace
}  // namespace pstrain
