#include "tools/report/commands.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/job_config.h"
#include "common/run_record.h"
#include "nlohmann/json.hpp"
#include "tools/report/compare_report.h"
#include "tools/report/config_doc.h"
#include "tools/report/data_export.h"
#include "tools/report/derive_config.h"
#include "tools/report/optimizer_study.h"
#include "tools/report/plots.h"
#include "tools/report/run_metrics.h"
#include "tools/report/scaling_study.h"
#include "tools/report/sparse_study.h"
#include "tools/report/straggler_study.h"
#include "tools/report/study_args.h"

namespace pstrain {
namespace report_cli {

const char kUsage[] =
    "usage: ps_report derive-config --base FILE [--set KEY=VALUE]... [--out "
    "FILE]\n"
    "       ps_report plan --base FILE --modes LIST [--repeats R] "
    "[--set KEY=VALUE]... --out DIR\n"
    "       ps_report compare --out DIR --run LABEL=RUN_DIR [--run ...]\n"
    "                 [--target-accuracy A | --target-loss L] [--base-config "
    "NAME]\n"
    "                 [--shaping TEXT] [--gnuplot PATH]\n"
    "                 [--wire-gb-per-s RATE --wire TEXT]\n"
    "       ps_report summary-get RUN_DIR|summary.json KEY\n"
    "       ps_report metrics-get RUN_DIR|metrics.csv COLUMN\n"
    "       ps_report failure RUN_DIR|summary.json\n"
    "       ps_report record-failure RUN_DIR PROCESS MESSAGE [--wall-s S]\n"
    "       ps_report config-doc [--update FILE]\n"
    "       ps_report study-stragglers --out DIR --scenario NAME=COMPARE_DIR "
    "[--scenario ...]\n"
    "                 [--command TEXT] [--setup TEXT] [--gnuplot PATH]\n"
    "       ps_report study-optimizers --out DIR --optimizer NAME=COMPARE_DIR "
    "[--optimizer ...]\n"
    "                 [--command TEXT] [--setup TEXT] [--gnuplot PATH]\n"
    "       ps_report study-sparse --out DIR --table ROWS=COMPARE_DIR "
    "[--table ...]\n"
    "                 [--command TEXT] [--setup TEXT] [--gnuplot PATH]\n"
    "       ps_report study-scaling --out DIR --run DESIGN:N=RUN_DIR "
    "[--run ...]\n"
    "                 --model-bytes M --compute-ms C --local-batch B "
    "--warmup W --steps T\n"
    "                 [--link-gbit G] [--links TEXT] [--gnuplot PATH]\n"
    "                 [--command TEXT] [--setup TEXT]\n"
    "       ps_report data-export --job_spec FILE.pb | --config FILE.yaml "
    "--rank R\n"
    "                 [--steps FROM:TO] --out FILE\n";

int Usage(const std::string& error) {
  std::fprintf(stderr, "ps_report: %s\n%s", error.c_str(), kUsage);
  return 2;
}

int Error(const std::string& message) {
  std::fprintf(stderr, "ps_report: %s\n", message.c_str());
  return 2;
}

// Walks "--name value" pairs; `on` returns false for an unknown name.
template <typename F>
bool Options(int argc, char** argv, std::string* error, F on) {
  return WalkOptionPairs(argc, argv, on, error);
}

// The exit status of a study command's failed ParseStudyArgs.
int StudyArgsFailed(StudyArgsError e, const std::string& error) {
  return e == StudyArgsError::kUsage ? Usage(error) : Error(error);
}

namespace {

// A study's verdicts on stdout, a line each: "VERDICT: ID: EVIDENCE".
const char* Verdict(bool supported) {
  return supported ? "supported" : "not supported";
}
template <typename Claim>
void PrintClaims(const std::vector<Claim>& claims) {
  for (const Claim& c : claims) {
    std::printf("%s: %s: %s\n", Verdict(c.supported), c.id.c_str(),
                c.evidence.c_str());
  }
}

}  // namespace

int DataExportMain(int argc, char** argv) {
  std::string spec, yaml, rank_text, steps_text, out, error;
  const bool parsed = Options(argc, argv, &error,
                              [&](const std::string& n, const std::string& v) {
                                if (n == "--job_spec") {
                                  spec = v;
                                } else if (n == "--config") {
                                  yaml = v;
                                } else if (n == "--rank") {
                                  rank_text = v;
                                } else if (n == "--steps") {
                                  steps_text = v;
                                } else if (n == "--out") {
                                  out = v;
                                } else {
                                  return false;
                                }
                                return true;
                              });
  if (!parsed) return Usage(error);
  if (spec.empty() == yaml.empty())
    return Usage("data-export needs one of --job_spec and --config");
  if (rank_text.empty() || out.empty())
    return Usage("data-export needs --rank and --out");
  int rank = 0;
  if (!absl::SimpleAtoi(rank_text, &rank))
    return Error(absl::StrCat("--rank '", rank_text, "': not an integer"));
  JobConfig config;
  if (!spec.empty()) {
    absl::StatusOr<std::string> bytes = ReadFileText(spec);
    if (!bytes.ok())
      return Error(absl::StrCat("--job_spec: ", bytes.status().message()));
    if (!config.ParseFromString(*bytes)) {
      return Error(absl::StrCat("--job_spec '", spec,
                                "': not a serialized pstrain.v1.JobConfig"));
    }
  } else {
    absl::StatusOr<JobConfig> loaded = LoadJobConfig(yaml);
    if (!loaded.ok())
      return Error(absl::StrCat("--config: ", loaded.status().message()));
    config = *loaded;
  }
  int64_t from = 0, to = config.training().steps();
  if (!steps_text.empty()) {
    const size_t colon = steps_text.find(':');
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(steps_text.substr(0, colon), &from) ||
        !absl::SimpleAtoi(steps_text.substr(colon + 1), &to)) {
      return Error(
          absl::StrCat("--steps '", steps_text, "': expected FROM:TO"));
    }
  }
  absl::Status s = ExportRankData(config, rank, from, to, out);
  if (!s.ok()) return Error(std::string(s.message()));
  return 0;
}

int DeriveConfigMain(int argc, char** argv) {
  std::string base, out, error;
  std::vector<ConfigOverride> overrides;
  bool bad_set = false;
  const bool parsed = Options(
      argc, argv, &error, [&](const std::string& n, const std::string& v) {
        if (n == "--base") {
          base = v;
        } else if (n == "--out") {
          out = v;
        } else if (n == "--set") {
          absl::StatusOr<ConfigOverride> o = ParseOverride(v);
          if (!o.ok()) {
            if (!bad_set) error = std::string(o.status().message());
            bad_set = true;
          } else {
            overrides.push_back(*o);
          }
        } else {
          return false;
        }
        return true;
      });
  if (!parsed) return Usage(error);
  if (bad_set) return Error(error);
  if (base.empty()) return Usage("derive-config needs --base FILE");
  absl::StatusOr<std::string> text = ReadFileText(base);
  if (!text.ok())
    return Error(absl::StrCat("--base: ", text.status().message()));
  absl::StatusOr<std::string> derived = DeriveConfig(*text, base, overrides);
  if (!derived.ok()) return Error(std::string(derived.status().message()));
  std::string header =
      absl::StrCat("# Derived from ", base, " by ps_report derive-config");
  for (const ConfigOverride& o : overrides)
    absl::StrAppend(&header, " --set ", o.key, "=", o.value);
  const std::string result = absl::StrCat(header, "\n", *derived);
  if (out.empty()) {
    std::fputs(result.c_str(), stdout);
    return 0;
  }
  std::ofstream file(out);
  file << result;
  if (!file.flush()) return Error(absl::StrCat("cannot write ", out));
  return 0;
}

int PlanMain(int argc, char** argv) {
  std::string base, out, modes, error;
  int repeats = 1;
  std::vector<std::string> sets;
  const bool parsed = Options(argc, argv, &error,
                              [&](const std::string& n, const std::string& v) {
                                if (n == "--base") {
                                  base = v;
                                } else if (n == "--out") {
                                  out = v;
                                } else if (n == "--modes") {
                                  modes = v;
                                } else if (n == "--repeats") {
                                  if (!absl::SimpleAtoi(v, &repeats))
                                    repeats = 0;
                                } else if (n == "--set") {
                                  sets.push_back(v);
                                } else {
                                  return false;
                                }
                                return true;
                              });
  if (!parsed) return Usage(error);
  if (base.empty() || out.empty()) return Usage("plan needs --base and --out");
  absl::StatusOr<std::vector<PlannedRun>> runs = PlanRuns(modes, repeats);
  if (!runs.ok()) return Error(std::string(runs.status().message()));
  std::vector<ConfigOverride> common;
  for (const std::string& set : sets) {
    absl::StatusOr<ConfigOverride> o = ParseOverride(set);
    if (!o.ok()) return Error(std::string(o.status().message()));
    common.push_back(*o);
  }
  absl::StatusOr<std::string> text = ReadFileText(base);
  if (!text.ok())
    return Error(absl::StrCat("--base: ", text.status().message()));
  // Every job first, so a bad key fails before anything is written.
  std::vector<std::string> derived;
  for (const PlannedRun& run : *runs) {
    std::vector<ConfigOverride> all = common;
    all.insert(all.end(), run.mode_sets.begin(), run.mode_sets.end());
    absl::StatusOr<std::string> job = DeriveConfig(*text, base, all);
    if (!job.ok()) {
      return Error(
          absl::StrCat("mode ", run.label, ": ", job.status().message()));
    }
    std::string header =
        absl::StrCat("# Derived from ", base, " by ps_report plan");
    for (const ConfigOverride& o : all)
      absl::StrAppend(&header, " --set ", o.key, "=", o.value);
    derived.push_back(absl::StrCat(header, "\n", *job));
  }
  std::string tsv;
  for (size_t i = 0; i < runs->size(); ++i) {
    const std::filesystem::path dir =
        std::filesystem::path(out) / "runs" / (*runs)[i].name;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories(dir, ec);
    std::ofstream file(dir / "derived.yaml");
    file << derived[i];
    if (ec || !file.flush()) {
      return Error(
          absl::StrCat("cannot write ", (dir / "derived.yaml").string()));
    }
    absl::StrAppend(&tsv, (*runs)[i].name, "\t", (*runs)[i].label, "\n");
  }
  std::ofstream plan(std::filesystem::path(out) / "plan.tsv");
  plan << tsv;
  if (!plan.flush())
    return Error(absl::StrCat("cannot write ", out, "/plan.tsv"));
  return 0;
}

// Writes OUT/report.md and OUT/study.json (a study's two outputs). Returns
// "" or the error naming the file that could not be written.
std::string WriteStudyFiles(const std::string& out, const std::string& report,
                            const nlohmann::json& study) {
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"report.md", report},
        {"study.json", study.dump(2) + "\n"}}) {
    const std::string path = absl::StrCat(out, "/", name);
    std::ofstream file(path);
    file << text;
    if (!file.flush()) return absl::StrCat("cannot write ", path);
  }
  return "";
}

int StudyStragglersMain(int argc, char** argv) {
  StudyInputs in;
  std::vector<std::pair<std::string, std::string>> scenarios;
  StudyArgsSpec spec;
  spec.input_flag = "--scenario";
  spec.expected =
      "expected NAME=COMPARE_DIR, NAME persistent, transient or pause";
  spec.add_input = [&](const std::string& name, const std::string& dir) {
    if (name != kPersistent && name != kTransient && name != kPause) {
      return false;
    }
    scenarios.emplace_back(name, dir);
    return true;
  };
  spec.needs = "study-stragglers needs --out DIR and --scenario NAME=DIR";
  StudyArgs args;
  std::string error;
  if (StudyArgsError e = ParseStudyArgs(argc, argv, spec, &args, &error);
      e != StudyArgsError::kNone) {
    return StudyArgsFailed(e, error);
  }
  const std::string& out = args.out;
  const std::optional<std::string>& gnuplot = args.gnuplot;  // absent: none
  in.command = args.command;
  in.setup = args.setup;
  for (const auto& [name, dir] : scenarios) {
    const std::string path = absl::StrCat(dir, "/compare.json");
    absl::StatusOr<std::string> text = ReadFileText(path);
    if (!text.ok()) return Error(std::string(text.status().message()));
    absl::Status st = AddCompareJson(*text, path, name, &in.runs);
    if (!st.ok()) return Error(std::string(st.message()));
  }
  const std::vector<ClaimVerdict> claims = JudgeClaims(in.runs);
  if (gnuplot)
    in.plots = DrawStudyPlots(out, StragglerPlots(in.runs), *gnuplot);
  if (const std::string e = WriteStudyFiles(out, StudyMarkdown(in, claims),
                                            StudyJson(in, claims));
      !e.empty()) {
    return Error(e);
  }
  PrintClaims(claims);
  return 0;
}

int StudyOptimizersMain(int argc, char** argv) {
  OptimizerStudyInputs in;
  std::vector<std::pair<std::string, std::string>> dirs;
  StudyArgsSpec spec;
  spec.input_flag = "--optimizer";
  spec.expected =
      "expected NAME=COMPARE_DIR (NAME the training.optimizer of those runs)";
  spec.add_input = [&](const std::string& name, const std::string& dir) {
    dirs.emplace_back(name, dir);
    return true;
  };
  spec.needs = "study-optimizers needs --out DIR and --optimizer NAME=DIR";
  StudyArgs args;
  std::string error;
  if (StudyArgsError e = ParseStudyArgs(argc, argv, spec, &args, &error);
      e != StudyArgsError::kNone) {
    return StudyArgsFailed(e, error);
  }
  const std::string& out = args.out;
  // Absent: the text plot only.
  const std::optional<std::string>& gnuplot = args.gnuplot;
  in.command = args.command;
  in.setup = args.setup;
  for (const auto& [name, dir] : dirs) {
    const std::string path = absl::StrCat(dir, "/compare.json");
    absl::StatusOr<std::string> text = ReadFileText(path);
    if (!text.ok()) return Error(std::string(text.status().message()));
    OptimizerRuns runs;
    absl::Status st = AddCompareJson(*text, path, name, &runs);
    if (!st.ok()) return Error(std::string(st.message()));
    for (const auto& [mode, mode_runs] : runs[name]) {
      if (!StalenessOfMode(mode)) {
        return Error(absl::StrCat(path, ": mode ", mode,
                                  " is not async:S or async:inf (the "
                                  "optimizers study compares staleness)"));
      }
      auto& all = in.runs[name][mode];
      all.insert(all.end(), mode_runs.begin(), mode_runs.end());
    }
  }
  const std::vector<OptimizerClaim> claims = JudgeOptimizerClaims(in.runs);
  if (gnuplot) {
    in.plots =
        DrawStudyPlots(out, {StepsVsStalenessGnuplot(in.runs)}, *gnuplot);
  }
  if (const std::string e =
          WriteStudyFiles(out, OptimizerStudyMarkdown(in, claims),
                          OptimizerStudyJson(in, claims));
      !e.empty()) {
    return Error(e);
  }
  for (const OptimizerClaim& c : claims) {
    std::printf("%s: %s: %s\n", OptVerdictName(c.verdict), c.id.c_str(),
                c.evidence.c_str());
  }
  return 0;
}

int StudySparseMain(int argc, char** argv) {
  SparseStudyInputs in;
  std::vector<std::pair<int64_t, std::string>> tables;
  StudyArgsSpec spec;
  spec.input_flag = "--table";
  spec.expected =
      "expected ROWS=COMPARE_DIR, ROWS the table's row count (model.buckets, "
      "a positive integer)";
  spec.add_input = [&](const std::string& key, const std::string& dir) {
    int64_t rows = 0;
    if (!absl::SimpleAtoi(key, &rows) || rows <= 0) return false;
    tables.emplace_back(rows, dir);
    return true;
  };
  spec.needs = "study-sparse needs --out DIR and --table ROWS=DIR";
  StudyArgs args;
  std::string error;
  if (StudyArgsError e = ParseStudyArgs(argc, argv, spec, &args, &error);
      e != StudyArgsError::kNone) {
    return StudyArgsFailed(e, error);
  }
  const std::string& out = args.out;
  const std::string gnuplot = args.gnuplot.value_or("");  // "": no plots
  in.command = args.command;
  in.setup = args.setup;
  for (const auto& [rows, dir] : tables) {
    const std::string path = absl::StrCat(dir, "/compare.json");
    absl::StatusOr<std::string> text = ReadFileText(path);
    if (!text.ok()) return Error(std::string(text.status().message()));
    absl::Status st = AddSparseCompare(*text, path, dir, rows, &in.runs);
    if (!st.ok()) return Error(std::string(st.message()));
  }
  const std::vector<SparseClaim> claims = JudgeSparseClaims(in.runs);
  const StudyPlotOutcome plots =
      DrawStudyPlots(out, SparsePlots(in.runs), gnuplot);
  if (const std::string e =
          WriteStudyFiles(out, SparseStudyMarkdown(in, claims, plots),
                          SparseStudyJson(in, claims, plots));
      !e.empty()) {
    return Error(e);
  }
  PrintClaims(claims);
  if (!plots.made) std::printf("plots: none (%s)\n", plots.why_not.c_str());
  return 0;
}

int StudyScalingMain(int argc, char** argv) {
  ScalingInputs in;
  std::vector<std::tuple<std::string, int, std::string>> runs;
  bool have_bytes = false, have_compute = false, have_batch = false,
       have_warmup = false, have_steps = false;
  StudyArgsSpec spec;
  spec.input_flag = "--run";
  spec.expected =
      "expected DESIGN:N=RUN_DIR (DESIGN ps:K or allreduce, N >= 1 workers)";
  spec.add_input = [&](const std::string& key, const std::string& dir) {
    const size_t colon = key.rfind(':');
    int workers = 0;
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(key.substr(colon + 1), &workers) || workers < 1 ||
        !ServersOfDesign(key.substr(0, colon)).ok()) {
      return false;
    }
    runs.emplace_back(key.substr(0, colon), workers, dir);
    return true;
  };
  spec.needs =
      "study-scaling needs --out, --run, --model-bytes, --compute-ms, "
      "--local-batch, --warmup and --steps";
  spec.other = [&](const std::string& n, const std::string& v,
                   std::string* bad) {
    double x = 0;
    int64_t i = 0;
    auto number = [&](bool positive) {
      const bool ok = absl::SimpleAtod(v, &x) && std::isfinite(x) &&
                      (positive ? x > 0 : x >= 0);
      if (!ok) {
        *bad = absl::StrCat(n, ": expected a number ",
                            positive ? "> 0" : ">= 0", ", got '", v, "'");
      }
      return ok;
    };
    auto integer = [&](bool positive) {
      const bool ok = absl::SimpleAtoi(v, &i) && (positive ? i > 0 : i >= 0);
      if (!ok) {
        *bad = absl::StrCat(n, ": expected an integer ",
                            positive ? "> 0" : ">= 0", ", got '", v, "'");
      }
      return ok;
    };
    if (n == "--model-bytes") {
      if (number(true)) in.model.model_bytes = x;
      have_bytes = true;
    } else if (n == "--link-gbit") {
      if (number(true)) in.model.link_bytes_per_s = x * 1e9 / 8;
    } else if (n == "--compute-ms") {
      if (number(false)) in.model.compute_s = x / 1000;
      have_compute = true;
    } else if (n == "--local-batch") {
      if (integer(true)) in.model.local_batch = i;
      have_batch = true;
    } else if (n == "--warmup") {
      if (integer(false)) in.model.warmup_steps = i;
      have_warmup = true;
    } else if (n == "--steps") {
      if (integer(true)) in.model.steps = i;
      have_steps = true;
    } else if (n == "--links") {
      in.links = v;
    } else {
      return false;
    }
    return true;
  };
  StudyArgs args;
  std::string error;
  if (StudyArgsError e = ParseStudyArgs(argc, argv, spec, &args, &error);
      e != StudyArgsError::kNone) {
    return StudyArgsFailed(e, error);
  }
  if (!have_bytes || !have_compute || !have_batch || !have_warmup ||
      !have_steps) {
    return Usage(spec.needs);
  }
  const std::string& out = args.out;
  const std::string gnuplot = args.gnuplot.value_or("");  // "": text plot
  in.command = args.command;
  in.setup = args.setup;
  if (in.links.empty()) {
    in.links =
        in.model.link_bytes_per_s ? "shaped links" : "loopback, not shaped";
  }
  for (const auto& [design, workers, dir] : runs) {
    const RunMetrics m = LoadRunMetrics(design, dir, Target{});
    ScalingRun r;
    if (m.failed) {
      r.failed = true;
      r.why = m.message;
    } else {
      absl::StatusOr<double> s = SteadySecondsPerStep(
          m.rows, in.model.warmup_steps, &r.measured_steps);
      if (s.ok()) {
        r.s_per_step = *s;
        r.sent_bytes_per_worker_step = m.bytes_sent_per_worker_step;
      } else {
        r.failed = true;
        r.why = absl::StrCat(dir, ": ", s.status().message());
      }
    }
    in.runs[design][workers].push_back(r);
  }
  const std::vector<ScalingPoint> points = ScalingPoints(in.runs, in.model);
  const std::vector<ScalingClaim> claims = JudgeScalingClaims(points, in.model);

  // The plot: gnuplot when given, else the report's text plot only.
  const std::string plots = absl::StrCat(out, "/plots");
  std::filesystem::create_directories(plots);
  std::string plot_line;
  {
    std::ofstream data(plots + "/efficiency.dat");
    data << ScalingPlotData(points);
    std::ofstream gp(plots + "/plots.gp");
    gp << ScalingPlotScript(points);
    if (!data.flush() || !gp.flush()) {
      return Error(absl::StrCat("cannot write ", plots, "/efficiency.dat"));
    }
  }
  if (gnuplot.empty()) {
    plot_line =
        "gnuplot is not installed (Debian package gnuplot-nox): the text plot "
        "below only; plots/efficiency.dat and plots/plots.gp are there to "
        "draw it later.";
  } else {
    const std::string why = RunGnuplot(plots, gnuplot);
    plot_line =
        why.empty()
            ? "![scaling efficiency vs N](plots/efficiency.png) "
              "(also plots/efficiency.svg)"
            : absl::StrCat("No image: ", why, "; the text plot below only.");
  }
  if (const std::string e =
          WriteStudyFiles(out, ScalingMarkdown(in, points, claims, plot_line),
                          ScalingJson(in, points, claims));
      !e.empty()) {
    return Error(e);
  }
  PrintClaims(claims);
  return 0;
}

int CompareMain(int argc, char** argv) {
  CompareInputs in;
  std::string gnuplot, error;
  std::vector<std::pair<std::string, std::string>> runs;
  std::string bad_value;
  const bool parsed = Options(
      argc, argv, &error, [&](const std::string& n, const std::string& v) {
        double x = 0;
        if (n == "--out") {
          in.out_dir = v;
        } else if (n == "--run") {
          const size_t eq = v.find('=');
          if (eq == std::string::npos || eq == 0 || eq + 1 == v.size()) {
            bad_value = absl::StrCat("--run ", v, ": expected LABEL=RUN_DIR");
          } else {
            runs.emplace_back(v.substr(0, eq), v.substr(eq + 1));
          }
        } else if (n == "--target-accuracy" || n == "--target-loss") {
          const bool acc = n == "--target-accuracy";
          if (!absl::SimpleAtod(v, &x) || !(x > 0) || (acc && x > 1)) {
            bad_value =
                absl::StrCat(n, ": expected a number in ",
                             acc ? "(0, 1]" : "(0, inf)", ", got '", v, "'");
          } else if (in.target.kind != Target::kNone) {
            bad_value = "give one of --target-accuracy and --target-loss";
          } else {
            in.target = {acc ? Target::kAccuracy : Target::kLoss, x};
          }
        } else if (n == "--base-config") {
          in.base_config = v;
        } else if (n == "--shaping") {
          in.shaping = v;
        } else if (n == "--wire-gb-per-s") {
          if (!absl::SimpleAtod(v, &x) || !(x > 0)) {
            bad_value = absl::StrCat(
                "--wire-gb-per-s: expected a rate in GB/s (> 0), got '", v,
                "'");
          } else {
            in.wire_bytes_per_s = x * 1e9;
          }
        } else if (n == "--wire") {
          in.wire = v;
        } else if (n == "--gnuplot") {
          gnuplot = v;
        } else {
          return false;
        }
        return true;
      });
  if (!parsed) return Usage(error);
  if (!bad_value.empty()) return Error(bad_value);
  if (in.out_dir.empty()) return Usage("compare needs --out DIR");
  if (runs.empty())
    return Usage("compare needs at least one --run LABEL=RUN_DIR");
  while (in.out_dir.size() > 1 && in.out_dir.back() == '/')
    in.out_dir.pop_back();
  int failed = 0;
  for (const auto& [label, dir] : runs) {
    ModeRuns* mode = nullptr;
    for (ModeRuns& m : in.modes) {
      if (m.label == label) mode = &m;
    }
    if (mode == nullptr) {
      in.modes.push_back({label, {}});
      mode = &in.modes.back();
    }
    mode->runs.push_back(LoadRunMetrics(label, dir, in.target));
    RunMetrics& run = mode->runs.back();
    run.wire_share = WireShare(
        run.bytes_sent_per_worker_step + run.bytes_received_per_worker_step,
        run.comm_s_per_step, in.wire_bytes_per_s);
    failed += mode->runs.back().failed;
  }
  const PlotOutcome plots = WritePlots(in, gnuplot);
  if (!plots.made)
    std::fprintf(stderr, "ps_report: plots skipped: %s\n",
                 plots.skipped.c_str());
  absl::Status st = WriteReport(in, plots);
  if (!st.ok()) return Error(std::string(st.message()));
  std::fputs(ReportTable(in).c_str(), stdout);
  for (const ModeRuns& m : in.modes) {
    for (const RunMetrics& r : m.runs) {
      if (r.failed)
        std::printf("%s FAILED: %s\n", m.label.c_str(), r.message.c_str());
    }
  }
  return failed ? 1 : 0;
}

// summary.json of a run directory, or the file itself.
absl::StatusOr<std::string> SummaryText(const std::string& where,
                                        std::string* path) {
  *path = where;
  if (std::filesystem::is_directory(where)) *path = where + "/summary.json";
  return ReadFileText(*path);
}

int SummaryGetMain(int argc, char** argv) {
  if (argc != 2) return Usage("summary-get needs RUN_DIR and KEY");
  std::string path;
  absl::StatusOr<std::string> text = SummaryText(argv[0], &path);
  if (!text.ok()) return Error(std::string(text.status().message()));
  absl::StatusOr<std::string> value = SummaryValue(*text, argv[1], path);
  if (!value.ok()) {
    std::fprintf(stderr, "ps_report: %s\n",
                 std::string(value.status().message()).c_str());
    return value.status().code() == absl::StatusCode::kNotFound ? 1 : 2;
  }
  std::printf("%s\n", value->c_str());
  return 0;
}

int MetricsGetMain(int argc, char** argv) {
  if (argc != 2) return Usage("metrics-get needs RUN_DIR and COLUMN");
  std::string path = argv[0];
  if (std::filesystem::is_directory(path)) path += "/metrics.csv";
  absl::StatusOr<std::string> text = ReadFileText(path);
  if (!text.ok()) return Error(std::string(text.status().message()));
  absl::StatusOr<std::vector<MetricsRow>> rows = ParseMetricsCsv(*text, path);
  if (!rows.ok()) return Error(std::string(rows.status().message()));
  const std::string column = argv[1];
  auto num = [](double v) { return absl::StrCat(v); };
  auto opt = [&](const std::optional<double>& v) {
    return v ? num(*v) : std::string();
  };
  const std::map<std::string, std::function<std::string(const MetricsRow&)>>
      columns = {
          {"step", [&](const MetricsRow& r) { return absl::StrCat(r.step); }},
          {"wall_s", [&](const MetricsRow& r) { return num(r.wall_s); }},
          {"loss", [&](const MetricsRow& r) { return opt(r.loss); }},
          {"samples",
           [&](const MetricsRow& r) { return absl::StrCat(r.samples); }},
          {"samples_per_s",
           [&](const MetricsRow& r) { return num(r.samples_per_s); }},
          {"compute_s", [&](const MetricsRow& r) { return num(r.compute_s); }},
          {"pull_s", [&](const MetricsRow& r) { return num(r.pull_s); }},
          {"push_s", [&](const MetricsRow& r) { return num(r.push_s); }},
          {"comm_s", [&](const MetricsRow& r) { return num(r.comm_s); }},
          {"eval_accuracy",
           [&](const MetricsRow& r) { return opt(r.eval_accuracy); }},
          {"eval_loss", [&](const MetricsRow& r) { return opt(r.eval_loss); }},
      };
  auto it = columns.find(column);
  if (it == columns.end()) {
    std::fprintf(stderr, "ps_report: %s: no column '%s'\n", path.c_str(),
                 column.c_str());
    return 1;
  }
  for (const MetricsRow& r : *rows) {
    std::printf("%s\n", it->second(r).c_str());
  }
  return 0;
}

int FailureMain(int argc, char** argv) {
  if (argc != 1) return Usage("failure needs RUN_DIR");
  std::string path;
  absl::StatusOr<std::string> text = SummaryText(argv[0], &path);
  if (!text.ok()) return Error(std::string(text.status().message()));
  absl::StatusOr<RunSummary> summary = ParseSummaryJson(*text, path);
  if (!summary.ok()) return Error(std::string(summary.status().message()));
  if (summary->failure) {
    std::printf("%s\n", DescribeFailure(*summary->failure).c_str());
    return 0;
  }
  if (summary->failed) {
    std::printf("%s\n", summary->message.c_str());
    return 0;
  }
  return 1;
}

int RecordFailureMain(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    return Usage("record-failure needs RUN_DIR, PROCESS and MESSAGE");
  }
  const std::string dir = argv[0];
  RunFailure failure;
  failure.process = argv[1];
  failure.message = argv[2];
  if (failure.process != "coordinator" && failure.process != "server" &&
      failure.process != "worker") {
    return Usage(
        absl::StrCat("record-failure: PROCESS must be coordinator, "
                     "server or worker, got '",
                     failure.process, "'"));
  }
  double wall_s = std::nan("");  // unknown: null
  if (argc == 5) {
    if (std::string(argv[3]) != "--wall-s" ||
        !absl::SimpleAtod(argv[4], &wall_s) || !(wall_s >= 0)) {
      return Usage("record-failure: --wall-s needs a number of seconds >= 0");
    }
  }
  const std::string path = dir + "/summary.json";
  std::error_code exists_error;
  if (std::filesystem::exists(path, exists_error)) {
    absl::StatusOr<std::string> text = ReadFileText(path);
    if (!text.ok()) return Error(std::string(text.status().message()));
    absl::StatusOr<RunSummary> old = ParseSummaryJson(*text, path);
    if (old.ok() && !old->failed) {
      return Error(absl::StrCat(path, " records a finished job; not changed"));
    }
  }
  // The job as its plan wrote it (job.yaml), and the steps that completed
  // (metrics.csv, when there is one): what the coordinator would have said.
  absl::StatusOr<JobConfig> config = LoadJobConfig(dir + "/job.yaml");
  if (!config.ok()) return Error(std::string(config.status().message()));
  const v1::TrainingConfig& t = config->training();
  RunSummary s;
  s.job = config->job().name();
  s.mode = ConfigName(t.mode());
  s.staleness = t.mode() != v1::MODE_ASYNC ? "0"
                : t.staleness() < 0        ? "inf"
                                           : absl::StrCat(t.staleness());
  s.workers = config->job().workers();
  s.servers = t.mode() == v1::MODE_ALLREDUCE ? 0 : config->job().servers();
  s.local_batch = t.local_batch();
  s.global_batch = t.local_batch() * s.workers * t.grad_accum_steps();
  s.wall_s = wall_s;
  s.final_loss = std::nan("");
  s.final_eval_loss = std::nan("");
  absl::StatusOr<std::string> csv = ReadFileText(dir + "/metrics.csv");
  if (csv.ok()) {
    absl::StatusOr<std::vector<MetricsRow>> rows =
        ParseMetricsCsv(*csv, dir + "/metrics.csv");
    if (rows.ok()) {
      for (const MetricsRow& r : *rows) {
        if (!r.loss) continue;  // the final evaluation's row
        s.steps = std::max<int64_t>(s.steps, r.step + 1);
        s.samples += r.samples;
        s.final_loss = *r.loss;
      }
    }
  }
  s.samples_per_s = s.wall_s > 0 ? s.samples / s.wall_s : std::nan("");
  s.failed = true;
  s.message = DescribeFailure(failure);
  s.failure = failure;
  if (absl::Status st = WriteSummaryJson(path, s); !st.ok()) {
    return Error(std::string(st.message()));
  }
  return 0;
}

int ConfigDocMain(int argc, char** argv) {
  std::string file, error;
  if (!Options(argc, argv, &error,
               [&](const std::string& n, const std::string& v) {
                 if (n != "--update") return false;
                 file = v;
                 return true;
               })) {
    return Usage(error);
  }
  const std::string generated = ConfigDocMarkdown(ConfigReference());
  if (file.empty()) {
    std::fputs(generated.c_str(), stdout);
    return 0;
  }
  // `bazel run` starts the binary in its runfiles; the user meant a path
  // from where they typed the command.
  const char* typed_in = std::getenv("BUILD_WORKING_DIRECTORY");
  if (typed_in != nullptr && std::filesystem::path(file).is_relative()) {
    file = (std::filesystem::path(typed_in) / file).string();
  }
  absl::StatusOr<std::string> doc = ReadFileText(file);
  if (!doc.ok()) return Error(std::string(doc.status().message()));
  absl::StatusOr<std::string> updated = UpdateConfigDoc(*doc, generated);
  if (!updated.ok()) {
    return Error(absl::StrCat(file, ": ", updated.status().message()));
  }
  if (*updated == *doc) return 0;
  std::ofstream out(file, std::ios::trunc);
  out << *updated;
  if (!out.flush()) return Error(absl::StrCat("cannot write ", file));
  std::fprintf(stderr, "ps_report: %s: reference regenerated\n", file.c_str());
  return 0;
}

}  // namespace report_cli
}  // namespace pstrain
