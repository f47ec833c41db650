// The gnuplot plots of the studies (`psctl study NAME`): line plots of
// median values with (min-max) error bars, one series per mode or
// optimizer, optionally on log axes, written as PNG under OUT/plots/. The
// data and the script stay beside the images, so a plot can be redrawn by
// hand (`cd OUT/plots && gnuplot study.gp`). `psctl compare`'s own plots are
// tools/report/plots.h.
#ifndef PSTRAIN_TOOLS_REPORT_STUDY_PLOT_H_
#define PSTRAIN_TOOLS_REPORT_STUDY_PLOT_H_

#include <string>
#include <vector>

namespace pstrain {

// One point: the median and the (min, max) of the repeats at x.
struct PlotPoint {
  double x = 0;
  double median = 0;
  double min = 0;
  double max = 0;
};

struct PlotSeries {
  std::string title;  // the key, e.g. "sync (PS)"
  std::vector<PlotPoint>
      points;  // in x order; non-finite y values are left out
};

struct StudyPlot {
  std::string name;  // file stem under OUT/plots/: [a-z0-9_-]+
  std::string title;
  std::string xlabel;
  std::string ylabel;
  bool log_x = false;
  bool log_y = false;
  // Tic labels at x = 0, 1, 2, ... when the x axis is categorical (e.g.
  // staleness 0, 1, 2, 4, 8, inf); empty: numeric tics.
  std::vector<std::string> xtics;
  std::vector<PlotSeries> series;
  // Points with error bars, not joined by lines (categories without an
  // order, e.g. modes).
  bool points_only = false;
};

struct StudyPlotOutcome {
  bool made = false;
  // When !made: why not (gnuplot missing or failing, nothing to draw).
  std::string why_not;
  // (title, path of the PNG relative to OUT), one per plot drawn.
  std::vector<std::pair<std::string, std::string>> pngs;
};

// The gnuplot script drawing `plots` from OUT/plots/<name>.dat into
// OUT/plots/<name>.png (paths relative to OUT/plots); exposed for tests.
std::string StudyPlotScript(const std::vector<StudyPlot>& plots);

// The data file of one plot: a block per series (gnuplot `index`), rows
// "x median min max"; exposed for tests.
std::string StudyPlotData(const StudyPlot& plot);

// Writes OUT/plots/<name>.dat per plot and OUT/plots/study.gp, then runs
// `gnuplot` (a path; empty: not installed) on the script. Never fails: when
// a file cannot be written, gnuplot is missing or fails, or a PNG is not
// written, the outcome says why and the caller falls back to text.
StudyPlotOutcome DrawStudyPlots(const std::string& out_dir,
                                const std::vector<StudyPlot>& plots,
                                const std::string& gnuplot);

// The markdown of a report's plot section: the images when made, else one
// line saying why they are missing (the caller adds its text fallback).
std::string StudyPlotMarkdown(const StudyPlotOutcome& outcome);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_STUDY_PLOT_H_
