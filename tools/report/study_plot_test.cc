#include "tools/report/study_plot.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

StudyPlot TwoSeries() {
  StudyPlot p{"bytes", "bytes vs rows", "rows", "bytes", true, true, {}, {}};
  p.series.push_back({"sync", {{1e4, 80, 79, 81}, {1e6, 82, 80, 83}}});
  // A non-positive value cannot sit on a log axis; NaN is not a number.
  p.series.push_back(
      {"dense",
       {{1e4, 6e5, 6e5, 6e5}, {1e5, 0, 0, 0}, {1e6, std::nan(""), 0, 0}}});
  return p;
}

TEST(StudyPlotTest, DataHasOneBlockPerSeriesAndOnlyDrawablePoints) {
  const std::string data = StudyPlotData(TwoSeries());
  EXPECT_EQ(data,
            "# sync\n10000 80 79 81\n1000000 82 80 83\n\n\n"
            "# dense\n10000 600000 600000 600000\n");
}

TEST(StudyPlotTest, EmptySeriesKeepsItsIndex) {
  StudyPlot p{"t", "t", "x", "y", false, false, {}, {}};
  p.series.push_back({"none", {}});
  p.series.push_back({"one", {{1, 2, 1, 3}}});
  EXPECT_EQ(StudyPlotData(p), "# none\nNaN NaN NaN NaN\n\n\n# one\n1 2 1 3\n");
}

TEST(StudyPlotTest, ScriptSetsAxesTitlesAndOneCurvePerSeries) {
  StudyPlot cat{
      "steps", "steps vs s", "staleness s",     "steps",
      false,   false,        {"0", "1", "inf"}, {{"sgd", {{0, 20, 20, 25}}}}};
  const std::string gp = StudyPlotScript({TwoSeries(), cat});
  EXPECT_NE(gp.find("set terminal pngcairo"), std::string::npos);
  EXPECT_NE(gp.find("set output 'bytes.png'"), std::string::npos);
  EXPECT_NE(gp.find("set logscale x\nset logscale y\n"), std::string::npos);
  EXPECT_NE(gp.find("'bytes.dat' index 0 using 1:2:3:4 with yerrorlines lw 2 "
                    "title 'sync'"),
            std::string::npos);
  EXPECT_NE(gp.find("'bytes.dat' index 1"), std::string::npos);
  EXPECT_NE(gp.find("set output 'steps.png'"), std::string::npos);
  EXPECT_NE(gp.find("unset logscale x\nunset logscale y\n"), std::string::npos);
  EXPECT_NE(gp.find("set xtics ('0' 0, '1' 1, 'inf' 2)"), std::string::npos);
  EXPECT_NE(gp.find("set xrange [-0.5:2.5]"), std::string::npos);
}

TEST(StudyPlotTest, PointsOnlyDrawsErrorBarsWithoutLines) {
  StudyPlot p{"m",
              "by mode",
              "mode",
              "s",
              false,
              false,
              {"sync", "async"},
              {{"persistent", {{0, 1, 1, 2}, {1, 2, 1, 3}}}}};
  p.points_only = true;
  const std::string gp = StudyPlotScript({p});
  EXPECT_NE(gp.find("index 0 using 1:2:3:4 with yerrorbars pt 7"),
            std::string::npos);
  EXPECT_EQ(gp.find("yerrorlines"), std::string::npos);
}

TEST(StudyPlotTest, QuotesInTitlesAreEscaped) {
  StudyPlot p{"q",   "it's", "x", "y",
              false, false,  {},  {{"a'b", {{1, 1, 1, 1}}}}};
  const std::string gp = StudyPlotScript({p});
  EXPECT_NE(gp.find("set title 'it''s'"), std::string::npos);
  EXPECT_NE(gp.find("title 'a''b'"), std::string::npos);
}

std::string TempDir() {
  std::string tmpl = std::string(std::getenv("TEST_TMPDIR")) + "/plotXXXXXX";
  return ::mkdtemp(tmpl.data());
}

TEST(StudyPlotTest, WithoutGnuplotWritesDataAndScriptAndSaysWhy) {
  const std::string dir = TempDir();
  const StudyPlotOutcome o = DrawStudyPlots(dir, {TwoSeries()}, "");
  EXPECT_FALSE(o.made);
  EXPECT_NE(o.why_not.find("gnuplot is not installed"), std::string::npos);
  EXPECT_TRUE(o.pngs.empty());
  std::ifstream gp(dir + "/plots/study.gp"), dat(dir + "/plots/bytes.dat");
  EXPECT_TRUE(gp.good());
  std::stringstream text;
  text << dat.rdbuf();
  EXPECT_EQ(text.str(), StudyPlotData(TwoSeries()));
  EXPECT_NE(StudyPlotMarkdown(o).find("No gnuplot plots: gnuplot is not"),
            std::string::npos);
}

TEST(StudyPlotTest, AFailingGnuplotIsReportedNotFatal) {
  const StudyPlotOutcome o =
      DrawStudyPlots(TempDir(), {TwoSeries()}, "/bin/false");
  EXPECT_FALSE(o.made);
  EXPECT_NE(o.why_not.find("gnuplot failed (/bin/false)"), std::string::npos);
}

TEST(StudyPlotTest, AGnuplotThatWritesNoImageIsCaught) {
  // /bin/true "succeeds" without drawing anything.
  const StudyPlotOutcome o =
      DrawStudyPlots(TempDir(), {TwoSeries()}, "/bin/true");
  EXPECT_FALSE(o.made);
  EXPECT_NE(o.why_not.find("gnuplot did not write plots/bytes.png"),
            std::string::npos);
}

TEST(StudyPlotTest, NothingToDrawSaysSo) {
  StudyPlot empty{"e", "e", "x", "y", true, true, {}, {{"a", {{0, 1, 1, 1}}}}};
  const StudyPlotOutcome o = DrawStudyPlots(TempDir(), {empty}, "/bin/true");
  EXPECT_FALSE(o.made);
  EXPECT_EQ(o.why_not, "no run succeeded, nothing to draw");
}

TEST(StudyPlotTest, MarkdownLinksEveryImage) {
  StudyPlotOutcome o;
  o.made = true;
  o.pngs = {{"a", "plots/a.png"}, {"b", "plots/b.png"}};
  const std::string md = StudyPlotMarkdown(o);
  EXPECT_NE(md.find("![a](plots/a.png)"), std::string::npos);
  EXPECT_NE(md.find("![b](plots/b.png)"), std::string::npos);
}

}  // namespace
}  // namespace pstrain
