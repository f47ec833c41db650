// The plots of `psctl compare`, drawn by gnuplot: loss against wall time and
// against step, accuracy (or, for regressors, eval loss) against time, and a
// staleness histogram per mode, each as PNG and SVG under OUT/plots/. Each
// mode is drawn from its first run that succeeded.
#ifndef PSTRAIN_TOOLS_REPORT_PLOTS_H_
#define PSTRAIN_TOOLS_REPORT_PLOTS_H_

#include <string>

#include "tools/report/compare_report.h"

namespace pstrain {

// Writes the data files and OUT/plots/plots.gp, then runs `gnuplot` (a path;
// empty: not installed) on it. Never fails: when gnuplot is missing or fails,
// the outcome says why (the script and data stay for a later run by hand).
PlotOutcome WritePlots(const CompareInputs& in, const std::string& gnuplot);

// Runs `gnuplot` (a path) on DIR/plots.gp with DIR as the working
// directory; "" when it succeeded, else why not (its last line of output).
std::string RunGnuplot(const std::string& dir, const std::string& gnuplot);

// The gnuplot script for `in` (file names relative to OUT/plots), and the
// plots it draws; exposed for tests.
std::string PlotScript(const CompareInputs& in, PlotOutcome* plots);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_PLOTS_H_
