#include "tools/report/scaling_study.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace pstrain {
namespace {

// Designs in report order: ps:1, ps:2, ... by K, then the ring.
std::vector<std::string> DesignOrder(const ScalingRuns& runs) {
  std::vector<std::pair<int, std::string>> ps;
  bool ring = false;
  for (const auto& [design, unused] : runs) {
    absl::StatusOr<int> k = ServersOfDesign(design);
    if (!k.ok()) continue;
    if (*k == 0) {
      ring = true;
    } else {
      ps.emplace_back(*k, design);
    }
  }
  std::sort(ps.begin(), ps.end());
  std::vector<std::string> out;
  for (const auto& [k, d] : ps) out.push_back(d);
  if (ring) out.push_back(kRingDesign);
  return out;
}

const ScalingPoint* Find(const std::vector<ScalingPoint>& points,
                         const std::string& design, int n) {
  for (const ScalingPoint& p : points) {
    if (p.design == design && p.workers == n) return &p;
  }
  return nullptr;
}

std::vector<int> GridOf(const std::vector<ScalingPoint>& points) {
  std::set<int> n;
  for (const ScalingPoint& p : points) n.insert(p.workers);
  return {n.begin(), n.end()};
}

std::vector<std::string> DesignsOf(const std::vector<ScalingPoint>& points) {
  std::vector<std::string> out;
  for (const ScalingPoint& p : points) {
    if (std::find(out.begin(), out.end(), p.design) == out.end()) {
      out.push_back(p.design);
    }
  }
  return out;
}

std::string Eff(const std::optional<double>& e) {
  return e ? absl::StrFormat("%.2f", *e) : std::string("—");
}

std::string MB(double bytes) { return absl::StrFormat("%.3g", bytes / 1e6); }

std::string SatName(std::optional<int> n, bool known, int largest) {
  if (!known) return "unknown";
  if (n) return absl::StrCat("N = ", *n);
  return absl::StrCat("beyond N = ", largest);
}

char Letter(const std::string& design, const std::vector<std::string>& all) {
  if (design == kRingDesign) return 'R';
  const auto it = std::find(all.begin(), all.end(), design);
  return static_cast<char>('A' + (it - all.begin()));
}

}  // namespace

absl::StatusOr<int> ServersOfDesign(const std::string& design) {
  if (design == kRingDesign) return 0;
  absl::string_view rest = design;
  int k = 0;
  if (absl::ConsumePrefix(&rest, "ps:") && absl::SimpleAtoi(rest, &k) &&
      k >= 1 && rest.find_first_not_of("0123456789") == rest.npos) {
    return k;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "design '", design, "': expected ps:K (K >= 1 servers) or allreduce"));
}

absl::StatusOr<double> SteadySecondsPerStep(const std::vector<MetricsRow>& rows,
                                            int64_t warmup,
                                            int64_t* measured_steps) {
  const MetricsRow* first = nullptr;
  const MetricsRow* last = nullptr;
  for (const MetricsRow& r : rows) {
    if (!r.loss || r.step < warmup) continue;
    if (first == nullptr || r.step < first->step) first = &r;
    if (last == nullptr || r.step > last->step) last = &r;
  }
  if (first == nullptr || last == nullptr || last->step <= first->step) {
    return absl::FailedPreconditionError(
        absl::StrCat("fewer than two training rows at or after step ", warmup,
                     " (the warm-up skipped): no steady-state time per step"));
  }
  *measured_steps = last->step - first->step;
  return (last->wall_s - first->wall_s) / static_cast<double>(*measured_steps);
}

LinkModel AnalyticModel(int servers, int workers, const ScalingSetup& setup) {
  LinkModel m;
  const double M = setup.model_bytes, n = workers;
  double bottleneck = 0;  // bytes on the busiest link, each way
  if (servers > 0) {
    m.server_link_bytes = n * M / servers;
    m.worker_link_bytes = M;
    bottleneck = 2 * std::max(m.server_link_bytes, m.worker_link_bytes);
  } else {
    m.worker_link_bytes = 2 * (n - 1) / n * M;
    bottleneck = m.worker_link_bytes;
  }
  if (setup.link_bytes_per_s && *setup.link_bytes_per_s > 0) {
    m.predicted_s_per_step =
        setup.compute_s + bottleneck / *setup.link_bytes_per_s;
  }
  return m;
}

std::vector<ScalingPoint> ScalingPoints(const ScalingRuns& runs,
                                        const ScalingSetup& setup) {
  std::vector<ScalingPoint> out;
  for (const std::string& design : DesignOrder(runs)) {
    const int k = *ServersOfDesign(design);
    const auto& by_n = runs.at(design);
    std::optional<double> t1, pred1;
    for (const auto& [n, list] : by_n) {
      ScalingPoint p;
      p.design = design;
      p.workers = n;
      p.runs = static_cast<int>(list.size());
      std::vector<double> v, sent;
      for (const ScalingRun& r : list) {
        if (r.failed) {
          if (p.why_failed.empty()) p.why_failed = r.why;
        } else {
          v.push_back(r.s_per_step);
          sent.push_back(r.sent_bytes_per_worker_step);
        }
      }
      if (std::optional<Spread> b = MedianSpread(sent)) {
        p.sent_bytes_per_worker_step = b->median;
      }
      p.runs_ok = static_cast<int>(v.size());
      p.s_per_step = MedianSpread(v);
      p.model = AnalyticModel(k, n, setup);
      if (p.s_per_step && p.s_per_step->median > 0) {
        const double t = p.s_per_step->median;
        p.samples_per_s = n * setup.local_batch / t;
        if (n == 1) t1 = t;
        if (t1) {
          p.speedup = n * *t1 / t;
          p.efficiency = *t1 / t;
        }
      }
      if (p.model.predicted_s_per_step) {
        if (n == 1) pred1 = p.model.predicted_s_per_step;
        if (pred1)
          p.predicted_efficiency = *pred1 / *p.model.predicted_s_per_step;
      }
      out.push_back(std::move(p));
    }
  }
  return out;
}

std::optional<int> SaturationPoint(const std::vector<ScalingPoint>& points,
                                   const std::string& design, bool predicted,
                                   bool* known) {
  *known = false;
  for (const ScalingPoint& p : points) {
    if (p.design != design) continue;
    const std::optional<double>& e =
        predicted ? p.predicted_efficiency : p.efficiency;
    if (!e) continue;
    *known = true;
    if (*e < kSaturatedBelow) return p.workers;
  }
  return std::nullopt;
}

std::vector<ScalingClaim> JudgeScalingClaims(
    const std::vector<ScalingPoint>& points, const ScalingSetup& setup) {
  std::vector<ScalingClaim> out;
  const std::vector<int> grid = GridOf(points);
  const int largest = grid.empty() ? 0 : grid.back();
  int smallest2 = 0;  // the smallest N >= 2
  for (int n : grid) {
    if (n >= 2) {
      smallest2 = n;
      break;
    }
  }

  // 1. The PS with one server loses efficiency with N; the ring keeps it.
  {
    ScalingClaim c{"ps1-falls-ring-stays",
                   "The parameter server's scaling efficiency falls with N at "
                   "K = 1 while the ring's stays.",
                   false, ""};
    const ScalingPoint* ps_lo = Find(points, "ps:1", smallest2);
    const ScalingPoint* ps_hi = Find(points, "ps:1", largest);
    const ScalingPoint* r_lo = Find(points, kRingDesign, smallest2);
    const ScalingPoint* r_hi = Find(points, kRingDesign, largest);
    const std::string rule = absl::StrFormat(
        "Rule: from the smallest N >= 2 to the largest N (both designs "
        "communicate there; the ring sends nothing at N = 1), supported when "
        "ps:1's median efficiency drops by at least %.2f and the ring's by "
        "less than %.2f.",
        kFalls, kStays);
    if (smallest2 == 0 || smallest2 == largest) {
      c.evidence = absl::StrCat(
          "no data: the grid needs two values of N >= 2 (it has N = ",
          absl::StrJoin(grid, ", "), "). ", rule);
    } else if (!ps_lo || !ps_hi || !r_lo || !r_hi || !ps_lo->efficiency ||
               !ps_hi->efficiency || !r_lo->efficiency || !r_hi->efficiency) {
      c.evidence = absl::StrCat(
          "no data: an efficiency of ps:1 or allreduce at N = ", smallest2,
          " or ", largest,
          " is missing (runs failed, or no N = 1 run to compare with). ", rule);
    } else {
      const double ps_drop = *ps_lo->efficiency - *ps_hi->efficiency;
      const double r_drop = *r_lo->efficiency - *r_hi->efficiency;
      c.supported = ps_drop >= kFalls && r_drop < kStays;
      c.evidence = absl::StrFormat(
          "median efficiency from N = %d to N = %d: `ps:1` %.2f -> %.2f "
          "(%+.2f), "
          "`allreduce` %.2f -> %.2f (%+.2f). %s",
          smallest2, largest, *ps_lo->efficiency, *ps_hi->efficiency, -ps_drop,
          *r_lo->efficiency, *r_hi->efficiency, -r_drop, rule);
    }
    out.push_back(c);
  }

  // 2. More servers move the saturation point to larger N.
  {
    ScalingClaim c{"servers-move-saturation",
                   "More servers move the parameter server's saturation point "
                   "(the first N where its efficiency falls below 0.8) to "
                   "larger N.",
                   false, ""};
    std::vector<std::pair<int, std::string>> ps;
    for (const std::string& d : DesignsOf(points)) {
      const int k = *ServersOfDesign(d);
      if (k > 0) ps.emplace_back(k, d);
    }
    std::sort(ps.begin(), ps.end());
    const std::string rule = absl::StrFormat(
        "Rule: the saturation point is the smallest N whose median efficiency "
        "is below %.2f (\"beyond\" the grid when none is); supported when it "
        "never moves to a smaller N as K grows, the smallest K saturates "
        "inside the grid, and the largest K saturates later.",
        kSaturatedBelow);
    std::vector<std::string> parts, predicted;
    bool all_known = ps.size() >= 2, monotone = true;
    double prev = 0;
    std::optional<int> first_sat;
    double last_value = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      bool known = false, pknown = false;
      const std::optional<int> sat =
          SaturationPoint(points, ps[i].second, false, &known);
      const std::optional<int> psat =
          SaturationPoint(points, ps[i].second, true, &pknown);
      parts.push_back(
          absl::StrCat("`", ps[i].second, "` ", SatName(sat, known, largest)));
      if (pknown) {
        predicted.push_back(absl::StrCat("`", ps[i].second, "` ",
                                         SatName(psat, pknown, largest)));
      }
      if (!known) {
        all_known = false;
        continue;
      }
      const double value = sat ? *sat : HUGE_VAL;
      if (i == 0) first_sat = sat;
      if (i > 0 && value < prev) monotone = false;
      prev = value;
      last_value = value;
    }
    if (!all_known) {
      c.evidence = absl::StrCat(
          "no data: needs at least two PS designs with known efficiencies "
          "(measured: ",
          absl::StrJoin(parts, ", "), "). ", rule);
    } else {
      c.supported =
          monotone && first_sat.has_value() && last_value > *first_sat;
      c.evidence = absl::StrCat(
          "measured saturation point: ", absl::StrJoin(parts, ", "),
          predicted.empty() ? ""
                            : absl::StrCat("; the analytic model predicts ",
                                           absl::StrJoin(predicted, ", ")),
          ". ", rule);
    }
    out.push_back(c);
  }

  // 3. The bytes on the shaped link explain the time per step.
  {
    ScalingClaim c{"model-explains-time",
                   "The analytic model (bytes on the busiest link at the "
                   "shaped rate, plus compute) predicts the measured time per "
                   "step.",
                   false, ""};
    const std::string rule = absl::StrFormat(
        "Rule: supported when the prediction is within %.0f%% of the "
        "measured median s / step in at least 3 of every 4 cells with N >= 2.",
        100 * kModelTolerance);
    if (!setup.link_bytes_per_s) {
      c.evidence = absl::StrCat(
          "no data: the links were not shaped, so the model has no rate to "
          "predict a time from. ",
          rule);
    } else {
      int cells = 0, within = 0;
      std::vector<std::string> misses;
      for (const ScalingPoint& p : points) {
        if (p.workers < 2 || !p.s_per_step || !p.model.predicted_s_per_step) {
          continue;
        }
        ++cells;
        const double meas = p.s_per_step->median;
        const double pred = *p.model.predicted_s_per_step;
        if (std::fabs(meas - pred) <= kModelTolerance * meas) {
          ++within;
        } else {
          misses.push_back(
              absl::StrFormat("`%s` N = %d: %.3g s measured vs %.3g "
                              "s predicted",
                              p.design, p.workers, meas, pred));
        }
      }
      c.supported = cells > 0 && 4 * within >= 3 * cells;
      c.evidence = absl::StrCat(
          within, " of ", cells, " cells within ",
          absl::StrFormat("%.0f%%", 100 * kModelTolerance),
          misses.empty()
              ? std::string()
              : absl::StrCat(" (outside: ", absl::StrJoin(misses, "; "), ")"),
          ". ", rule);
    }
    out.push_back(c);
  }
  return out;
}

std::string EfficiencyTextPlot(const std::vector<ScalingPoint>& points) {
  const std::vector<int> grid = GridOf(points);
  const std::vector<std::string> designs = DesignsOf(points);
  constexpr int kRows = 10;  // 1.0 down to 0.1
  constexpr int kColWidth = 8;
  std::vector<std::string> rows(kRows,
                                std::string(grid.size() * kColWidth, ' '));
  std::map<std::pair<int, size_t>, std::string> at;
  for (const ScalingPoint& p : points) {
    if (!p.efficiency) continue;
    const size_t col =
        std::find(grid.begin(), grid.end(), p.workers) - grid.begin();
    const int level = std::clamp(
        static_cast<int>(std::lround(*p.efficiency * kRows)), 1, kRows);
    at[{kRows - level, col}] += Letter(p.design, designs);
  }
  for (const auto& [where, letters] : at) {
    const std::string shown = letters.substr(0, kColWidth - 2);
    rows[where.first].replace(where.second * kColWidth + 2, shown.size(),
                              shown);
  }
  std::string out = "scaling efficiency (median)\n";
  for (int r = 0; r < kRows; ++r) {
    absl::StrAppend(&out, absl::StrFormat("%5.1f |", (kRows - r) * 0.1),
                    rows[r], "\n");
  }
  absl::StrAppend(&out, "      +", std::string(grid.size() * kColWidth, '-'),
                  "\n       ");
  for (int n : grid) {
    absl::StrAppend(&out, absl::StrFormat("  %-*d", kColWidth - 2, n));
  }
  absl::StrAppend(&out, " N workers\n");
  std::vector<std::string> keys;
  for (const std::string& d : designs) {
    keys.push_back(absl::StrCat(std::string(1, Letter(d, designs)), " ", d));
  }
  absl::StrAppend(&out, "       ", absl::StrJoin(keys, ", "),
                  " (outside 0.1-1.0 drawn at the edge)\n");
  return out;
}

std::string ScalingPlotData(const std::vector<ScalingPoint>& points) {
  const std::vector<std::string> designs = DesignsOf(points);
  std::string out = absl::StrCat("# N ", absl::StrJoin(designs, " "),
                                 " (median efficiency; ? = none)\n");
  for (int n : GridOf(points)) {
    absl::StrAppend(&out, n);
    for (const std::string& d : designs) {
      const ScalingPoint* p = Find(points, d, n);
      absl::StrAppend(&out, " ",
                      p && p->efficiency
                          ? absl::StrFormat("%.4f", *p->efficiency)
                          : std::string("?"));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string ScalingPlotScript(const std::vector<ScalingPoint>& points) {
  const std::vector<std::string> designs = DesignsOf(points);
  std::vector<std::string> curves;
  for (size_t i = 0; i < designs.size(); ++i) {
    curves.push_back(absl::StrFormat(
        "'efficiency.dat' using 1:%d with linespoints lw 2 title '%s'", i + 2,
        designs[i]));
  }
  const std::string plot = absl::StrCat(
      "set datafile missing '?'\n"
      "set xlabel 'workers N (fixed local batch)'\n"
      "set ylabel 'scaling efficiency (speedup / N)'\n"
      "set yrange [0:1.15]\nset logscale x 2\nset key bottom left\n"
      "set grid\nset title 'Scaling efficiency vs N (median over repeats)'\n"
      "plot ",
      absl::StrJoin(curves, ", \\\n     "),
      ", 1 with lines dt 2 title 'ideal'\n");
  return absl::StrCat(
      "# Drawn by ps_report study-scaling; run `gnuplot plots.gp` here.\n",
      "set terminal pngcairo size 800,500\nset output 'efficiency.png'\n", plot,
      "set terminal svg size 800,500\nset output 'efficiency.svg'\nreplot\n");
}

std::string ScalingMarkdown(const ScalingInputs& in,
                            const std::vector<ScalingPoint>& points,
                            const std::vector<ScalingClaim>& claims,
                            const std::string& plot) {
  const std::vector<int> grid = GridOf(points);
  const int largest = grid.empty() ? 0 : grid.back();
  std::string md =
      "# Scaling study: parameter server (K servers) vs ring "
      "all-reduce\n\n";
  absl::StrAppend(&md, "```\n", in.command, "\n```\n\n", in.setup, "\n\n",
                  "**Transport limits in force:** ", in.links, "\n\n");
  absl::StrAppend(&md, "## Conclusions\n\n",
                  "Each decided by `ps_report study-scaling` "
                  "(tools/report/scaling_study.h) from the medians:\n\n");
  for (const ScalingClaim& c : claims) {
    absl::StrAppend(&md, "- **", c.supported ? "supported" : "not supported",
                    "** — ", c.statement, " ", c.evidence, "\n");
  }
  // The generated summary, quoting the numbers.
  std::vector<std::string> at_largest;
  for (const ScalingPoint& p : points) {
    if (p.workers != largest) continue;
    at_largest.push_back(absl::StrCat(
        "`", p.design, "` ", Eff(p.efficiency),
        p.predicted_efficiency
            ? absl::StrCat(" (model ", Eff(p.predicted_efficiency), ")")
            : "",
        p.s_per_step ? absl::StrFormat(", %.3f s/step", p.s_per_step->median)
                     : ""));
  }
  std::vector<std::string> sats;
  for (const std::string& d : DesignsOf(points)) {
    bool known = false;
    const std::optional<int> sat = SaturationPoint(points, d, false, &known);
    sats.push_back(absl::StrCat("`", d, "` ", SatName(sat, known, largest)));
  }
  absl::StrAppend(
      &md, "\nIn short: at N = ", largest, " the scaling efficiency is ",
      absl::StrJoin(at_largest, "; "), ". First N with efficiency below ",
      absl::StrFormat("%.1f", kSaturatedBelow), ": ", absl::StrJoin(sats, ", "),
      ".\n");

  absl::StrAppend(
      &md, "\n## Measured, beside the analytic model\n\n",
      "s / step: steady state (the first ", in.model.warmup_steps,
      " steps skipped), median and (min–max) over the repeats; samples/s = N "
      "× local batch ",
      in.model.local_batch,
      " / median s / step; speedup = samples/s ÷ the same design's at N = 1; "
      "efficiency = speedup / N. Model: M = ",
      MB(in.model.model_bytes),
      " MB (the model's fp32 bytes); bytes per link per step, each way: ps:K "
      "server link N × M / K, worker link M; ring worker link 2(N − 1)/N × M; "
      "predicted s / step = compute ",
      absl::StrFormat("%.3f", in.model.compute_s),
      " s + 2 × max(N × M / K, M) / R (PS: push then pull) or 2(N − 1)/N × M "
      "/ R (ring: sends and receives overlap)",
      in.model.link_bytes_per_s
          ? absl::StrFormat(", R = %.4g MB/s", *in.model.link_bytes_per_s / 1e6)
          : std::string(" (no time: links not shaped)"),
      "; latency, framing and CPU time are not modelled.\n\n",
      "| design | N | runs ok | s / step | samples/s | speedup | efficiency | "
      "server link MB / step | worker link MB / step | measured MB sent / "
      "worker / step | model s / step | model efficiency "
      "|\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const ScalingPoint& p : points) {
    std::string sps = "—";
    if (p.s_per_step) {
      sps = absl::StrFormat("%.4f", p.s_per_step->median);
      if (p.s_per_step->count > 1) {
        absl::StrAppend(&sps, absl::StrFormat(" (%.4f–%.4f)", p.s_per_step->min,
                                              p.s_per_step->max));
      }
    }
    absl::StrAppend(
        &md, "| `", p.design, "` | ", p.workers, " | ", p.runs_ok, "/", p.runs,
        " | ", sps, " | ",
        p.samples_per_s ? absl::StrFormat("%.0f", *p.samples_per_s) : "—",
        " | ", p.speedup ? absl::StrFormat("%.2f", *p.speedup) : "—", " | ",
        Eff(p.efficiency), " | ",
        p.design == kRingDesign ? "—" : MB(p.model.server_link_bytes), " | ",
        MB(p.model.worker_link_bytes), " | ",
        p.sent_bytes_per_worker_step ? MB(*p.sent_bytes_per_worker_step)
                                     : std::string("—"),
        " | ",
        p.model.predicted_s_per_step
            ? absl::StrFormat("%.4f", *p.model.predicted_s_per_step)
            : "—",
        " | ", Eff(p.predicted_efficiency), " |\n");
  }
  std::vector<std::string> failures;
  for (const ScalingPoint& p : points) {
    if (p.runs_ok < p.runs) {
      failures.push_back(absl::StrCat("`", p.design, "` N = ", p.workers, ": ",
                                      p.runs - p.runs_ok, " failed (",
                                      p.why_failed, ")"));
    }
  }
  if (!failures.empty()) {
    absl::StrAppend(&md, "\nFailed runs (left out of the medians): ",
                    absl::StrJoin(failures, "; "), ".\n");
  }
  absl::StrAppend(&md, "\n## Plot\n\n", plot, "\n\n```\n",
                  EfficiencyTextPlot(points), "```\n");
  return md;
}

nlohmann::json ScalingJson(const ScalingInputs& in,
                           const std::vector<ScalingPoint>& points,
                           const std::vector<ScalingClaim>& claims) {
  auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json();
  };
  nlohmann::json j;
  j["study"] = "scaling";
  j["command"] = in.command;
  j["setup"] = in.setup;
  j["links"] = in.links;
  j["model_bytes"] = in.model.model_bytes;
  j["link_bytes_per_s"] = opt(in.model.link_bytes_per_s);
  j["compute_s"] = in.model.compute_s;
  j["local_batch"] = in.model.local_batch;
  j["warmup_steps"] = in.model.warmup_steps;
  j["steps"] = in.model.steps;
  j["cells"] = nlohmann::json::array();
  for (const ScalingPoint& p : points) {
    nlohmann::json c;
    c["design"] = p.design;
    c["workers"] = p.workers;
    c["runs"] = p.runs;
    c["runs_ok"] = p.runs_ok;
    if (p.s_per_step) {
      c["s_per_step"] = {{"median", p.s_per_step->median},
                         {"min", p.s_per_step->min},
                         {"max", p.s_per_step->max}};
    } else {
      c["s_per_step"] = nullptr;
    }
    c["samples_per_s"] = opt(p.samples_per_s);
    c["sent_bytes_per_worker_step"] = opt(p.sent_bytes_per_worker_step);
    c["speedup"] = opt(p.speedup);
    c["efficiency"] = opt(p.efficiency);
    c["model"] = {{"server_link_bytes", p.model.server_link_bytes},
                  {"worker_link_bytes", p.model.worker_link_bytes},
                  {"predicted_s_per_step", opt(p.model.predicted_s_per_step)},
                  {"predicted_efficiency", opt(p.predicted_efficiency)}};
    if (!p.why_failed.empty()) c["why_failed"] = p.why_failed;
    j["cells"].push_back(c);
  }
  j["claims"] = nlohmann::json::array();
  for (const ScalingClaim& c : claims) {
    j["claims"].push_back(
        {{"id", c.id},
         {"statement", c.statement},
         {"verdict", c.supported ? "supported" : "not supported"},
         {"evidence", c.evidence}});
  }
  return j;
}

}  // namespace pstrain
