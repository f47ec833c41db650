#include "tools/report/straggler_study.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace pstrain {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A figure of the study table.
struct Figure {
  const char* key;
  const char* header;
  double (*get)(const StudyRun&);
  int decimals;
};

const std::vector<Figure>& Figures() {
  static const auto* figures = new std::vector<Figure>{
      {"s_per_step", "s / step (hardware)",
       [](const StudyRun& r) { return r.s_per_step; }, 4},
      {"samples_per_s", "samples/s",
       [](const StudyRun& r) { return r.samples_per_s; }, 0},
      {"steps_to_target", "steps to target (statistical)",
       [](const StudyRun& r) { return r.steps_to_target; }, 0},
      {"time_to_target_s", "time to target (s)",
       [](const StudyRun& r) { return r.time_to_target_s; }, 2},
      {"staleness_max", "staleness max",
       [](const StudyRun& r) { return r.staleness_max.value_or(-1); }, 0},
  };
  return *figures;
}

std::optional<Spread> SpreadOf(const std::vector<StudyRun>& runs,
                               double (*get)(const StudyRun&)) {
  std::vector<double> v;
  for (const StudyRun& r : runs) {
    if (!r.failed) v.push_back(get(r));
  }
  return MedianSpread(v);
}

std::string Value(double v, int decimals) {
  if (std::isinf(v)) return "not reached";
  if (v < 0) return "—";  // no such figure (staleness without a shard)
  return absl::StrFormat("%.*f", decimals, v);
}

std::string SpreadCell(const std::optional<Spread>& s, int decimals) {
  if (!s) return "—";
  const std::string lo = Value(s->min, decimals), hi = Value(s->max, decimals);
  if (s->count == 1 || lo == hi) return Value(s->median, decimals);
  return absl::StrCat(Value(s->median, decimals), " (", lo, "–", hi, ")");
}

const std::vector<StudyRun>* Find(const StudyRuns& runs,
                                  const std::string& scenario,
                                  const std::string& mode) {
  auto s = runs.find(scenario);
  if (s == runs.end()) return nullptr;
  auto m = s->second.find(mode);
  if (m == s->second.end()) return nullptr;
  return &m->second;
}

// The median of one figure of (scenario, mode), or why there is none.
struct Med {
  std::optional<double> value;
  std::string missing;
};
Med MedianOf(const StudyRuns& runs, const std::string& scenario,
             const std::string& mode, double (*get)(const StudyRun&)) {
  const std::vector<StudyRun>* r = Find(runs, scenario, mode);
  if (r == nullptr) return {std::nullopt, absl::StrCat("no `", mode, "` runs")};
  std::optional<Spread> s = SpreadOf(*r, get);
  if (!s) {
    return {std::nullopt, absl::StrCat("every `", mode, "` run failed")};
  }
  return {s->median, ""};
}

double SPerStep(const StudyRun& r) { return r.s_per_step; }
double Steps(const StudyRun& r) { return r.steps_to_target; }
double Time(const StudyRun& r) { return r.time_to_target_s; }

std::string Num(double v, const char* unit) {
  if (std::isinf(v)) return "not reached";
  return absl::StrFormat("%.4g%s", v, unit);
}

std::string Ratio(double a, double b) {
  if (!std::isfinite(a) || !std::isfinite(b) || b <= 0) return "n/a";
  return absl::StrFormat("×%.2f", a / b);
}

// The claim cannot be judged: a figure is missing.
ClaimVerdict Missing(ClaimVerdict c, const std::string& why) {
  c.supported = false;
  c.evidence = absl::StrCat("no data: ", why, " (scenario ", c.scenario, ")");
  return c;
}

}  // namespace

absl::Status AddCompareJson(const std::string& text, const std::string& source,
                            const std::string& scenario, StudyRuns* runs) {
  auto number = [](const nlohmann::json& v) -> std::optional<double> {
    if (!v.is_number()) return std::nullopt;
    return v.get<double>();
  };
  return ForEachCompareRepeat(
      text, source, [&](const std::string& label, const nlohmann::json& r) {
        StudyRun run;
        run.failed = r.value("failed", true);
        if (!run.failed) {
          const bool reached = r.value("target_reached", false);
          std::optional<double> sps =
              number(r.value("s_per_step", nlohmann::json()));
          std::optional<double> rate =
              number(r.value("samples_per_s", nlohmann::json()));
          if (!sps || !rate) {
            return absl::InvalidArgumentError(
                absl::StrCat(source, ": mode ", label,
                             ": a run without s_per_step or samples_per_s"));
          }
          run.s_per_step = *sps;
          run.samples_per_s = *rate;
          run.steps_to_target =
              reached ? number(r["steps_to_target"]).value_or(kInf) : kInf;
          run.time_to_target_s =
              reached ? number(r["time_to_target_s"]).value_or(kInf) : kInf;
          run.staleness_max =
              number(r.value("staleness_max", nlohmann::json()));
          run.model_clock = r.value("model_clock", false);
        }
        (*runs)[scenario][label].push_back(run);
        return absl::OkStatus();
      });
}

std::vector<ClaimVerdict> JudgeClaims(const StudyRuns& runs) {
  std::vector<ClaimVerdict> out;

  // 1. Ho et al. 2013: transient stragglers, SSP (small s) beats BSP.
  {
    ClaimVerdict c{"ho-transient", "Ho et al. 2013",
                   "Under transient stragglers, SSP with a small staleness "
                   "bound (s = 2) reaches the target in less time than BSP.",
                   kTransient};
    Med ssp = MedianOf(runs, kTransient, kStudySsp, Time);
    Med bsp = MedianOf(runs, kTransient, kStudySync, Time);
    Med ssp_s = MedianOf(runs, kTransient, kStudySsp, SPerStep);
    Med bsp_s = MedianOf(runs, kTransient, kStudySync, SPerStep);
    if (!ssp.value || !bsp.value || !ssp_s.value || !bsp_s.value) {
      out.push_back(Missing(c, ssp.value ? bsp.missing : ssp.missing));
    } else {
      c.supported = *ssp.value < *bsp.value;
      c.evidence = absl::StrFormat(
          "median time to target `%s` %s vs `%s` %s (%s); s / step %s vs %s "
          "(%s). Rule: supported when SSP's median time is lower.",
          kStudySsp, Num(*ssp.value, " s"), kStudySync, Num(*bsp.value, " s"),
          Ratio(*ssp.value, *bsp.value), Num(*ssp_s.value, ""),
          Num(*bsp_s.value, ""), Ratio(*ssp_s.value, *bsp_s.value));
      out.push_back(c);
    }
  }
  // 2. Ho et al. 2013: persistent straggler, bounded staleness gains
  // little throughput (the fast workers still wait every s clocks).
  {
    ClaimVerdict c{"ho-persistent-bounded", "Ho et al. 2013",
                   "Under a persistent straggler, bounded staleness (s = 2) "
                   "gains little: its time per step is within 10% of BSP's.",
                   kPersistent};
    Med ssp = MedianOf(runs, kPersistent, kStudySsp, SPerStep);
    Med bsp = MedianOf(runs, kPersistent, kStudySync, SPerStep);
    Med ssp_t = MedianOf(runs, kPersistent, kStudySsp, Time);
    Med bsp_t = MedianOf(runs, kPersistent, kStudySync, Time);
    if (!ssp.value || !bsp.value || !ssp_t.value || !bsp_t.value) {
      out.push_back(Missing(c, ssp.value ? bsp.missing : ssp.missing));
    } else {
      c.supported = *ssp.value >= (1 - kLittle) * *bsp.value;
      c.evidence = absl::StrFormat(
          "median s / step `%s` %s vs `%s` %s (%s); time to target %s vs %s "
          "(%s). Rule: supported when SSP's s / step is at least 0.90 x "
          "BSP's.",
          kStudySsp, Num(*ssp.value, ""), kStudySync, Num(*bsp.value, ""),
          Ratio(*ssp.value, *bsp.value), Num(*ssp_t.value, " s"),
          Num(*bsp_t.value, " s"), Ratio(*ssp_t.value, *bsp_t.value));
      out.push_back(c);
    }
  }
  // 3. Ho et al. 2013: unbounded async gains throughput, pays in staleness.
  {
    ClaimVerdict c{"ho-persistent-unbounded", "Ho et al. 2013",
                   "Under a persistent straggler, unbounded async gains "
                   "throughput (s / step at most 0.90 x BSP's) but pays in "
                   "staleness (more steps to the target than BSP).",
                   kPersistent};
    Med a = MedianOf(runs, kPersistent, kStudyAsync, SPerStep);
    Med b = MedianOf(runs, kPersistent, kStudySync, SPerStep);
    Med an = MedianOf(runs, kPersistent, kStudyAsync, Steps);
    Med bn = MedianOf(runs, kPersistent, kStudySync, Steps);
    if (!a.value || !b.value || !an.value || !bn.value) {
      out.push_back(Missing(c, a.value ? b.missing : a.missing));
    } else {
      const bool faster = *a.value <= (1 - kLittle) * *b.value;
      const bool pays = *an.value > *bn.value;
      c.supported = faster && pays;
      c.evidence = absl::StrFormat(
          "median s / step `%s` %s vs `%s` %s (%s: %s); steps to target %s "
          "vs %s (%s). Rule: supported when both hold.",
          kStudyAsync, Num(*a.value, ""), kStudySync, Num(*b.value, ""),
          Ratio(*a.value, *b.value),
          faster ? "throughput gained" : "no throughput gain",
          Num(*an.value, ""), Num(*bn.value, ""),
          pays ? "more steps: paid in staleness" : "no more steps: no price");
      out.push_back(c);
    }
  }
  // 4. Chen et al. 2016: backup workers are the robust choice for the
  // persistent straggler.
  {
    ClaimVerdict c{"chen-backup", "Chen et al. 2016",
                   "Under a persistent straggler, sync with backup workers "
                   "(b = 1) beats plain sync in time to target and is within "
                   "10% of the best mode.",
                   kPersistent};
    Med bk = MedianOf(runs, kPersistent, kStudyBackup, Time);
    Med bsp = MedianOf(runs, kPersistent, kStudySync, Time);
    if (!bk.value || !bsp.value) {
      out.push_back(Missing(c, bk.value ? bsp.missing : bk.missing));
    } else {
      double best = kInf;
      std::string best_mode = "none";
      std::vector<std::string> all;
      auto it = runs.find(kPersistent);
      for (const auto& [mode, mode_runs] : it->second) {
        std::optional<Spread> s = SpreadOf(mode_runs, Time);
        if (!s) continue;
        all.push_back(absl::StrCat("`", mode, "` ", Num(s->median, " s")));
        if (s->median < best) {
          best = s->median;
          best_mode = mode;
        }
      }
      const bool beats = *bk.value < *bsp.value;
      const bool near_best =
          std::isfinite(*bk.value) && *bk.value <= (1 + kLittle) * best;
      c.supported = beats && near_best;
      c.evidence = absl::StrFormat(
          "median time to target `%s` %s vs `%s` %s (%s); the best is `%s` "
          "(all: %s). Rule: supported when backup beats sync and is within "
          "1.10 x the best.",
          kStudyBackup, Num(*bk.value, " s"), kStudySync, Num(*bsp.value, " s"),
          Ratio(*bk.value, *bsp.value), best_mode, absl::StrJoin(all, ", "));
      out.push_back(c);
    }
  }
  // 5. Issue 28: the old README result (async:2 beats sync under a
  // persistent straggler) is statistical efficiency from more, smaller
  // updates, not straggler tolerance.
  {
    ClaimVerdict c{"update-count", "pstrain issue 28",
                   "Under a persistent straggler, `async:2` at the full "
                   "learning rate per push beats sync by statistical "
                   "efficiency (fewer steps: N updates per step) while its "
                   "time per step is within 10% of sync's.",
                   kPersistent};
    Med fs = MedianOf(runs, kPersistent, kStudySspFullLr, SPerStep);
    Med bs = MedianOf(runs, kPersistent, kStudySync, SPerStep);
    Med fn = MedianOf(runs, kPersistent, kStudySspFullLr, Steps);
    Med bn = MedianOf(runs, kPersistent, kStudySync, Steps);
    Med sn = MedianOf(runs, kPersistent, kStudySsp, Steps);
    if (!fs.value || !bs.value || !fn.value || !bn.value) {
      out.push_back(Missing(c, fs.value ? bs.missing : fs.missing));
    } else {
      const bool same_speed = std::abs(*fs.value / *bs.value - 1) <= kLittle;
      const bool fewer = *fn.value < *bn.value;
      c.supported = same_speed && fewer;
      c.evidence = absl::StrFormat(
          "median s / step `%s` %s vs `%s` %s (%s); steps to target %s vs "
          "%s (%s)%s. Rule: supported when s / step is within 10%% and the "
          "steps are fewer.",
          kStudySspFullLr, Num(*fs.value, ""), kStudySync, Num(*bs.value, ""),
          Ratio(*fs.value, *bs.value), Num(*fn.value, ""), Num(*bn.value, ""),
          Ratio(*fn.value, *bn.value),
          sn.value ? absl::StrCat("; at lr / N (`", kStudySsp, "`) ",
                                  Num(*sn.value, ""), " steps")
                   : "");
      out.push_back(c);
    }
  }
  return out;
}

std::vector<StudyPlot> StragglerPlots(const StudyRuns& runs) {
  const std::vector<std::string> modes = absl::StrSplit(kStudyModes, ',');
  std::vector<StudyPlot> plots(2);
  plots[0] = {"stragglers_s_per_step",
              "time per step (hardware efficiency)",
              "mode",
              "median s / step",
              false,
              false,
              modes,
              {}};
  plots[1] = {"stragglers_time_to_target",
              "time to target",
              "mode",
              "median time to target (s)",
              false,
              false,
              modes,
              {}};
  double (*figs[])(const StudyRun&) = {SPerStep, Time};
  for (int i = 0; i < 2; ++i) {
    plots[i].points_only = true;
    for (const char* scenario : {kPersistent, kTransient, kPause}) {
      if (!runs.count(scenario)) continue;
      PlotSeries series{scenario, {}};
      for (size_t m = 0; m < modes.size(); ++m) {
        const std::vector<StudyRun>* r = Find(runs, scenario, modes[m]);
        if (r == nullptr) continue;
        std::vector<double> v;
        for (const StudyRun& run : *r) {
          if (!run.failed && std::isfinite(figs[i](run))) {
            v.push_back(figs[i](run));
          }
        }
        std::optional<Spread> sp = MedianSpread(v);
        if (sp) {
          series.points.push_back(
              {static_cast<double>(m), sp->median, sp->min, sp->max});
        }
      }
      plots[i].series.push_back(series);
    }
  }
  return plots;
}

std::string StudyMarkdown(const StudyInputs& in,
                          const std::vector<ClaimVerdict>& claims) {
  std::string md = "# Study: stragglers\n\n";
  absl::StrAppend(
      &md, in.setup, "\n\nRegenerate with:\n\n```sh\n", in.command,
      "\n```\n\n## Conclusions (derived from the numbers below)\n\n");
  for (const ClaimVerdict& c : claims) {
    absl::StrAppend(&md, "- **", c.supported ? "supported" : "not supported",
                    "** — ", c.source, ": ", c.statement, " (scenario ",
                    c.scenario, ") ", c.evidence, "\n");
  }
  if (in.plots) {
    absl::StrAppend(&md, "\n## Plots\n\n", StudyPlotMarkdown(*in.plots));
  }
  md += R"(
## Reading the tables

Each cell is the median over the repeats (different data seeds, so
different data order and different transient draws) and (min–max) their
spread. **Hardware efficiency** is s / step and samples/s (how fast steps
run); **statistical efficiency** is steps to target (how many steps the
mode needs); time to target is about their product. A step is one clock:
every worker computes one slice of the global batch. `async:S:scaled` runs
at sync's learning rate per sample (lr / N per push,
`training.async_lr_per_push: scaled`); `async:2` at the full lr per push (N
updates per step); `backup:1` is sync that applies each step with the first
N - 1 gradients.
)";
  // Whether every successful async run was on the model clock.
  bool async_runs = false, all_model_clock = true;
  for (const auto& [scenario, modes] : in.runs) {
    for (const auto& [mode, runs] : modes) {
      if (mode.rfind("async", 0) != 0) continue;
      for (const StudyRun& r : runs) {
        if (r.failed) continue;
        async_runs = true;
        all_model_clock = all_model_clock && r.model_clock;
      }
    }
  }
  if (!async_runs || all_model_clock) {
    md += R"(
**Measurement note.** Every row follows the model
(coordinator/step_log.h): a `metrics.csv` row, and so steps and time to
target and the wall time behind s / step, is one model step. In sync it
completes when every worker pushed the step, in `backup:1` with the N - 1
pushes the servers apply it with (its evaluation covers the test slices of
the workers that reported it), and in async on the model clock
(`training.clock: model`) with any N pushes: a fast worker's extra pushes
count, each worker trains until the servers took N x steps pushes, and
evaluations are of the whole test set at the weights the evaluating worker
pulled.
)";
  } else {
    md += R"(
**Measurement note.** Some async runs here were on the worker clock
(`training.clock: worker`): their rows complete when every worker reported
a step, and every worker trains the same number of steps, so under a
persistent straggler their rows, steps and time to target follow the
slowest worker and the job ends when the straggler does. Async's hardware
gains are understated in those runs; `training.clock: model` measures them
(docs/studies.md, "Model clock").
)";
  }
  // persistent, transient, pause, then any other, each once.
  std::vector<std::string> order;
  for (const char* s : {kPersistent, kTransient, kPause}) {
    if (in.runs.count(s)) order.push_back(s);
  }
  for (const auto& [scenario, unused] : in.runs) {
    if (std::find(order.begin(), order.end(), scenario) == order.end()) {
      order.push_back(scenario);
    }
  }
  for (const std::string& scenario : order) {
    const auto& modes = in.runs.at(scenario);
    absl::StrAppend(&md, "\n## Scenario: ", scenario, "\n\n| mode | runs ok |");
    for (const Figure& f : Figures()) absl::StrAppend(&md, " ", f.header, " |");
    md += "\n|---|---|";
    for (size_t i = 0; i < Figures().size(); ++i) md += "--:|";
    md += "\n";
    for (const auto& [mode, runs] : modes) {
      int ok = 0;
      for (const StudyRun& r : runs) ok += !r.failed;
      absl::StrAppend(&md, "| `", mode, "` | ", ok, "/", runs.size(), " |");
      for (const Figure& f : Figures()) {
        absl::StrAppend(&md, " ", SpreadCell(SpreadOf(runs, f.get), f.decimals),
                        " |");
      }
      md += "\n";
    }
  }
  return md;
}

nlohmann::json StudyJson(const StudyInputs& in,
                         const std::vector<ClaimVerdict>& claims) {
  nlohmann::json j;
  j["study"] = "stragglers";
  j["command"] = in.command;
  j["setup"] = in.setup;
  nlohmann::json cj = nlohmann::json::array();
  for (const ClaimVerdict& c : claims) {
    cj.push_back({{"id", c.id},
                  {"source", c.source},
                  {"statement", c.statement},
                  {"scenario", c.scenario},
                  {"verdict", c.supported ? "supported" : "not supported"},
                  {"evidence", c.evidence}});
  }
  j["claims"] = cj;
  nlohmann::json sj = nlohmann::json::object();
  for (const auto& [scenario, modes] : in.runs) {
    for (const auto& [mode, runs] : modes) {
      nlohmann::json m;
      int ok = 0;
      for (const StudyRun& r : runs) ok += !r.failed;
      m["runs"] = runs.size();
      m["runs_ok"] = ok;
      for (const Figure& f : Figures()) {
        std::optional<Spread> s = SpreadOf(runs, f.get);
        auto num = [](double v) -> nlohmann::json {
          if (!std::isfinite(v)) return nullptr;
          return v;
        };
        m[f.key] = s ? nlohmann::json{{"median", num(s->median)},
                                      {"min", num(s->min)},
                                      {"max", num(s->max)},
                                      {"n", s->count}}
                     : nlohmann::json(nullptr);
      }
      sj[scenario][mode] = m;
    }
  }
  j["scenarios"] = sj;
  return j;
}

}  // namespace pstrain
