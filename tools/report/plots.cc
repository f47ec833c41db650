#include "tools/report/plots.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace pstrain {
namespace {

// A mode's file stem: "async:inf" -> "async_inf".
std::string Stem(const std::string& label) {
  std::string s = label;
  for (char& c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

// A gnuplot single-quoted string.
std::string GpQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

// A shell single-quoted word.
std::string ShQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

const RunMetrics* FirstGood(const ModeRuns& m) {
  for (const RunMetrics& r : m.runs) {
    if (!r.failed) return &r;
  }
  return nullptr;
}

bool HasTraining(const RunMetrics& r) {
  for (const MetricsRow& row : r.rows) {
    if (row.loss) return true;
  }
  return false;
}

bool HasEval(const RunMetrics& r, bool accuracy) {
  for (const MetricsRow& row : r.rows) {
    if (accuracy ? row.eval_accuracy.has_value() : row.eval_loss.has_value())
      return true;
  }
  return false;
}

bool HasStaleness(const RunMetrics& r) {
  for (uint64_t c : r.summary.staleness_histogram) {
    if (c > 0) return true;
  }
  return false;
}

struct Plot {
  std::string name;  // file stem under plots/
  std::string title;
  std::string commands;  // everything but terminal and output
};

std::vector<Plot> Plots(const CompareInputs& in) {
  std::vector<Plot> plots;
  // A line plot over the modes that have data; none when no mode has.
  auto lines = [&](const std::string& name, const std::string& title,
                   const std::string& xlabel, const std::string& ylabel,
                   const char* suffix, const char* columns, const char* style,
                   const std::function<bool(const RunMetrics&)>& has) {
    std::vector<std::string> series;
    for (const ModeRuns& m : in.modes) {
      const RunMetrics* r = FirstGood(m);
      if (r == nullptr || !has(*r)) continue;
      series.push_back(absl::StrCat(GpQuote(Stem(m.label) + suffix), " using ",
                                    columns, " with ", style, " title ",
                                    GpQuote(m.label)));
    }
    if (series.empty()) return;
    plots.push_back(
        {name, title,
         absl::StrCat("set title ", GpQuote(title), "\nset xlabel ",
                      GpQuote(xlabel), "\nset ylabel ", GpQuote(ylabel),
                      "\nplot ", absl::StrJoin(series, ", \\\n     "), "\n")});
  };
  lines("loss_vs_time", "Training loss vs wall time", "wall time (s)",
        "training loss", ".train.dat", "2:3", "lines lw 2", HasTraining);
  lines("loss_vs_step", "Training loss vs step", "step", "training loss",
        ".train.dat", "1:3", "lines lw 2", HasTraining);
  bool accuracy = false;
  for (const ModeRuns& m : in.modes) {
    const RunMetrics* r = FirstGood(m);
    accuracy = accuracy || (r != nullptr && HasEval(*r, true));
  }
  if (accuracy) {
    lines("accuracy_vs_time", "Test accuracy vs wall time", "wall time (s)",
          "test accuracy", ".eval.dat", "2:3", "linespoints lw 2 pt 7 ps 0.6",
          [](const RunMetrics& r) { return HasEval(r, true); });
  } else {
    lines("eval_loss_vs_time", "Test loss vs wall time", "wall time (s)",
          "test loss", ".eval.dat", "2:4", "linespoints lw 2 pt 7 ps 0.6",
          [](const RunMetrics& r) { return HasEval(r, false); });
  }
  for (const ModeRuns& m : in.modes) {
    const RunMetrics* r = FirstGood(m);
    if (r == nullptr || !HasStaleness(*r)) continue;
    const std::string title = absl::StrCat("Staleness of pushes: ", m.label);
    plots.push_back(
        {absl::StrCat("staleness_", Stem(m.label)), title,
         absl::StrCat("set title ", GpQuote(title),
                      "\nset xlabel 'staleness (clocks)'\n"
                      "set ylabel 'share of pushes'\n"
                      "set style fill solid 0.6 border -1\nset boxwidth 0.8\n"
                      "set xrange [-0.5:*]\nset yrange [0:*]\nplot ",
                      GpQuote(Stem(m.label) + ".staleness.dat"),
                      " using 1:3 with boxes notitle\n")});
  }
  return plots;
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

absl::Status WriteData(const CompareInputs& in, const std::string& dir) {
  for (const ModeRuns& m : in.modes) {
    const RunMetrics* r = FirstGood(m);
    if (r == nullptr) continue;
    std::string train = "# step wall_s loss\n",
                eval = "# step wall_s eval_accuracy eval_loss\n";
    for (const MetricsRow& row : r->rows) {
      if (row.loss) {
        absl::StrAppendFormat(&train, "%d %.6f %.8g\n", row.step, row.wall_s,
                              *row.loss);
      }
      if (row.eval_accuracy || row.eval_loss) {
        absl::StrAppendFormat(
            &eval, "%d %.6f %s %s\n", row.step, row.wall_s,
            row.eval_accuracy ? absl::StrFormat("%.6f", *row.eval_accuracy)
                              : "NaN",
            row.eval_loss ? absl::StrFormat("%.8g", *row.eval_loss) : "NaN");
      }
    }
    uint64_t total = 0;
    for (uint64_t c : r->summary.staleness_histogram) total += c;
    std::string stale = "# staleness pushes share\n";
    for (size_t i = 0; i < r->summary.staleness_histogram.size(); ++i) {
      const uint64_t c = r->summary.staleness_histogram[i];
      absl::StrAppendFormat(&stale, "%d %d %.6f\n", i, c,
                            total ? static_cast<double>(c) / total : 0.0);
    }
    const std::string stem = absl::StrCat(dir, "/", Stem(m.label));
    for (const auto& [suffix, text] :
         {std::pair<const char*, const std::string&>{".train.dat", train},
          {".eval.dat", eval},
          {".staleness.dat", stale}}) {
      absl::Status st = WriteText(stem + suffix, text);
      if (!st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

bool NonEmptyFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
}

}  // namespace

std::string PlotScript(const CompareInputs& in, PlotOutcome* outcome) {
  const std::vector<Plot> plots = Plots(in);
  std::string gp =
      "# Drawn by ps_report compare; run `gnuplot plots.gp` in this "
      "directory to redraw.\n"
      "pngterm = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : "
      "'png'\n";
  for (const char* ext : {"png", "svg"}) {
    gp += std::string(ext) == "png"
              ? "set terminal @pngterm size 960,540 noenhanced\n"
              : "set terminal svg size 960,540 noenhanced\n";
    for (const Plot& p : plots) {
      absl::StrAppend(&gp, "\nreset\nset grid\nset key top right\nset output ",
                      GpQuote(absl::StrCat(p.name, ".", ext)), "\n",
                      p.commands);
    }
    gp += "set output\n\n";
  }
  outcome->plots.clear();
  for (const Plot& p : plots) {
    outcome->plots.emplace_back(p.title, absl::StrCat("plots/", p.name));
  }
  return gp;
}

std::string RunGnuplot(const std::string& dir, const std::string& gnuplot) {
  const std::string command = absl::StrCat("cd ", ShQuote(dir), " && ",
                                           ShQuote(gnuplot), " plots.gp 2>&1");
  FILE* p = ::popen(command.c_str(), "r");
  std::string output;
  if (p != nullptr) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr) output += buf;
  }
  const int rc = p == nullptr ? -1 : ::pclose(p);
  if (rc == 0) return "";
  std::vector<std::string> lines =
      absl::StrSplit(output, '\n', absl::SkipWhitespace());
  return absl::StrCat(
      "gnuplot failed (", gnuplot,
      "): ", lines.empty() ? absl::StrCat("status ", rc) : lines.back());
}

PlotOutcome WritePlots(const CompareInputs& in, const std::string& gnuplot) {
  PlotOutcome outcome;
  const std::string dir = in.out_dir + "/plots";
  ::mkdir(dir.c_str(), 0755);
  const std::string script = PlotScript(in, &outcome);
  absl::Status st = WriteData(in, dir);
  if (st.ok()) st = WriteText(dir + "/plots.gp", script);
  if (!st.ok()) {
    outcome.skipped = std::string(st.message());
    return outcome;
  }
  if (outcome.plots.empty()) {
    outcome.skipped = "no run succeeded, nothing to draw";
    return outcome;
  }
  if (gnuplot.empty()) {
    outcome.skipped =
        "gnuplot is not installed (Debian package gnuplot-nox); the data and "
        "plots/plots.gp are there to draw them later";
    return outcome;
  }
  outcome.skipped = RunGnuplot(dir, gnuplot);
  if (!outcome.skipped.empty()) return outcome;
  for (const auto& plot : outcome.plots) {
    for (const char* ext : {".png", ".svg"}) {
      const std::string file = absl::StrCat(in.out_dir, "/", plot.second, ext);
      if (!NonEmptyFile(file)) {
        outcome.skipped = absl::StrCat("gnuplot did not write ", file);
        return outcome;
      }
    }
  }
  outcome.made = true;
  return outcome;
}

}  // namespace pstrain
