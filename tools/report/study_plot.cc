#include "tools/report/study_plot.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace pstrain {
namespace {

// A gnuplot single-quoted string.
std::string GpQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

// A shell single-quoted word.
std::string ShQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

bool Drawable(const PlotPoint& p, const StudyPlot& plot) {
  for (double v : {p.x, p.median, p.min, p.max}) {
    if (!std::isfinite(v)) return false;
  }
  if (plot.log_x && p.x <= 0) return false;
  if (plot.log_y && (p.median <= 0 || p.min <= 0)) return false;
  return true;
}

bool HasPoints(const StudyPlot& plot) {
  for (const PlotSeries& s : plot.series) {
    for (const PlotPoint& p : s.points) {
      if (Drawable(p, plot)) return true;
    }
  }
  return false;
}

bool NonEmptyFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
}

}  // namespace

std::string StudyPlotData(const StudyPlot& plot) {
  std::string data;
  for (size_t i = 0; i < plot.series.size(); ++i) {
    if (i > 0) data += "\n\n";  // gnuplot: the next index
    absl::StrAppend(&data, "# ", plot.series[i].title, "\n");
    bool any = false;
    for (const PlotPoint& p : plot.series[i].points) {
      if (!Drawable(p, plot)) continue;
      any = true;
      absl::StrAppendFormat(&data, "%.9g %.9g %.9g %.9g\n", p.x, p.median,
                            p.min, p.max);
    }
    // An empty index would end gnuplot's plot; a series without points is
    // drawn as nothing (NaN).
    if (!any) data += "NaN NaN NaN NaN\n";
  }
  return data;
}

std::string StudyPlotScript(const std::vector<StudyPlot>& plots) {
  std::string gp =
      "# Drawn by ps_report (tools/report/study_plot.h); rerun with "
      "`gnuplot study.gp` in this folder.\n"
      "set terminal pngcairo size 720,450 font ',10'\n"
      "set grid\nset key outside right top\n";
  for (const StudyPlot& plot : plots) {
    if (!HasPoints(plot)) continue;
    absl::StrAppend(&gp, "\nset output ", GpQuote(plot.name + ".png"),
                    "\nset title ", GpQuote(plot.title), "\nset xlabel ",
                    GpQuote(plot.xlabel), "\nset ylabel ", GpQuote(plot.ylabel),
                    "\n");
    gp += plot.log_x ? "set logscale x\n" : "unset logscale x\n";
    gp += plot.log_y ? "set logscale y\n" : "unset logscale y\n";
    if (plot.xtics.empty()) {
      gp += "set xtics autofreq\nset autoscale x\n";
    } else {
      gp += "set xtics (";
      for (size_t i = 0; i < plot.xtics.size(); ++i) {
        absl::StrAppend(&gp, i ? ", " : "", GpQuote(plot.xtics[i]), " ", i);
      }
      absl::StrAppendFormat(&gp, ")\nset xrange [-0.5:%g]\n",
                            plot.xtics.size() - 0.5);
    }
    gp += "plot ";
    for (size_t i = 0; i < plot.series.size(); ++i) {
      absl::StrAppend(&gp, i ? ", \\\n     " : "", GpQuote(plot.name + ".dat"),
                      " index ", i,
                      plot.points_only
                          ? " using 1:2:3:4 with yerrorbars pt 7 ps 1.5 title "
                          : " using 1:2:3:4 with yerrorlines lw 2 title ",
                      GpQuote(plot.series[i].title));
    }
    gp += "\n";
  }
  return gp;
}

StudyPlotOutcome DrawStudyPlots(const std::string& out_dir,
                                const std::vector<StudyPlot>& plots,
                                const std::string& gnuplot) {
  StudyPlotOutcome outcome;
  const std::string dir = out_dir + "/plots";
  ::mkdir(dir.c_str(), 0755);
  std::vector<const StudyPlot*> drawn;
  for (const StudyPlot& plot : plots) {
    if (HasPoints(plot)) drawn.push_back(&plot);
  }
  if (drawn.empty()) {
    outcome.why_not = "no run succeeded, nothing to draw";
    return outcome;
  }
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream file(dir + "/" + name);
    file << text;
    if (file.flush()) return true;
    outcome.why_not = absl::StrCat("cannot write ", dir, "/", name);
    return false;
  };
  for (const StudyPlot* plot : drawn) {
    if (!write(plot->name + ".dat", StudyPlotData(*plot))) return outcome;
  }
  if (!write("study.gp", StudyPlotScript(plots))) return outcome;
  if (gnuplot.empty()) {
    outcome.why_not =
        "gnuplot is not installed (Debian package gnuplot-nox); plots/study.gp "
        "and its data are there to draw them later";
    return outcome;
  }
  const std::string command = absl::StrCat("cd ", ShQuote(dir), " && ",
                                           ShQuote(gnuplot), " study.gp 2>&1");
  FILE* p = ::popen(command.c_str(), "r");
  std::string output;
  if (p != nullptr) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr) output += buf;
  }
  const int rc = p == nullptr ? -1 : ::pclose(p);
  if (rc != 0) {
    std::vector<std::string> lines =
        absl::StrSplit(output, '\n', absl::SkipWhitespace());
    outcome.why_not = absl::StrCat(
        "gnuplot failed (", gnuplot,
        "): ", lines.empty() ? absl::StrCat("status ", rc) : lines.back());
    return outcome;
  }
  for (const StudyPlot* plot : drawn) {
    const std::string rel = absl::StrCat("plots/", plot->name, ".png");
    if (!NonEmptyFile(out_dir + "/" + rel)) {
      outcome.why_not = absl::StrCat("gnuplot did not write ", rel);
      outcome.pngs.clear();
      return outcome;
    }
    outcome.pngs.emplace_back(plot->title, rel);
  }
  outcome.made = true;
  return outcome;
}

std::string StudyPlotMarkdown(const StudyPlotOutcome& outcome) {
  if (!outcome.made) {
    return absl::StrCat("No gnuplot plots: ", outcome.why_not,
                        ". The tables (and the text plot, where the report "
                        "has one) carry the same numbers.\n");
  }
  std::string md = "Drawn by gnuplot (data and script in `plots/`):\n\n";
  for (const auto& [title, path] : outcome.pngs) {
    absl::StrAppend(&md, "![", title, "](", path, ")\n\n");
  }
  return md;
}

}  // namespace pstrain
