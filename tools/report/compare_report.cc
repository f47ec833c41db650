#include "tools/report/compare_report.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pstrain {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr char kNone[] = "—";

enum class Fmt {
  kSeconds,
  kCount,
  kLoss,
  kAccuracy,
  kRate,
  kBytes,
  kShare,
  kMillis,
  kMillisAsSeconds  // seconds, shown with 4 decimals
};

// One figure of a run: a table column and a compare.json key.
struct Column {
  const char* key;
  const char* header;
  Fmt fmt;
  // nullopt: does not apply to this run (or there is no target); +inf: the
  // target was not reached.
  std::function<std::optional<double>(const RunMetrics&, const Target&)> get;
};

std::optional<double> Opt(const std::optional<int64_t>& v) {
  if (!v) return std::nullopt;
  return static_cast<double>(*v);
}

const std::vector<Column>& Columns() {
  static const auto* columns = new std::vector<Column>{
      {"time_to_target_s", "time to target (s)", Fmt::kSeconds,
       [](const RunMetrics& m, const Target& t) -> std::optional<double> {
         if (t.kind == Target::kNone) return std::nullopt;
         return m.target_hit ? m.target_hit->wall_s : kInf;
       }},
      {"steps_to_target", "steps to target", Fmt::kCount,
       [](const RunMetrics& m, const Target& t) -> std::optional<double> {
         if (t.kind == Target::kNone) return std::nullopt;
         return m.target_hit ? static_cast<double>(m.target_hit->step) : kInf;
       }},
      {"final_loss", "final loss", Fmt::kLoss,
       [](const RunMetrics& m, const Target&) -> std::optional<double> {
         return m.summary.final_loss;
       }},
      {"final_eval_loss", nullptr, Fmt::kLoss,
       [](const RunMetrics& m, const Target&) -> std::optional<double> {
         return m.summary.final_eval_loss;
       }},
      {"final_accuracy", "final accuracy", Fmt::kAccuracy,
       [](const RunMetrics& m, const Target&) {
         return m.summary.final_accuracy;
       }},
      {"samples_per_s", "samples/s", Fmt::kRate,
       [](const RunMetrics& m, const Target&) -> std::optional<double> {
         return m.summary.samples_per_s;
       }},
      {"bytes_sent_per_worker_step", "sent / worker / step", Fmt::kBytes,
       [](const RunMetrics& m, const Target&) -> std::optional<double> {
         return m.bytes_sent_per_worker_step;
       }},
      {"bytes_received_per_worker_step", "received / worker / step",
       Fmt::kBytes,
       [](const RunMetrics& m, const Target&) -> std::optional<double> {
         return m.bytes_received_per_worker_step;
       }},
      {"staleness_p50", "staleness p50", Fmt::kCount,
       [](const RunMetrics& m, const Target&) { return Opt(m.staleness_p50); }},
      {"staleness_p99", "staleness p99", Fmt::kCount,
       [](const RunMetrics& m, const Target&) { return Opt(m.staleness_p99); }},
      {"staleness_max", "staleness max", Fmt::kCount,
       [](const RunMetrics& m, const Target&) { return Opt(m.staleness_max); }},
      {"barrier_wait_share", "barrier wait share", Fmt::kShare,
       [](const RunMetrics& m, const Target&) { return m.barrier_wait_share; }},
      {"comm_s_per_step", "comm ms / step", Fmt::kMillis,
       [](const RunMetrics& m, const Target&) { return m.comm_s_per_step; }},
      {"wire_share", "share of wire", Fmt::kShare,
       [](const RunMetrics& m, const Target&) { return m.wire_share; }},
      {"wall_s", "wall (s)", Fmt::kSeconds,
       [](const RunMetrics& m, const Target&) -> std::optional<double> {
         return m.summary.wall_s;
       }},
  };
  return *columns;
}

std::optional<double> StepsToTarget(const RunMetrics& m, const Target& t) {
  if (t.kind == Target::kNone) return std::nullopt;
  return m.target_hit ? static_cast<double>(m.target_hit->step) : kInf;
}

std::optional<double> RunSecondsPerStep(const RunMetrics& m) {
  return SecondsPerStep(m.summary.wall_s, m.summary.steps);
}

// The two efficiencies (Hadjis et al. 2016, "Omnivore"), always apart:
// hardware (time per step and per sample) and statistical (steps and
// samples to target), and their product, time to target.
const std::vector<Column>& EfficiencyColumns() {
  static const auto* columns = new std::vector<Column>{
      {"s_per_step", "s / step", Fmt::kMillisAsSeconds,
       [](const RunMetrics& m, const Target&) { return RunSecondsPerStep(m); }},
      {"steady_s_per_step", "steady s / step", Fmt::kMillisAsSeconds,
       [](const RunMetrics& m, const Target&) { return m.steady_s_per_step; }},
      {"ms_per_sample", "ms / sample", Fmt::kMillis,
       [](const RunMetrics& m, const Target&) -> std::optional<double> {
         std::optional<double> s = RunSecondsPerStep(m);
         if (!s || m.summary.global_batch <= 0) return std::nullopt;
         return *s / static_cast<double>(m.summary.global_batch);
       }},
      {"steps_to_target", "steps to target", Fmt::kCount, StepsToTarget},
      {"samples_to_target", "samples to target", Fmt::kCount,
       [](const RunMetrics& m, const Target& t) -> std::optional<double> {
         std::optional<double> steps = StepsToTarget(m, t);
         if (!steps) return std::nullopt;
         return *steps * static_cast<double>(m.summary.global_batch);
       }},
      {"time_to_target_product_s", "s / step × steps to target", Fmt::kSeconds,
       [](const RunMetrics& m, const Target& t) -> std::optional<double> {
         std::optional<double> steps = StepsToTarget(m, t);
         std::optional<double> s = RunSecondsPerStep(m);
         if (!steps || !s) return std::nullopt;
         return std::isinf(*steps) ? kInf : *steps * *s;
       }},
      {"time_to_target_s", "measured time to target (s)", Fmt::kSeconds,
       [](const RunMetrics& m, const Target& t) -> std::optional<double> {
         if (t.kind == Target::kNone) return std::nullopt;
         return m.target_hit ? m.target_hit->wall_s : kInf;
       }},
      {"updates_per_step", "updates / step", Fmt::kCount,
       [](const RunMetrics& m, const Target&) -> std::optional<double> {
         return static_cast<double>(
             UpdatesPerStep(m.summary.mode, m.summary.workers));
       }},
  };
  return *columns;
}

// The learning rate of one update, as the run was configured.
std::string LrPerUpdate(const ModeRuns& mode) {
  for (const RunMetrics& r : mode.runs) {
    if (r.failed) continue;
    if (r.summary.mode != "async") return "lr (mean of N × B)";
    return absl::StrCat(r.lr_scaled ? "lr / N (scaled)" : "lr (full)",
                        r.model_clock ? ", model clock" : "");
  }
  return kNone;
}

std::string Format(double v, Fmt fmt) {
  if (std::isinf(v)) return "not reached";
  switch (fmt) {
    case Fmt::kSeconds:
      return absl::StrFormat("%.2f", v);
    case Fmt::kCount:
      return absl::StrFormat("%g", v);
    case Fmt::kLoss:
      return absl::StrFormat("%.4f", v);
    case Fmt::kAccuracy:
      return absl::StrFormat("%.4f", v);
    case Fmt::kRate:
      return absl::StrFormat("%.0f", v);
    case Fmt::kBytes:
      if (v >= 1e6) return absl::StrFormat("%.2f MB", v / 1e6);
      if (v >= 1e3) return absl::StrFormat("%.1f kB", v / 1e3);
      return absl::StrFormat("%.0f B", v);
    case Fmt::kShare:
      return absl::StrFormat("%.1f%%", 100 * v);
    case Fmt::kMillis:
      return absl::StrFormat("%.3f", 1e3 * v);
    case Fmt::kMillisAsSeconds:
      return absl::StrFormat("%.4f", v);
  }
  return "";
}

std::vector<double> Values(const ModeRuns& mode, const Column& c,
                           const Target& t) {
  std::vector<double> values;
  for (const RunMetrics& r : mode.runs) {
    if (r.failed) continue;
    if (std::optional<double> v = c.get(r, t)) values.push_back(*v);
  }
  return values;
}

std::string Cell(const ModeRuns& mode, const Column& c, const Target& t) {
  std::optional<Spread> s = MedianSpread(Values(mode, c, t));
  if (!s) return kNone;
  const std::string lo = Format(s->min, c.fmt), hi = Format(s->max, c.fmt);
  if (s->count == 1 || lo == hi) return Format(s->median, c.fmt);
  return absl::StrCat(Format(s->median, c.fmt), " (", lo, "–", hi, ")");
}

int Succeeded(const ModeRuns& mode) {
  int n = 0;
  for (const RunMetrics& r : mode.runs) n += !r.failed;
  return n;
}

nlohmann::json Number(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

// The first run that succeeded, else the first run; null when none ran.
const RunMetrics* Representative(const CompareInputs& in) {
  const RunMetrics* any = nullptr;
  for (const ModeRuns& m : in.modes) {
    for (const RunMetrics& r : m.runs) {
      if (!r.failed) return &r;
      if (any == nullptr) any = &r;
    }
  }
  return any;
}

std::string Relative(const CompareInputs& in, const std::string& path) {
  const std::string prefix = in.out_dir + "/";
  if (absl::StartsWith(path, prefix)) return path.substr(prefix.size());
  return path;
}

std::string TargetLine(const Target& t) {
  switch (t.kind) {
    case Target::kAccuracy:
      return absl::StrFormat("eval accuracy ≥ %g", t.value);
    case Target::kLoss:
      return absl::StrFormat("eval loss ≤ %g", t.value);
    case Target::kNone:
      break;
  }
  return "none (pass --target-accuracy A or --target-loss L)";
}

std::string EmulationLine(const CompareInputs& in) {
  const RunMetrics* r = Representative(in);
  const bool known = r != nullptr && r->config_loaded;
  std::string compute = "real compute (worker.compute_ms 0)";
  if (known && r->compute_ms > 0) {
    compute = absl::StrFormat(
        "emulated compute of %g ms per step (worker.compute_ms)",
        r->compute_ms);
  }
  std::string straggler = "no straggler";
  if (known && r->straggler_rank >= 0) {
    straggler = absl::StrFormat(
        "straggler: rank %d computes %g× as long (worker.straggler_rank, "
        "straggler_factor)",
        r->straggler_rank, r->straggler_factor);
  }
  if (known && r->transient_p > 0) {
    absl::StrAppendFormat(
        &straggler,
        "; transient stragglers: each step each worker slowed with "
        "probability %g by a Pareto(shape 2) factor >= %g (worker."
        "transient_straggler_p, transient_straggler_factor)",
        r->transient_p, r->transient_factor);
  }
  if (known && r->pause_rank >= 0) {
    absl::StrAppendFormat(&straggler,
                          "; pause: rank %d pauses %g s once at step %d "
                          "(worker.pause_rank, pause_at_step, pause_s)",
                          r->pause_rank, r->pause_s, r->pause_at_step);
  }
  return absl::StrCat(compute, "; ", straggler, "; links: ",
                      in.shaping.empty() ? "loopback, not shaped" : in.shaping);
}

// Every figure once (steps and time to target are in both tables).
const std::vector<Column>& AllColumns() {
  static const auto* all = [] {
    auto* v = new std::vector<Column>(Columns());
    for (const Column& c : EfficiencyColumns()) {
      bool seen = false;
      for (const Column& d : *v) seen |= std::string(d.key) == c.key;
      if (!seen) v->push_back(c);
    }
    return v;
  }();
  return *all;
}

std::optional<double> Median(const ModeRuns& m, const Column& c,
                             const Target& t) {
  std::optional<Spread> s = MedianSpread(Values(m, c, t));
  if (!s) return std::nullopt;
  return s->median;
}

const Column& EfficiencyColumn(const char* key) {
  for (const Column& c : EfficiencyColumns()) {
    if (std::string(c.key) == key) return c;
  }
  std::abort();  // a key of this file
}

}  // namespace

std::string EfficiencyTable(const CompareInputs& in) {
  std::vector<std::string> header = {"mode"};
  for (const Column& c : EfficiencyColumns()) header.push_back(c.header);
  header.push_back("lr per update");
  std::string out = absl::StrCat("| ", absl::StrJoin(header, " | "), " |\n|");
  for (size_t i = 0; i < header.size(); ++i) {
    out += i == 0 || i + 1 == header.size() ? "---|" : "--:|";
  }
  out += "\n";
  for (const ModeRuns& m : in.modes) {
    std::vector<std::string> cells = {absl::StrCat("`", m.label, "`")};
    for (const Column& c : EfficiencyColumns()) {
      cells.push_back(Cell(m, c, in.target));
    }
    cells.push_back(LrPerUpdate(m));
    out += absl::StrCat("| ", absl::StrJoin(cells, " | "), " |\n");
  }
  return out;
}

std::string EfficiencyExplanation(const CompareInputs& in) {
  if (in.target.kind == Target::kNone) {
    return "No target: statistical efficiency (steps to target) needs "
           "--target-accuracy or --target-loss.\n";
  }
  const ModeRuns* ref = nullptr;
  for (const ModeRuns& m : in.modes) {
    if (m.label == "sync" && Succeeded(m) > 0) ref = &m;
  }
  if (ref == nullptr) {
    return "No successful `sync` row to compare the other modes with.\n";
  }
  const Column& sps = EfficiencyColumn("s_per_step");
  const Column& steps = EfficiencyColumn("steps_to_target");
  const std::optional<double> ref_s = Median(*ref, sps, in.target);
  const std::optional<double> ref_n = Median(*ref, steps, in.target);
  std::string out;
  for (const ModeRuns& m : in.modes) {
    if (&m == ref) continue;
    const std::optional<double> s = Median(m, sps, in.target);
    const std::optional<double> n = Median(m, steps, in.target);
    if (!s || !n || !ref_s || !ref_n) {
      out += absl::StrCat("- `", m.label, "`: no successful run to compare.\n");
      continue;
    }
    std::optional<EfficiencyRatio> r =
        CompareEfficiency(*s, *n, *ref_s, *ref_n);
    if (!r) {
      out += absl::StrFormat(
          "- `%s`: %.4f s / step (sync %.4f: ×%.2f); steps to target %s "
          "(sync %s): no time ratio without both reaching the target.\n",
          m.label, *s, *ref_s, *s / *ref_s, Format(*n, Fmt::kCount),
          Format(*ref_n, Fmt::kCount));
      continue;
    }
    const char* why = r->time >= 1 ? "loses to"
                      : (r->statistical < 1 && r->hardware < 1)
                          ? "beats sync on both efficiencies:"
                      : r->statistical < 1
                          ? "beats sync by statistical efficiency (fewer "
                            "steps), not hardware efficiency:"
                          : "beats sync by hardware efficiency (faster "
                            "steps), not statistical efficiency:";
    out += absl::StrFormat(
        "- `%s` %s time to target ×%.2f = hardware ×%.2f (%.4f vs %.4f s / "
        "step) × statistical ×%.2f (%s vs %s steps to target).\n",
        m.label, r->time >= 1 ? "loses to sync:" : why, r->time, r->hardware,
        *s, *ref_s, r->statistical, Format(*n, Fmt::kCount),
        Format(*ref_n, Fmt::kCount));
  }
  return out;
}

std::string ReportTable(const CompareInputs& in) {
  std::vector<std::string> header = {"mode", "runs ok"};
  for (const Column& c : Columns()) {
    if (c.header != nullptr) header.push_back(c.header);
  }
  std::string out = absl::StrCat("| ", absl::StrJoin(header, " | "), " |\n|");
  for (size_t i = 0; i < header.size(); ++i) out += i < 2 ? "---|" : "--:|";
  out += "\n";
  for (const ModeRuns& m : in.modes) {
    const int ok = Succeeded(m);
    std::vector<std::string> cells = {
        absl::StrCat("`", m.label, "`"),
        absl::StrCat(ok, "/", m.runs.size(), ok == 0 ? " FAILED" : "")};
    for (const Column& c : Columns()) {
      if (c.header != nullptr) cells.push_back(Cell(m, c, in.target));
    }
    out += absl::StrCat("| ", absl::StrJoin(cells, " | "), " |\n");
  }
  return out;
}

std::string ReportMarkdown(const CompareInputs& in, const PlotOutcome& plots) {
  std::vector<std::string> labels;
  size_t repeats = 0;
  for (const ModeRuns& m : in.modes) {
    labels.push_back(m.label);
    repeats = std::max(repeats, m.runs.size());
  }
  std::string md =
      absl::StrCat("# Compare: ", absl::StrJoin(labels, " vs "), "\n\n");
  const RunMetrics* r = Representative(in);
  std::string job = absl::StrCat("- Job: `", in.base_config, "`");
  if (r != nullptr && !r->failed) {
    absl::StrAppendFormat(&job,
                          ": %d workers, %d servers, %d steps, global batch %d",
                          r->summary.workers, r->summary.servers,
                          r->summary.steps, r->summary.global_batch);
  } else if (r != nullptr && r->config_loaded) {
    absl::StrAppendFormat(&job, ": %d workers, %d servers, %d steps",
                          r->config_workers, r->config_servers,
                          r->config_steps);
  }
  if (r != nullptr && r->config_loaded) {
    absl::StrAppendFormat(&job, "; evaluation every %d steps", r->eval_every);
  }
  absl::StrAppendFormat(&job,
                        "; %d run%s per mode, one after another, same data, "
                        "seeds and model.\n",
                        repeats, repeats == 1 ? "" : "s");
  md += job;
  md += absl::StrCat("- Target: ", TargetLine(in.target), ".\n");
  md += absl::StrCat("- Emulation: ", EmulationLine(in), ".\n");
  md += absl::StrCat(
      "- Wire: ",
      in.wire_bytes_per_s > 0
          ? absl::StrFormat("%.2f GB/s, %s", in.wire_bytes_per_s / 1e9, in.wire)
          : absl::StrCat(
                "not measured",
                in.wire.empty() ? "" : absl::StrCat(" (", in.wire, ")")),
      ".\n\n");
  md += ReportTable(in);
  if (repeats > 1) {
    md +=
        "\nWith repeats a cell is the median over the runs that succeeded, "
        "and (min–max) their spread.\n";
  }
  md += R"(
## Two efficiencies

**Hardware efficiency** is how fast a mode runs steps (wall s / step, ms /
sample); **statistical efficiency** is how many steps (samples) it needs to
reach the target. Time to target is their product, so a mode wins by one, the
other or both. A step is one clock: every worker computes one slice of the
global batch; async applies each worker's push as its own update (`updates /
step`), at the learning rate in `lr per update`; on the model clock
(`training.clock: model`, marked there) an async step is any N pushes, so a
fast worker's extra pushes count and a straggler does not hold the rows
back. `s / step` is wall time /
steps, what multiplies to the time to target; `steady s / step` is the
median step after the warm-up (Definitions): the speed of a typical step,
without evaluations, start-up or occasional slow steps.

)";
  md += EfficiencyTable(in);
  md += "\nAgainst `sync` (medians):\n\n";
  md += EfficiencyExplanation(in);
  md += R"(
## Definitions

- **time / steps to target**: wall time since training started (all workers
  registered) and step of the first `metrics.csv` row whose evaluation meets
  the target; the step is the number of updates behind the evaluated
  weights. Resolution: `evaluation.every_steps`. "not reached": never within
  the run (it sorts last in medians).
- **s / step**: `wall_s` / steps (`summary.json`): every step, evaluations
  and slow steps included. **steady s / step**: the median of the steps'
  own durations (`metrics.csv` wall time, step s minus step s − 1) after a
  warm-up of a fifth of the steps, at most 5: the steady state, as the
  scaling and sparse studies use it.
- **final loss / accuracy**: training loss of the last step; test accuracy
  of the final weights (`summary.json`).
- **samples/s**: training examples of all workers per second of wall time.
- **sent / received per worker per step**: `bytes_pushed` (`bytes_pulled`),
  summed over workers, / (workers × steps).
- **staleness p50 / p99 / max**: nearest-rank percentiles of the pushes'
  staleness histogram (clocks; all shards); max is exact. "—" where there
  is no shard (all-reduce).
- **barrier wait share**: `barrier_wait_s` / (servers × workers × wall s):
  the mean share of a worker's time blocked in a pull waiting for the
  consistency barrier. Each shard sums the waits of all pulls and a worker
  waits on every shard at once, hence the division by servers.
- **comm ms / step**: mean over training steps of `pull_s + push_s` (each a
  mean over workers) from `metrics.csv`; includes time blocked on barriers.
- **share of wire**: (sent + received per worker per step) / (comm ms per
  step), the bytes per second a worker moved while communicating, over the
  wire's rate (the "Wire" line above; "—" when not measured). Near 100%:
  the design ran at the link's limit; barrier waits count as communication
  time, so waiting designs score lower.
)";
  bool any_failed = false;
  for (const ModeRuns& m : in.modes) {
    for (const RunMetrics& run : m.runs) {
      if (!run.failed) continue;
      if (!any_failed) md += "\n## Failed runs\n\n";
      any_failed = true;
      md +=
          absl::StrCat("- `", m.label, "` ([", Relative(in, run.dir), "](",
                       Relative(in, run.dir),
                       "), see `psctl.log` and `logs/`): ", run.message, "\n");
    }
  }
  md += "\n## Plots\n\n";
  if (!plots.made) {
    md += absl::StrCat("Skipped: ", plots.skipped, "\n");
  } else {
    for (const auto& [title, path] : plots.plots) {
      md += absl::StrCat("### ", title, "\n\n![", title, "](", path,
                         ".png) ([SVG](", path, ".svg))\n\n");
    }
  }
  md += "\n## Runs\n\n";
  for (const ModeRuns& m : in.modes) {
    for (const RunMetrics& run : m.runs) {
      const std::string rel = Relative(in, run.dir);
      md += absl::StrCat("- `", m.label, "`: [", rel, "](", rel, ")",
                         run.failed ? " (failed)" : "", "\n");
    }
  }
  return md;
}

nlohmann::json CompareJson(const CompareInputs& in, const PlotOutcome& plots) {
  nlohmann::json j;
  j["base_config"] = in.base_config;
  if (in.target.kind == Target::kNone) {
    j["target"] = nullptr;
  } else {
    j["target"] = {
        {"metric",
         in.target.kind == Target::kAccuracy ? "eval_accuracy" : "eval_loss"},
        {"op", in.target.kind == Target::kAccuracy ? ">=" : "<="},
        {"value", in.target.value}};
  }
  const RunMetrics* rep = Representative(in);
  nlohmann::json emulation = {{"shaping", in.shaping}};
  if (in.wire_bytes_per_s > 0) {
    j["wire"] = {{"bytes_per_s", in.wire_bytes_per_s}, {"source", in.wire}};
  } else {
    j["wire"] = {{"bytes_per_s", nullptr}, {"source", in.wire}};
  }
  if (rep != nullptr && rep->config_loaded) {
    emulation["compute_ms"] = rep->compute_ms;
    emulation["straggler_rank"] = rep->straggler_rank;
    emulation["straggler_factor"] = rep->straggler_factor;
    emulation["transient_straggler_p"] = rep->transient_p;
    emulation["transient_straggler_factor"] = rep->transient_factor;
    emulation["pause_rank"] = rep->pause_rank;
    emulation["pause_at_step"] = rep->pause_at_step;
    emulation["pause_s"] = rep->pause_s;
    j["eval_every"] = rep->eval_every;
  }
  j["emulation"] = emulation;
  j["plots"] = {{"made", plots.made}, {"skipped", plots.skipped}};
  nlohmann::json files = nlohmann::json::array();
  for (const auto& p : plots.plots) {
    files.push_back({{"title", p.first},
                     {"png", p.second + ".png"},
                     {"svg", p.second + ".svg"}});
  }
  j["plots"]["files"] = files;
  nlohmann::json modes = nlohmann::json::array();
  for (const ModeRuns& m : in.modes) {
    nlohmann::json mode;
    mode["mode"] = m.label;
    mode["runs"] = m.runs.size();
    mode["runs_ok"] = Succeeded(m);
    mode["failed"] = Succeeded(m) == 0;
    int reached = 0;
    for (const RunMetrics& r : m.runs)
      reached += !r.failed && r.target_hit.has_value();
    mode["target_reached"] = reached;
    mode["lr_per_update"] = LrPerUpdate(m);
    for (const Column& c : AllColumns()) {
      std::optional<Spread> s = MedianSpread(Values(m, c, in.target));
      if (!s) {
        mode[c.key] = nullptr;
      } else {
        mode[c.key] = {{"median", Number(s->median)},
                       {"min", Number(s->min)},
                       {"max", Number(s->max)},
                       {"n", s->count}};
      }
    }
    nlohmann::json runs = nlohmann::json::array();
    for (const RunMetrics& r : m.runs) {
      nlohmann::json run = {{"dir", Relative(in, r.dir)},
                            {"failed", r.failed},
                            {"message", r.message}};
      if (!r.failed) {
        run["target_reached"] = r.target_hit.has_value();
        for (const Column& c : AllColumns()) {
          std::optional<double> v = c.get(r, in.target);
          run[c.key] = v ? Number(*v) : nlohmann::json(nullptr);
        }
        run["staleness_histogram"] = r.summary.staleness_histogram;
        run["model_clock"] = r.model_clock;  // training.clock model (async)
      }
      runs.push_back(run);
    }
    mode["repeats"] = runs;
    modes.push_back(mode);
  }
  j["modes"] = modes;
  return j;
}

absl::Status WriteReport(const CompareInputs& in, const PlotOutcome& plots) {
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"report.md",
                                            ReportMarkdown(in, plots)},
        {"compare.json", CompareJson(in, plots).dump(2) + "\n"}}) {
    const std::string path = absl::StrCat(in.out_dir, "/", name);
    std::ofstream out(path);
    out << text;
    if (!out.flush()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
