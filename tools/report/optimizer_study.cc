#include "tools/report/optimizer_study.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/report/report_math.h"

namespace pstrain {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The optimizers in report order; others found in the runs follow.
const std::vector<std::string>& KnownOptimizers() {
  static const auto* v =
      new std::vector<std::string>{kOptSgd, kOptMomentum, kOptAdam};
  return *v;
}

std::vector<std::string> OptimizerOrder(const OptimizerRuns& runs) {
  std::vector<std::string> order;
  for (const std::string& o : KnownOptimizers()) {
    if (runs.count(o)) order.push_back(o);
  }
  for (const auto& [o, unused] : runs) {
    if (std::find(order.begin(), order.end(), o) == order.end()) {
      order.push_back(o);
    }
  }
  return order;
}

// (staleness, mode label) of the async modes of one optimizer, by s.
std::vector<std::pair<double, std::string>> ModesByStaleness(
    const std::map<std::string, std::vector<StudyRun>>& modes) {
  std::vector<std::pair<double, std::string>> v;
  for (const auto& [mode, unused] : modes) {
    std::optional<double> s = StalenessOfMode(mode);
    if (s) v.emplace_back(*s, mode);
  }
  std::sort(v.begin(), v.end());
  return v;
}

// Every staleness value of any optimizer, ascending.
std::vector<double> AllStaleness(const OptimizerRuns& runs) {
  std::vector<double> all;
  for (const auto& [opt, modes] : runs) {
    for (const auto& [s, mode] : ModesByStaleness(modes)) {
      if (std::find(all.begin(), all.end(), s) == all.end()) all.push_back(s);
    }
  }
  std::sort(all.begin(), all.end());
  return all;
}

std::string SName(double s) {
  return std::isinf(s) ? "inf" : absl::StrFormat("%.0f", s);
}

// The runs of (optimizer, s), or nullptr.
const std::vector<StudyRun>* RunsAt(const OptimizerRuns& runs,
                                    const std::string& opt, double s) {
  auto o = runs.find(opt);
  if (o == runs.end()) return nullptr;
  for (const auto& [mode, mode_runs] : o->second) {
    std::optional<double> ms = StalenessOfMode(mode);
    if (ms && *ms == s) return &mode_runs;
  }
  return nullptr;
}

std::optional<Spread> StepsSpread(const std::vector<StudyRun>* runs) {
  if (runs == nullptr) return std::nullopt;
  std::vector<double> v;
  for (const StudyRun& r : *runs) {
    if (!r.failed) v.push_back(r.steps_to_target);
  }
  return MedianSpread(v);
}

std::optional<double> MedianSteps(const OptimizerRuns& runs,
                                  const std::string& opt, double s) {
  std::optional<Spread> sp = StepsSpread(RunsAt(runs, opt, s));
  if (!sp) return std::nullopt;
  return sp->median;
}

std::string Steps(double v) {
  return std::isinf(v) ? "not reached" : absl::StrFormat("%.4g", v);
}

std::string RatioText(double r) {
  return std::isinf(r) ? "∞" : absl::StrFormat("×%.2f", r);
}

std::string StepsCell(const std::optional<Spread>& s) {
  if (!s) return "—";
  const std::string lo = Steps(s->min), hi = Steps(s->max);
  if (s->count == 1 || lo == hi) return Steps(s->median);
  return absl::StrCat(Steps(s->median), " (", lo, "–", hi, ")");
}

int Reached(const std::vector<StudyRun>& runs) {
  int n = 0;
  for (const StudyRun& r : runs)
    n += !r.failed && std::isfinite(r.steps_to_target);
  return n;
}

int Ok(const std::vector<StudyRun>& runs) {
  int n = 0;
  for (const StudyRun& r : runs) n += !r.failed;
  return n;
}

enum class Cmp { kMore, kLess, kSame };

// X's slowdown ratio against SGD's at one s (the rule in the header).
Cmp Compare(double rx, double rs) {
  if (std::isinf(rx) && std::isinf(rs)) return Cmp::kSame;
  if (std::isinf(rx)) return Cmp::kMore;
  if (std::isinf(rs)) return Cmp::kLess;
  if (rx >= kOptMargin * rs) return Cmp::kMore;
  if (rs >= kOptMargin * rx) return Cmp::kLess;
  return Cmp::kSame;
}

OptimizerClaim Judge(const OptimizerRuns& runs, const std::string& opt,
                     const std::string& name) {
  OptimizerClaim c;
  c.id = absl::StrCat("dai-", opt);
  c.optimizer = opt;
  c.statement = absl::StrCat("Staleness hurts ", name,
                             " more than plain SGD: its steps to the target "
                             "grow faster with the staleness bound s.");
  const std::string rule = absl::StrFormat(
      "Rule: r(s) = median steps(s) / median steps(0); %s is hurt more at s "
      "when r(s) >= %.2f x SGD's (or only it misses the target), less when "
      "SGD's r(s) >= %.2f x its; supported when more at half or more of the "
      "s > 0 and less at none, inconclusive when more at some s and less at "
      "another or without an s = 0 baseline, else not supported.",
      opt, kOptMargin, kOptMargin);
  for (const std::string& o : {opt, std::string(kOptSgd)}) {
    std::optional<double> base = MedianSteps(runs, o, 0);
    if (!base || std::isinf(*base)) {
      c.verdict = OptVerdict::kInconclusive;
      c.evidence = absl::StrCat(
          "no baseline: `", o, "` at s = 0 ",
          !base ? "has no successful run" : "did not reach the target",
          ", so its slowdown cannot be measured. ", rule);
      return c;
    }
  }
  const double x0 = *MedianSteps(runs, opt, 0);
  const double s0 = *MedianSteps(runs, kOptSgd, 0);
  std::vector<std::string> parts, more, less;
  int compared = 0;
  for (double s : AllStaleness(runs)) {
    if (s == 0) continue;
    std::optional<double> xs = MedianSteps(runs, opt, s);
    std::optional<double> ss = MedianSteps(runs, kOptSgd, s);
    if (!xs || !ss) continue;
    ++compared;
    const double rx = *xs / x0, rs = *ss / s0;
    const Cmp cmp = Compare(rx, rs);
    if (cmp == Cmp::kMore) more.push_back(SName(s));
    if (cmp == Cmp::kLess) less.push_back(SName(s));
    parts.push_back(absl::StrCat("s = ", SName(s), ": ", Steps(*xs), " vs ",
                                 Steps(*ss), " (", RatioText(rx), " vs ",
                                 RatioText(rs), ", ",
                                 cmp == Cmp::kMore   ? "more"
                                 : cmp == Cmp::kLess ? "less"
                                                     : "same",
                                 ")"));
  }
  const std::string numbers = absl::StrCat(
      "median steps to target `", opt, "` vs `sgd`: s = 0: ", Steps(x0), " vs ",
      Steps(s0), "; ", absl::StrJoin(parts, "; "), ". Hurt more at s ∈ {",
      absl::StrJoin(more, ", "), "}, less at {", absl::StrJoin(less, ", "),
      "} of ", compared, " values s > 0. ");
  if (compared < 2) {
    c.verdict = OptVerdict::kInconclusive;
    c.evidence =
        absl::StrCat(numbers, "Fewer than two s > 0 to compare. ", rule);
    return c;
  }
  if (!more.empty() && !less.empty()) {
    c.verdict = OptVerdict::kInconclusive;
  } else if (!more.empty() &&
             2 * more.size() >= static_cast<size_t>(compared)) {
    c.verdict = OptVerdict::kSupported;
  } else {
    c.verdict = OptVerdict::kNotSupported;
  }
  c.evidence = absl::StrCat(numbers, rule);
  return c;
}

}  // namespace

std::optional<double> StalenessOfMode(const std::string& mode) {
  const std::vector<std::string> parts = absl::StrSplit(mode, ':');
  if (parts[0] != "async" || parts.size() < 2 || parts.size() > 3 ||
      (parts.size() == 3 && parts[2] != "scaled")) {
    return std::nullopt;
  }
  if (parts[1] == "inf") return kInf;
  int64_t s = 0;
  if (!absl::SimpleAtoi(parts[1], &s) || s < 0) return std::nullopt;
  return static_cast<double>(s);
}

const char* OptVerdictName(OptVerdict v) {
  switch (v) {
    case OptVerdict::kSupported:
      return "supported";
    case OptVerdict::kNotSupported:
      return "not supported";
    case OptVerdict::kInconclusive:
      return "inconclusive";
  }
  return "inconclusive";
}

std::vector<OptimizerClaim> JudgeOptimizerClaims(const OptimizerRuns& runs) {
  return {Judge(runs, kOptMomentum, "momentum"), Judge(runs, kOptAdam, "Adam")};
}

std::string StepsVsStalenessPlot(const OptimizerRuns& runs) {
  const std::vector<double> all = AllStaleness(runs);
  const std::vector<std::string> opts = OptimizerOrder(runs);
  auto letter = [](const std::string& o) {
    if (o == kOptSgd) return 'S';
    if (o == kOptMomentum) return 'M';
    if (o == kOptAdam) return 'A';
    return o.empty() ? '?' : static_cast<char>(std::toupper(o[0]));
  };
  double top = 0;
  for (const std::string& o : opts) {
    for (double s : all) {
      std::optional<double> m = MedianSteps(runs, o, s);
      if (m && std::isfinite(*m)) top = std::max(top, *m);
    }
  }
  constexpr int kRows = 10;
  constexpr int kColWidth = 6;
  if (top <= 0) top = 1;
  // grid[row][col]: row 0 is "not reached", rows 1..kRows from top down;
  // the letters of the optimizers at each point, in report order.
  std::vector<std::string> grid(kRows + 1,
                                std::string(all.size() * kColWidth, ' '));
  std::map<std::pair<int, size_t>, std::string> points;
  for (const std::string& o : opts) {
    for (size_t i = 0; i < all.size(); ++i) {
      std::optional<double> m = MedianSteps(runs, o, all[i]);
      if (!m) continue;
      int row = 0;
      if (std::isfinite(*m)) {
        const int level = static_cast<int>(std::lround(*m / top * kRows));
        row = kRows + 1 - std::clamp(level, 1, kRows);
      }
      points[{row, i}] += letter(o);
    }
  }
  for (const auto& [at, letters] : points) {
    const std::string shown = letters.substr(0, kColWidth - 2);
    const size_t start =
        at.second * kColWidth + kColWidth / 2 - (shown.size() - 1) / 2;
    grid[at.first].replace(start, shown.size(), shown);
  }
  std::string out = "median steps to target\n";
  for (int row = 0; row <= kRows; ++row) {
    const std::string label =
        row == 0 ? "    n/r"
                 : absl::StrFormat("%7.1f", top * (kRows + 1 - row) / kRows);
    absl::StrAppend(&out, label, " |", grid[row], "\n");
  }
  absl::StrAppend(&out, "        +", std::string(all.size() * kColWidth, '-'),
                  "\n         ");
  for (double s : all) {
    absl::StrAppend(&out, absl::StrFormat("%*s", kColWidth / 2 + 1, SName(s)),
                    std::string(kColWidth - kColWidth / 2 - 1, ' '));
  }
  absl::StrAppend(&out, "  staleness bound s\n");
  std::vector<std::string> keys;
  for (const std::string& o : opts) {
    keys.push_back(absl::StrCat(std::string(1, letter(o)), " ", o));
  }
  absl::StrAppend(&out, "        ", absl::StrJoin(keys, ", "),
                  "; n/r: not reached\n");
  return out;
}

StudyPlot StepsVsStalenessGnuplot(const OptimizerRuns& runs) {
  const std::vector<double> all = AllStaleness(runs);
  StudyPlot plot{"optimizers_steps_vs_staleness",
                 "median steps to target vs staleness bound s",
                 "staleness bound s",
                 "steps to target",
                 false,
                 false,
                 {},
                 {}};
  for (double s : all) plot.xtics.push_back(SName(s));
  for (const std::string& o : OptimizerOrder(runs)) {
    PlotSeries series{o, {}};
    for (size_t i = 0; i < all.size(); ++i) {
      const std::vector<StudyRun>* r = RunsAt(runs, o, all[i]);
      if (r == nullptr) continue;
      std::vector<double> v;
      for (const StudyRun& run : *r) {
        if (!run.failed && std::isfinite(run.steps_to_target)) {
          v.push_back(run.steps_to_target);
        }
      }
      std::optional<Spread> sp = MedianSpread(v);
      if (sp) {
        series.points.push_back(
            {static_cast<double>(i), sp->median, sp->min, sp->max});
      }
    }
    plot.series.push_back(series);
  }
  return plot;
}

std::string OptimizerStudyMarkdown(const OptimizerStudyInputs& in,
                                   const std::vector<OptimizerClaim>& claims) {
  std::string md = "# Study: optimizers (staleness vs SGD, momentum, Adam)\n\n";
  absl::StrAppend(
      &md, in.setup, "\n\nRegenerate with:\n\n```sh\n", in.command,
      "\n```\n\n## Conclusions (derived from the numbers below)\n\n");
  for (const OptimizerClaim& c : claims) {
    absl::StrAppend(&md, "- **", OptVerdictName(c.verdict),
                    "** — Dai et al. "
                    "2019: ",
                    c.statement, " ", c.evidence, "\n");
  }
  {
    int supported = 0, not_supported = 0;
    for (const OptimizerClaim& c : claims) {
      supported += c.verdict == OptVerdict::kSupported;
      not_supported += c.verdict == OptVerdict::kNotSupported;
    }
    const int n = static_cast<int>(claims.size());
    absl::StrAppend(
        &md, "\nOverall, \"staleness hurts momentum/Adam more than SGD\" is ",
        supported == n       ? "**supported** for both"
        : not_supported == n ? "**not supported** for either"
        : supported > 0      ? "**supported for one optimizer only**"
                             : "**not decided** (inconclusive)",
        " here (the verdicts above).\n");
  }
  const std::vector<double> all = AllStaleness(in.runs);
  const std::vector<std::string> opts = OptimizerOrder(in.runs);
  md +=
      "\n## Steps to target (statistical efficiency)\n\n"
      "Median over the repeats and (min–max); `not reached`: the run "
      "never met the target.\n\n| optimizer |";
  for (double s : all) absl::StrAppend(&md, " s = ", SName(s), " |");
  md += "\n|---|";
  for (size_t i = 0; i < all.size(); ++i) md += "--:|";
  md += "\n";
  for (const std::string& o : opts) {
    absl::StrAppend(&md, "| `", o, "` |");
    for (double s : all) {
      absl::StrAppend(&md, " ", StepsCell(StepsSpread(RunsAt(in.runs, o, s))),
                      " |");
    }
    md += "\n";
  }
  md += "\nSlowdown r(s) = median steps(s) / median steps(0):\n\n| optimizer |";
  for (double s : all) absl::StrAppend(&md, " s = ", SName(s), " |");
  md += "\n|---|";
  for (size_t i = 0; i < all.size(); ++i) md += "--:|";
  md += "\n";
  for (const std::string& o : opts) {
    absl::StrAppend(&md, "| `", o, "` |");
    std::optional<double> base = MedianSteps(in.runs, o, 0);
    for (double s : all) {
      std::optional<double> m = MedianSteps(in.runs, o, s);
      std::string cell = "—";
      if (m && base && std::isfinite(*base)) cell = RatioText(*m / *base);
      absl::StrAppend(&md, " ", cell, " |");
    }
    md += "\n";
  }
  md += "\n## Plot\n\n";
  if (in.plots && in.plots->made) {
    absl::StrAppend(&md, StudyPlotMarkdown(*in.plots),
                    "(the text plot of the same numbers: `ps_report "
                    "study-optimizers` without `--gnuplot`)\n");
  } else {
    if (in.plots) absl::StrAppend(&md, StudyPlotMarkdown(*in.plots), "\n");
    absl::StrAppend(&md, "```\n", StepsVsStalenessPlot(in.runs), "```\n");
  }
  md +=
      "\n## Every row\n\n| optimizer | mode | runs ok | reached | steps to "
      "target | time to target (s) | s / step | staleness max |\n"
      "|---|---|---|---|--:|--:|--:|--:|\n";
  for (const std::string& o : opts) {
    for (double s : all) {
      const std::vector<StudyRun>* r = RunsAt(in.runs, o, s);
      if (r == nullptr) continue;
      std::string mode;
      for (const auto& [m, unused] : in.runs.at(o)) {
        if (StalenessOfMode(m) == s) mode = m;
      }
      std::vector<double> time, sps, stale;
      for (const StudyRun& run : *r) {
        if (run.failed) continue;
        time.push_back(run.time_to_target_s);
        sps.push_back(run.s_per_step);
        if (run.staleness_max) stale.push_back(*run.staleness_max);
      }
      auto cell = [](const std::vector<double>& v, int d) -> std::string {
        std::optional<Spread> s = MedianSpread(v);
        if (!s) return "—";
        auto f = [d](double x) {
          return std::isinf(x) ? std::string("not reached")
                               : absl::StrFormat("%.*f", d, x);
        };
        if (s->count == 1 || f(s->min) == f(s->max)) return f(s->median);
        return absl::StrCat(f(s->median), " (", f(s->min), "–", f(s->max), ")");
      };
      absl::StrAppend(&md, "| `", o, "` | `", mode, "` | ", Ok(*r), "/",
                      r->size(), " | ", Reached(*r), "/", r->size(), " | ",
                      StepsCell(StepsSpread(r)), " | ", cell(time, 2), " | ",
                      cell(sps, 4), " | ", cell(stale, 0), " |\n");
    }
  }
  md += R"(
## Reading the tables

Each row is mode async (SSP) with staleness bound s: a worker's pull at
clock c waits until the slowest worker has pushed clock c - s (s = 0 is
lock-step, `inf` never waits), and every push is applied on arrival.
A step is one clock (every worker computes one slice of the global batch);
steps to target is the step of the first evaluation that meets the target,
so it moves in multiples of the evaluation interval. Staleness max is the
largest staleness a push actually had. A `metrics.csv` row completes when
every worker has reported that step (`training.clock: worker`); the
workers here run at one speed, so that is also the model's step (the
stragglers study runs async on the model clock, docs/studies.md).
)";
  return md;
}

nlohmann::json OptimizerStudyJson(const OptimizerStudyInputs& in,
                                  const std::vector<OptimizerClaim>& claims) {
  auto num = [](double v) -> nlohmann::json {
    if (!std::isfinite(v)) return nullptr;
    return v;
  };
  nlohmann::json j;
  j["study"] = "optimizers";
  j["command"] = in.command;
  j["setup"] = in.setup;
  nlohmann::json cj = nlohmann::json::array();
  for (const OptimizerClaim& c : claims) {
    cj.push_back({{"id", c.id},
                  {"source", "Dai et al. 2019"},
                  {"optimizer", c.optimizer},
                  {"statement", c.statement},
                  {"verdict", OptVerdictName(c.verdict)},
                  {"evidence", c.evidence}});
  }
  j["claims"] = cj;
  nlohmann::json oj = nlohmann::json::object();
  for (const auto& [opt, modes] : in.runs) {
    std::optional<double> base = MedianSteps(in.runs, opt, 0);
    for (const auto& [mode, runs] : modes) {
      nlohmann::json m;
      std::optional<double> s = StalenessOfMode(mode);
      m["staleness"] =
          s ? (std::isinf(*s) ? nlohmann::json("inf") : nlohmann::json(*s))
            : nlohmann::json(nullptr);
      m["runs"] = runs.size();
      m["runs_ok"] = Ok(runs);
      m["reached"] = Reached(runs);
      std::optional<Spread> sp = StepsSpread(&runs);
      m["steps_to_target"] = sp ? nlohmann::json{{"median", num(sp->median)},
                                                 {"min", num(sp->min)},
                                                 {"max", num(sp->max)},
                                                 {"n", sp->count}}
                                : nlohmann::json(nullptr);
      m["slowdown_vs_s0"] = sp && base && std::isfinite(*base)
                                ? num(sp->median / *base)
                                : nlohmann::json(nullptr);
      oj[opt][mode] = m;
    }
  }
  j["optimizers"] = oj;
  return j;
}

}  // namespace pstrain
