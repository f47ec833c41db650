#include "tools/report/sparse_study.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/report/report_math.h"

namespace pstrain {
namespace {

const std::vector<std::string>& Modes() {
  static const auto* v = new std::vector<std::string>{
      kSparsePs, kSparseAllgather, kSparseDense, kSparseDdp};
  return *v;
}

std::string ModeTitle(const std::string& mode) {
  if (mode == kSparsePs) return "sync (parameter server)";
  if (mode == kSparseDense) return "allreduce:dense";
  if (mode == kSparseAllgather) return "allreduce:allgather";
  if (mode == kSparseDdp) return "ddp (PyTorch DDP, gloo)";
  return mode;
}

enum class Figure { kSent, kReceived, kSteady, kSPerStep };

std::optional<double> Get(const SparseRun& r, Figure f) {
  switch (f) {
    case Figure::kSent:
      return r.sent_bytes;
    case Figure::kReceived:
      return r.received_bytes;
    case Figure::kSteady:
      return r.steady_s_per_step;
    case Figure::kSPerStep:
      return r.s_per_step;
  }
  return std::nullopt;
}

std::optional<Spread> SpreadOf(const SparseRuns& runs, int64_t rows,
                               const std::string& mode, Figure f) {
  auto t = runs.find(rows);
  if (t == runs.end()) return std::nullopt;
  auto m = t->second.find(mode);
  if (m == t->second.end()) return std::nullopt;
  std::vector<double> v;
  for (const SparseRun& r : m->second) {
    if (r.failed) continue;
    if (std::optional<double> x = Get(r, f)) v.push_back(*x);
  }
  return MedianSpread(v);
}

std::optional<double> MedianOf(const SparseRuns& runs, int64_t rows,
                               const std::string& mode, Figure f) {
  std::optional<Spread> s = SpreadOf(runs, rows, mode, f);
  if (!s) return std::nullopt;
  return s->median;
}

// The table sizes at which `mode` has a median of `f`, ascending.
std::vector<int64_t> SizesWith(const SparseRuns& runs, const std::string& mode,
                               Figure f) {
  std::vector<int64_t> sizes;
  for (const auto& [rows, unused] : runs) {
    if (MedianOf(runs, rows, mode, f)) sizes.push_back(rows);
  }
  return sizes;
}

std::string Rows(int64_t rows) {
  const double l = std::log10(static_cast<double>(rows));
  if (rows > 0 && std::fabs(l - std::round(l)) < 1e-9 && l >= 1) {
    return absl::StrFormat("10^%d", static_cast<int>(std::round(l)));
  }
  return absl::StrCat(rows);
}

std::string Bytes(double v) {
  if (v >= 1e9) return absl::StrFormat("%.2f GB", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.2f MB", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1f kB", v / 1e3);
  return absl::StrFormat("%.0f B", v);
}

std::string Secs(double v) { return absl::StrFormat("%.4f s", v); }

std::string Cell(const std::optional<Spread>& s, std::string (*fmt)(double)) {
  if (!s) return "—";
  const std::string lo = fmt(s->min), hi = fmt(s->max);
  if (s->count == 1 || lo == hi) return fmt(s->median);
  return absl::StrCat(fmt(s->median), " (", lo, "–", hi, ")");
}

SparseClaim Missing(SparseClaim c, const std::string& what) {
  c.supported = false;
  c.evidence = absl::StrCat("not supported for lack of data: ", what, ".");
  return c;
}

// "10^4: 83.2 kB, 10^5: 83.1 kB" for `mode` at `sizes`.
std::string Series(const SparseRuns& runs, const std::string& mode, Figure f,
                   const std::vector<int64_t>& sizes,
                   std::string (*fmt)(double)) {
  std::vector<std::string> parts;
  for (int64_t rows : sizes) {
    parts.push_back(
        absl::StrCat(Rows(rows), ": ", fmt(*MedianOf(runs, rows, mode, f))));
  }
  return absl::StrJoin(parts, ", ");
}

// Sizes where both modes have a median of f.
std::vector<int64_t> Common(const SparseRuns& runs, const std::string& a,
                            const std::string& b, Figure f) {
  std::vector<int64_t> out;
  for (int64_t rows : SizesWith(runs, a, f)) {
    if (MedianOf(runs, rows, b, f)) out.push_back(rows);
  }
  return out;
}

// Whether any successful run of `mode` at `rows` had computed bytes.
bool BytesComputed(const SparseRuns& runs, int64_t rows,
                   const std::string& mode) {
  auto t = runs.find(rows);
  if (t == runs.end()) return false;
  auto m = t->second.find(mode);
  if (m == t->second.end()) return false;
  for (const SparseRun& r : m->second) {
    if (!r.failed && r.bytes_computed) return true;
  }
  return false;
}

// "`mode`'s f over `ref`'s lies in [lo, hi] at every size both ran"; lo = 0
// is "at most hi".
SparseClaim RatioClaim(const SparseRuns& runs, SparseClaim c,
                       const std::string& mode, const std::string& ref,
                       Figure f, double lo, double hi,
                       std::string (*fmt)(double), const std::string& what) {
  const std::vector<int64_t> sizes = Common(runs, mode, ref, f);
  if (sizes.empty()) {
    return Missing(c, absl::StrCat("no table size where both `", mode,
                                   "` and `", ref, "` have ", what));
  }
  std::vector<std::string> parts, off;
  double worst = 0, best = std::numeric_limits<double>::infinity();
  for (int64_t rows : sizes) {
    const double a = *MedianOf(runs, rows, mode, f);
    const double b = *MedianOf(runs, rows, ref, f);
    const double r = b > 0 ? a / b : std::numeric_limits<double>::infinity();
    worst = std::max(worst, r);
    best = std::min(best, r);
    if (!(r >= lo && r <= hi)) off.push_back(Rows(rows));
    parts.push_back(
        absl::StrFormat("%s: %s vs %s (×%.2f)", Rows(rows), fmt(a), fmt(b), r));
  }
  c.supported = off.empty();
  const std::string range =
      lo > 0 ? absl::StrFormat("; ×%.2f to ×%.2f", best, worst)
             : absl::StrFormat("; at most ×%.2f", worst);
  const std::string outside =
      off.empty() ? ""
      : lo > 0    ? absl::StrFormat(", outside [×%.2f, ×%.2f] at %s", lo, hi,
                                    absl::StrJoin(off, ", "))
               : absl::StrCat(", above ×", absl::StrFormat("%.1f", hi), " at ",
                              absl::StrJoin(off, ", "));
  const std::string rule =
      lo > 0 ? absl::StrFormat(
                   ". Rule: supported when the ratio lies in [%.2f, %.2f] at "
                   "every table size both ran.",
                   lo, hi)
             : absl::StrFormat(
                   ". Rule: supported when the ratio is at most %.1f at "
                   "every table size both ran.",
                   hi);
  c.evidence =
      absl::StrCat("median ", what, " `", mode, "` vs `", ref,
                   "`: ", absl::StrJoin(parts, "; "), range, outside, rule);
  return c;
}

// "X stays within FACTOR x the PS at every size both ran".
SparseClaim NearPs(const SparseRuns& runs, SparseClaim c, Figure f,
                   double factor, std::string (*fmt)(double),
                   const std::string& what) {
  return RatioClaim(runs, std::move(c), kSparseAllgather, kSparsePs, f, 0,
                    factor, fmt, what);
}

}  // namespace

std::optional<double> SteadySecondsPerStep(std::vector<MetricsRow> rows) {
  rows.erase(std::remove_if(rows.begin(), rows.end(),
                            [](const MetricsRow& r) { return !r.loss; }),
             rows.end());
  std::sort(
      rows.begin(), rows.end(),
      [](const MetricsRow& a, const MetricsRow& b) { return a.step < b.step; });
  if (rows.size() < 3) return std::nullopt;
  const MetricsRow& first = rows[1];
  const MetricsRow& last = rows.back();
  if (last.step <= first.step) return std::nullopt;
  return (last.wall_s - first.wall_s) /
         static_cast<double>(last.step - first.step);
}

absl::Status AddSparseCompare(const std::string& text,
                              const std::string& source,
                              const std::string& compare_dir, int64_t rows,
                              SparseRuns* runs) {
  return ForEachCompareRepeat(
      text, source, [&](const std::string& label, const nlohmann::json& r) {
        SparseRun run;
        run.failed = r.value("failed", true);
        if (!run.failed) {
          const nlohmann::json sent =
              r.value("bytes_sent_per_worker_step", nlohmann::json());
          const nlohmann::json received =
              r.value("bytes_received_per_worker_step", nlohmann::json());
          const nlohmann::json sps = r.value("s_per_step", nlohmann::json());
          const nlohmann::json dir = r.value("dir", nlohmann::json());
          if (!sent.is_number() || !received.is_number() || !sps.is_number() ||
              !dir.is_string()) {
            return absl::InvalidArgumentError(absl::StrCat(
                source, ": mode ", label,
                ": a run without bytes_sent_per_worker_step, "
                "bytes_received_per_worker_step, s_per_step or dir"));
          }
          run.sent_bytes = sent.get<double>();
          run.received_bytes = received.get<double>();
          run.s_per_step = sps.get<double>();
          const std::string csv = absl::StrCat(
              compare_dir, "/", dir.get<std::string>(), "/metrics.csv");
          absl::StatusOr<std::string> csv_text = ReadFileText(csv);
          if (!csv_text.ok()) {
            return absl::InvalidArgumentError(absl::StrCat(
                source, ": mode ", label, ": ", csv_text.status().message()));
          }
          absl::StatusOr<std::vector<MetricsRow>> parsed =
              ParseMetricsCsv(*csv_text, csv);
          if (!parsed.ok()) {
            return absl::InvalidArgumentError(parsed.status().message());
          }
          run.steady_s_per_step = SteadySecondsPerStep(*std::move(parsed));
          // Computed bytes are marked in summary.json (mode ddp); a run
          // without the mark counted its bytes.
          absl::StatusOr<std::string> summary = ReadFileText(absl::StrCat(
              compare_dir, "/", dir.get<std::string>(), "/summary.json"));
          if (summary.ok()) {
            const nlohmann::json sj =
                nlohmann::json::parse(*summary, nullptr, false);
            const auto mark =
                sj.is_object() ? sj.find("bytes_computed") : sj.end();
            run.bytes_computed =
                mark != sj.end() && mark->is_boolean() && mark->get<bool>();
          }
        }
        (*runs)[rows][label].push_back(run);
        return absl::OkStatus();
      });
}

std::vector<SparseClaim> JudgeSparseClaims(const SparseRuns& runs) {
  std::vector<SparseClaim> out;
  // 1. The PS's bytes do not grow with the table.
  {
    SparseClaim c{"ps-bytes-flat",
                  "The parameter server's bytes per step do not grow with the "
                  "table: each worker pushes only the rows its batch touched."};
    const std::vector<int64_t> s = SizesWith(runs, kSparsePs, Figure::kSent);
    if (s.size() < 2) {
      out.push_back(
          Missing(c, "`sync` has bytes at fewer than two table sizes"));
    } else {
      const double lo = *MedianOf(runs, s.front(), kSparsePs, Figure::kSent);
      const double hi = *MedianOf(runs, s.back(), kSparsePs, Figure::kSent);
      const double r = hi / lo;
      c.supported = r <= 1 + kSparseFlat;
      c.evidence = absl::StrFormat(
          "median bytes sent per worker per step `sync`: %s; %s rows vs %s: "
          "×%.3f over ×%.0f the rows. Rule: supported when the largest "
          "table's bytes are at most %.2f x the smallest's.",
          Series(runs, kSparsePs, Figure::kSent, s, Bytes), Rows(s.back()),
          Rows(s.front()), r,
          static_cast<double>(s.back()) / static_cast<double>(s.front()),
          1 + kSparseFlat);
      out.push_back(c);
    }
  }
  // 2. Dense all-reduce's bytes grow linearly with the rows.
  {
    SparseClaim c{"dense-bytes-linear",
                  "Dense all-reduce's bytes per step grow linearly with the "
                  "table's rows: every step carries the whole table's "
                  "gradient."};
    const std::vector<int64_t> s = SizesWith(runs, kSparseDense, Figure::kSent);
    if (s.size() < 2) {
      out.push_back(Missing(
          c, "`allreduce:dense` has bytes at fewer than two table sizes"));
    } else {
      const double lo = *MedianOf(runs, s.front(), kSparseDense, Figure::kSent);
      const double hi = *MedianOf(runs, s.back(), kSparseDense, Figure::kSent);
      const double slope =
          std::log(hi / lo) / std::log(static_cast<double>(s.back()) /
                                       static_cast<double>(s.front()));
      c.supported =
          std::isfinite(slope) && std::fabs(slope - 1) <= kSparseSlopeTolerance;
      c.evidence = absl::StrFormat(
          "median bytes sent per worker per step `allreduce:dense`: %s; "
          "log-log slope from %s to %s rows %.3f (1 = linear). Rule: "
          "supported when the slope lies in [%.2f, %.2f].",
          Series(runs, kSparseDense, Figure::kSent, s, Bytes), Rows(s.front()),
          Rows(s.back()), slope, 1 - kSparseSlopeTolerance,
          1 + kSparseSlopeTolerance);
      out.push_back(c);
    }
  }
  // 3. The all-gather's bytes stay near the PS's.
  out.push_back(NearPs(
      runs,
      {"allgather-bytes-near-ps",
       absl::StrFormat("The sparse all-gather's bytes per step stay within "
                       "%.0fx of the parameter server's at every table size "
                       "(a worker sends N - 1 blocks of touched rows around "
                       "the ring, N - 1 = 3 for 4 workers).",
                       kSparseAllgatherBytesFactor)},
      Figure::kSent, kSparseAllgatherBytesFactor, Bytes,
      "bytes sent per worker per step"));
  // 4. The PS's time per step does not grow with the table.
  {
    SparseClaim c{"ps-time-flat",
                  "The parameter server's time per step does not grow with "
                  "the table."};
    const std::vector<int64_t> s = SizesWith(runs, kSparsePs, Figure::kSteady);
    if (s.size() < 2) {
      out.push_back(Missing(
          c, "`sync` has a steady s / step at fewer than two table sizes"));
    } else {
      const double lo = *MedianOf(runs, s.front(), kSparsePs, Figure::kSteady);
      const double hi = *MedianOf(runs, s.back(), kSparsePs, Figure::kSteady);
      c.supported = hi <= kSparseTimeFactor * lo;
      c.evidence = absl::StrFormat(
          "median steady s / step `sync`: %s; %s rows vs %s: ×%.2f. Rule: "
          "supported when the largest table's is at most %.1f x the "
          "smallest's.",
          Series(runs, kSparsePs, Figure::kSteady, s, Secs), Rows(s.back()),
          Rows(s.front()), hi / lo, kSparseTimeFactor);
      out.push_back(c);
    }
  }
  // 5. Dense all-reduce pays for the table in time.
  {
    SparseClaim c{
        "dense-time-grows",
        absl::StrFormat(
            "Dense all-reduce pays for the table in time: at its largest "
            "table its time per step is at least %.0fx its own at the "
            "smallest and %.0fx the parameter server's.",
            kSparseDenseSlowdown, kSparseDenseSlowdown)};
    const std::vector<int64_t> s =
        SizesWith(runs, kSparseDense, Figure::kSteady);
    if (s.size() < 2) {
      out.push_back(Missing(c,
                            "`allreduce:dense` has a steady s / step at fewer "
                            "than two table sizes"));
    } else if (!MedianOf(runs, s.back(), kSparsePs, Figure::kSteady)) {
      out.push_back(Missing(c, absl::StrCat("`sync` has no steady s / step at ",
                                            Rows(s.back()), " rows")));
    } else {
      const double lo =
          *MedianOf(runs, s.front(), kSparseDense, Figure::kSteady);
      const double hi =
          *MedianOf(runs, s.back(), kSparseDense, Figure::kSteady);
      const double ps = *MedianOf(runs, s.back(), kSparsePs, Figure::kSteady);
      c.supported =
          hi >= kSparseDenseSlowdown * lo && hi >= kSparseDenseSlowdown * ps;
      c.evidence = absl::StrFormat(
          "median steady s / step `allreduce:dense`: %s; at %s rows ×%.2f "
          "its own at %s and ×%.2f `sync`'s (%s). Rule: supported when both "
          "ratios are at least %.1f.",
          Series(runs, kSparseDense, Figure::kSteady, s, Secs), Rows(s.back()),
          hi / lo, Rows(s.front()), hi / ps, Secs(ps), kSparseDenseSlowdown);
      out.push_back(c);
    }
  }
  // 6. The all-gather's time stays near the PS's.
  out.push_back(NearPs(
      runs,
      {"allgather-time-near-ps",
       absl::StrFormat("The sparse all-gather's time per step stays within "
                       "%.1fx of the parameter server's at every table size.",
                       kSparseTimeFactor)},
      Figure::kSteady, kSparseTimeFactor, Secs, "steady s / step"));
  // 7. DDP moves the whole table like the dense ring.
  {
    SparseClaim c = RatioClaim(
        runs,
        {"ddp-bytes-like-dense",
         absl::StrFormat(
             "PyTorch DDP (gloo, dense gradients) moves the whole table like "
             "pstrain's dense ring: its bytes per step are within %.2fx of "
             "`allreduce:dense`'s at every table size both ran.",
             kSparseDdpBytesFactor)},
        kSparseDdp, kSparseDense, Figure::kSent, 1 / kSparseDdpBytesFactor,
        kSparseDdpBytesFactor, Bytes, "bytes sent per worker per step");
    bool computed = false;
    for (const auto& [rows, unused] : runs) {
      computed = computed || BytesComputed(runs, rows, kSparseDdp);
    }
    if (computed) {
      c.evidence +=
          " `ddp`'s bytes are computed, not counted (gloo exposes no "
          "counters): 2(N - 1)/N x the model's fp32 bytes, so this checks "
          "that arithmetic against the ring's counted bytes, not gloo's "
          "wire.";
    }
    out.push_back(c);
  }
  // 8. DDP pays for the table in time.
  {
    SparseClaim c{
        "ddp-time-grows",
        absl::StrFormat("PyTorch DDP pays for the table in time like the dense "
                        "ring: at its largest table its time per step is at "
                        "least %.0fx the parameter server's.",
                        kSparseDenseSlowdown)};
    const std::vector<int64_t> s = SizesWith(runs, kSparseDdp, Figure::kSteady);
    if (s.empty()) {
      out.push_back(Missing(c, "`ddp` has no steady s / step"));
    } else if (!MedianOf(runs, s.back(), kSparsePs, Figure::kSteady)) {
      out.push_back(Missing(c, absl::StrCat("`sync` has no steady s / step at ",
                                            Rows(s.back()), " rows")));
    } else {
      const double ddp = *MedianOf(runs, s.back(), kSparseDdp, Figure::kSteady);
      const double ps = *MedianOf(runs, s.back(), kSparsePs, Figure::kSteady);
      const std::optional<double> dense =
          MedianOf(runs, s.back(), kSparseDense, Figure::kSteady);
      c.supported = ddp >= kSparseDenseSlowdown * ps;
      c.evidence = absl::StrFormat(
          "median steady s / step `ddp`: %s; at %s rows ×%.2f `sync`'s (%s)%s. "
          "Rule: supported when that ratio is at least %.1f.",
          Series(runs, kSparseDdp, Figure::kSteady, s, Secs), Rows(s.back()),
          ddp / ps, Secs(ps),
          dense ? absl::StrFormat(" and ×%.2f `allreduce:dense`'s (%s)",
                                  ddp / *dense, Secs(*dense))
                : "",
          kSparseDenseSlowdown);
      out.push_back(c);
    }
  }
  return out;
}

std::vector<StudyPlot> SparsePlots(const SparseRuns& runs) {
  std::vector<StudyPlot> plots(2);
  plots[0] = {
      "sparse_bytes", "bytes sent per worker per step vs embedding table rows",
      "table rows",   "bytes sent / worker / step",
      true,           true};
  plots[1] = {"sparse_time", "steady time per step vs embedding table rows",
              "table rows",  "steady s / step",
              true,          true};
  const Figure figs[] = {Figure::kSent, Figure::kSteady};
  for (int i = 0; i < 2; ++i) {
    for (const std::string& mode : Modes()) {
      PlotSeries series{ModeTitle(mode), {}};
      for (int64_t rows : SizesWith(runs, mode, figs[i])) {
        const Spread s = *SpreadOf(runs, rows, mode, figs[i]);
        series.points.push_back(
            {static_cast<double>(rows), s.median, s.min, s.max});
      }
      plots[i].series.push_back(series);
    }
  }
  return plots;
}

std::string SparseStudyMarkdown(const SparseStudyInputs& in,
                                const std::vector<SparseClaim>& claims,
                                const StudyPlotOutcome& plots) {
  std::string md =
      "# Study: sparse (parameter server vs dense all-reduce vs sparse "
      "all-gather as the embedding table grows)\n\n";
  absl::StrAppend(
      &md, in.setup, "\n\nRegenerate with:\n\n```sh\n", in.command,
      "\n```\n\n## Conclusions (derived from the numbers below)\n\n");
  for (const SparseClaim& c : claims) {
    absl::StrAppend(&md, "- **", c.supported ? "supported" : "not supported",
                    "** — ", c.statement, " ", c.evidence, "\n");
  }
  md +=
      "\n## Bytes and time per step\n\n"
      "Median over the repeats and (min–max). Sent / received: bytes per "
      "worker per step (received includes the rows pulled for the final "
      "evaluation in the PS mode); counted by pstrain, except where marked "
      "(computed): `ddp`'s, 2(N - 1)/N x the model's fp32 bytes, as gloo "
      "exposes no counters. Steady s / step: from `metrics.csv`, the "
      "first step and the final evaluation left out; s / step: wall / "
      "steps, everything included. `—`: not run.\n\n"
      "| table rows | mode | runs ok | sent / worker / step | received / "
      "worker / step | steady s / step | s / step |\n"
      "|--:|---|---|--:|--:|--:|--:|\n";
  for (const auto& [rows, modes] : in.runs) {
    for (const std::string& mode : Modes()) {
      auto m = modes.find(mode);
      if (m == modes.end()) {
        absl::StrAppend(&md, "| ", Rows(rows), " | `", mode,
                        "` | not run | — | — | — | — |\n");
        continue;
      }
      int ok = 0;
      for (const SparseRun& r : m->second) ok += !r.failed;
      const std::string mark =
          BytesComputed(in.runs, rows, mode) ? " (computed)" : "";
      absl::StrAppend(
          &md, "| ", Rows(rows), " | `", mode, "` | ", ok, "/",
          m->second.size(), " | ",
          Cell(SpreadOf(in.runs, rows, mode, Figure::kSent), Bytes), mark,
          " | ", Cell(SpreadOf(in.runs, rows, mode, Figure::kReceived), Bytes),
          mark, " | ",
          Cell(SpreadOf(in.runs, rows, mode, Figure::kSteady), Secs), " | ",
          Cell(SpreadOf(in.runs, rows, mode, Figure::kSPerStep), Secs), " |\n");
    }
  }
  absl::StrAppend(&md, "\n## Plots\n\n", StudyPlotMarkdown(plots));
  md += R"(
## Reading the tables

The parameter server (`sync`) moves the rows a batch touched: its bytes per
step depend on the batch and the data's skew, not on the table. Dense
all-reduce (`allreduce:dense`) moves 2(N - 1)/N x the whole table's fp32
gradient each way per step, so its bytes grow with the rows. The sparse
all-gather (`allreduce:allgather`) moves every worker's touched rows to every
worker: independent of the table too, but growing with N. Every mode trains
the same weights (docs/sparse.md); this study compares only their cost.
PyTorch DDP (`ddp`: gloo, DistributedDataParallel) trains the same model
(examples/torch/train_wide_deep.py: the same tensors, initial values,
hashing, data and AdaGrad) with the table's gradient dense, as a plain
`nn.Embedding`'s is: it all-reduces the whole table every step, like
`allreduce:dense`, and its optimizer steps over the whole table too.
)";
  return md;
}

nlohmann::json SparseStudyJson(const SparseStudyInputs& in,
                               const std::vector<SparseClaim>& claims,
                               const StudyPlotOutcome& plots) {
  auto spread = [](const std::optional<Spread>& s) -> nlohmann::json {
    if (!s) return nullptr;
    return {{"median", s->median},
            {"min", s->min},
            {"max", s->max},
            {"n", s->count}};
  };
  nlohmann::json j;
  j["study"] = "sparse";
  j["command"] = in.command;
  j["setup"] = in.setup;
  nlohmann::json cj = nlohmann::json::array();
  for (const SparseClaim& c : claims) {
    cj.push_back({{"id", c.id},
                  {"statement", c.statement},
                  {"verdict", c.supported ? "supported" : "not supported"},
                  {"evidence", c.evidence}});
  }
  j["claims"] = cj;
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& [rows, modes] : in.runs) {
    for (const auto& [mode, mode_runs] : modes) {
      int ok = 0;
      for (const SparseRun& r : mode_runs) ok += !r.failed;
      tables.push_back(
          {{"rows", rows},
           {"mode", mode},
           {"runs", mode_runs.size()},
           {"runs_ok", ok},
           {"bytes_computed", BytesComputed(in.runs, rows, mode)},
           {"bytes_sent_per_worker_step",
            spread(SpreadOf(in.runs, rows, mode, Figure::kSent))},
           {"bytes_received_per_worker_step",
            spread(SpreadOf(in.runs, rows, mode, Figure::kReceived))},
           {"steady_s_per_step",
            spread(SpreadOf(in.runs, rows, mode, Figure::kSteady))},
           {"s_per_step",
            spread(SpreadOf(in.runs, rows, mode, Figure::kSPerStep))}});
    }
  }
  j["results"] = tables;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& [title, path] : plots.pngs) {
    files.push_back({{"title", title}, {"png", path}});
  }
  j["plots"] = {
      {"made", plots.made}, {"why_not", plots.why_not}, {"files", files}};
  return j;
}

}  // namespace pstrain
