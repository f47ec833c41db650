#include "tools/report/compare_report.h"

#include <cmath>
#include <cstdio>
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
  kMillis
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
  return absl::StrCat(compute, "; ", straggler, "; links: ",
                      in.shaping.empty() ? "loopback, not shaped" : in.shaping);
}

}  // namespace

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
## Definitions

- **time / steps to target**: wall time since training started (all workers
  registered) and step of the first `metrics.csv` row whose evaluation meets
  the target; the step is the number of updates behind the evaluated
  weights. Resolution: `evaluation.every_steps`. "not reached": never within
  the run (it sorts last in medians).
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
    for (const Column& c : Columns()) {
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
        for (const Column& c : Columns()) {
          std::optional<double> v = c.get(r, in.target);
          run[c.key] = v ? Number(*v) : nlohmann::json(nullptr);
        }
        run["staleness_histogram"] = r.summary.staleness_histogram;
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
