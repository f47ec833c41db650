#include "tools/report/compare_report.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/report/plots.h"
#include "tools/report/run_metrics.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A run directory as psctl compare leaves it.
struct FakeRun {
  std::string mode = "sync";
  int workers = 2;
  int servers = 2;
  int steps = 10;
  double wall_s = 2.0;
  std::string histogram = "[40]";
  int staleness_max = 0;
  double barrier_wait_s = 0.4;
  double hit_wall_s = 1.0;  // eval accuracy 0.9 at step hit_step
  int hit_step = 5;
  double final_eval_accuracy = 0.93;  // the last row's evaluation
  bool lr_scaled = false;             // training.async_lr_per_push: scaled
  bool model_clock = false;           // training.clock: model
  std::string status = "ok";
  bool failed = false;
  double compute_ms = 0;
  int straggler_rank = -1;
};

void MakeRun(const fs::path& dir, const FakeRun& r) {
  Write(dir / "status", r.status + "\n");
  Write(dir / "derived.yaml",
        absl::StrCat("job:\n  workers: ", r.workers, "\n  servers: ", r.servers,
                     "\ntraining:\n  mode: ", r.mode, "\n  steps: ", r.steps,
                     r.lr_scaled ? "\n  async_lr_per_push: scaled" : "",
                     r.model_clock ? "\n  clock: model" : "",
                     "\nevaluation:\n  every_steps: 5\nworker:\n  compute_ms: ",
                     r.compute_ms, "\n  straggler_rank: ", r.straggler_rank,
                     "\n  straggler_factor: 3\n"));
  Write(dir / "summary.json",
        absl::StrCat(
            R"({"mode": ")", r.mode, R"(", "staleness": 0, "workers": )",
            r.workers, R"(, "servers": )", r.servers, R"(, "steps": )", r.steps,
            R"(, "global_batch": 64, "wall_s": )", r.wall_s,
            R"(, "samples_per_s": 320, "final_loss": 0.25,
                     "final_eval_loss": 0.3, "final_accuracy": 0.93,
                     "bytes_pushed": 4000, "bytes_pulled": 8000,
                     "staleness_max": )",
            r.staleness_max, R"(, "staleness_histogram": )", r.histogram,
            R"(, "barrier_wait_s": )", r.barrier_wait_s, R"(, "failed": )",
            r.failed ? "true" : "false", R"(, "message": ")",
            r.failed ? "a worker failed: boom" : "", "\"}\n"));
  std::string csv =
      "step,wall_s,loss,samples,samples_per_s,compute_s,pull_s,push_s,"
      "eval_accuracy,eval_loss\n";
  for (int s = 0; s < r.steps; ++s) {
    const double wall = s == r.hit_step ? r.hit_wall_s : 0.1 * (s + 1);
    absl::StrAppend(&csv, s, ",", wall, ",", 1.0 - 0.05 * s,
                    ",64,300,0.01,0.002,0.001,",
                    s == r.hit_step ? "0.9,0.4" : ",", "\n");
  }
  absl::StrAppend(&csv, r.steps, ",", r.wall_s, ",,64,0,0,0.001,0,",
                  r.final_eval_accuracy, ",0.3\n");
  Write(dir / "metrics.csv", csv);
}

class CompareReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = fs::path(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                               : fs::temp_directory_path()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(out_);
    fs::create_directories(out_);
  }

  CompareInputs Inputs(const std::vector<std::pair<std::string, FakeRun>>& runs,
                       Target target = {Target::kAccuracy, 0.9}) {
    CompareInputs in;
    in.out_dir = out_.string();
    in.base_config = "configs/default.yaml";
    in.target = target;
    in.shaping = "loopback, not shaped";
    int k = 0;
    for (const auto& [label, run] : runs) {
      const fs::path dir = out_ / "runs" / absl::StrCat(k++);
      MakeRun(dir, run);
      ModeRuns* mode = nullptr;
      for (ModeRuns& m : in.modes) {
        if (m.label == label) mode = &m;
      }
      if (mode == nullptr) {
        in.modes.push_back({label, {}});
        mode = &in.modes.back();
      }
      mode->runs.push_back(LoadRunMetrics(label, dir.string(), target));
    }
    return in;
  }

  fs::path out_;
};

std::vector<std::string> TableRows(const std::string& table) {
  std::vector<std::string> rows;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    if (absl::StartsWith(line, "| `")) rows.emplace_back(line);
  }
  return rows;
}

TEST_F(CompareReportTest, LoadRunMeasuresOneRun) {
  FakeRun a;
  a.mode = "async";
  a.histogram = "[30, 8, 2]";
  a.staleness_max = 2;
  a.compute_ms = 20;
  a.straggler_rank = 1;
  const CompareInputs in = Inputs({{"async:2", a}});
  const RunMetrics& m = in.modes[0].runs[0];
  ASSERT_FALSE(m.failed) << m.message;
  ASSERT_TRUE(m.target_hit);
  EXPECT_EQ(m.target_hit->step, 5);
  EXPECT_DOUBLE_EQ(m.target_hit->wall_s, 1.0);
  EXPECT_DOUBLE_EQ(m.bytes_sent_per_worker_step, 4000.0 / (2 * 10));
  EXPECT_DOUBLE_EQ(m.bytes_received_per_worker_step, 8000.0 / (2 * 10));
  EXPECT_EQ(m.staleness_p50, 0);
  EXPECT_EQ(m.staleness_p99, 2);
  EXPECT_EQ(m.staleness_max, 2);
  ASSERT_TRUE(m.barrier_wait_share);
  EXPECT_DOUBLE_EQ(*m.barrier_wait_share, 0.4 / (2 * 2 * 2.0));
  ASSERT_TRUE(m.comm_s_per_step);
  EXPECT_NEAR(*m.comm_s_per_step, 0.003, 1e-12);
  // 0.1 s a step after a warm-up of 2 (10 steps); the target row's odd wall
  // time moves two durations, not the median.
  ASSERT_TRUE(m.steady_s_per_step);
  EXPECT_NEAR(*m.steady_s_per_step, 0.1, 1e-12);
  EXPECT_TRUE(m.config_loaded);
  EXPECT_EQ(m.compute_ms, 20);
  EXPECT_EQ(m.straggler_rank, 1);
}

TEST_F(CompareReportTest, FailedRunsKeepTheirReason) {
  FakeRun bad;
  bad.status = "psctl run exited with status 1";
  bad.failed = true;
  FakeRun crashed;
  crashed.failed = true;  // status ok, summary says failed
  const CompareInputs in = Inputs({{"allreduce", bad}, {"sync", crashed}});
  EXPECT_TRUE(in.modes[0].runs[0].failed);
  EXPECT_THAT(in.modes[0].runs[0].message,
              HasSubstr("psctl run exited with status 1; coordinator: a worker "
                        "failed: boom"));
  EXPECT_TRUE(in.modes[1].runs[0].failed);
  EXPECT_EQ(in.modes[1].runs[0].message, "a worker failed: boom");
  const RunMetrics missing =
      LoadRunMetrics("x", (out_ / "nowhere").string(), Target());
  EXPECT_TRUE(missing.failed);
  EXPECT_THAT(missing.message, HasSubstr("summary.json"));
}

TEST_F(CompareReportTest, OneRowPerModeWithMedianAndSpread) {
  FakeRun fast, slow, mid, bad;
  fast.hit_wall_s = 1.0;
  fast.wall_s = 2.0;
  slow.hit_wall_s = 1.4;
  slow.wall_s = 3.0;
  mid.hit_wall_s = 1.2;
  mid.wall_s = 2.5;
  bad.status = "timed out after 600 s";
  const CompareInputs in = Inputs(
      {{"sync", fast}, {"sync", slow}, {"sync", mid}, {"allreduce", bad}});
  const std::string table = ReportTable(in);
  const std::vector<std::string> rows = TableRows(table);
  ASSERT_EQ(rows.size(), 2u) << table;
  EXPECT_THAT(rows[0], HasSubstr("| `sync` | 3/3 | 1.20 (1.00–1.40) | 5 |"));
  EXPECT_THAT(rows[0], HasSubstr("| 2.50 (2.00–3.00) |"));  // wall
  EXPECT_THAT(rows[0], HasSubstr("| 200 B | 400 B |"));     // bytes
  EXPECT_THAT(rows[0], HasSubstr("| 0 | 0 | 0 |"));         // staleness
  EXPECT_THAT(rows[1], HasSubstr("| `allreduce` | 0/1 FAILED | — |"));
  // Same column count in every line of the table.
  const size_t bars = std::count(rows[0].begin(), rows[0].end(), '|');
  EXPECT_EQ(std::count(rows[1].begin(), rows[1].end(), '|'), bars);

  PlotOutcome plots;
  plots.skipped = "gnuplot is not installed";
  const std::string md = ReportMarkdown(in, plots);
  EXPECT_THAT(md, HasSubstr("eval accuracy ≥ 0.9"));
  EXPECT_THAT(md, HasSubstr("median over the runs that succeeded"));
  EXPECT_THAT(md, HasSubstr("barrier_wait_s` / (servers × workers × wall s)"));
  EXPECT_THAT(md, HasSubstr("## Failed runs"));
  EXPECT_THAT(md, HasSubstr("timed out after 600 s"));
  EXPECT_THAT(md, HasSubstr("Skipped: gnuplot is not installed"));
  EXPECT_THAT(md, HasSubstr("real compute"));
  EXPECT_THAT(md, HasSubstr("no straggler"));
  EXPECT_THAT(md, HasSubstr("links: loopback, not shaped"));

  const nlohmann::json j = CompareJson(in, plots);
  ASSERT_EQ(j["modes"].size(), 2u);
  const nlohmann::json& sync = j["modes"][0];
  EXPECT_EQ(sync["mode"], "sync");
  EXPECT_EQ(sync["runs_ok"], 3);
  EXPECT_EQ(sync["target_reached"], 3);
  EXPECT_DOUBLE_EQ(sync["time_to_target_s"]["median"].get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(sync["time_to_target_s"]["min"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(sync["time_to_target_s"]["max"].get<double>(), 1.4);
  for (const char* key :
       {"steps_to_target", "final_loss", "final_accuracy", "samples_per_s",
        "bytes_sent_per_worker_step", "bytes_received_per_worker_step",
        "staleness_p50", "staleness_p99", "staleness_max", "barrier_wait_share",
        "comm_s_per_step", "wall_s", "s_per_step", "steady_s_per_step"}) {
    EXPECT_TRUE(sync.contains(key)) << key;
    EXPECT_TRUE(sync[key].is_object()) << key;
  }
  ASSERT_EQ(sync["repeats"].size(), 3u);
  EXPECT_EQ(j["modes"][1]["failed"], true);
  EXPECT_EQ(j["modes"][1]["repeats"][0]["message"], "timed out after 600 s");
  EXPECT_EQ(j["target"]["metric"], "eval_accuracy");
}

TEST_F(CompareReportTest, TargetNotReachedAndNoTarget) {
  FakeRun r;
  CompareInputs in = Inputs({{"async:inf", r}}, {Target::kAccuracy, 0.99});
  EXPECT_THAT(TableRows(ReportTable(in))[0],
              HasSubstr("| 1/1 | not reached | not reached |"));
  nlohmann::json j = CompareJson(in, PlotOutcome());
  EXPECT_TRUE(j["modes"][0]["time_to_target_s"]["median"].is_null());
  EXPECT_EQ(j["modes"][0]["target_reached"], 0);

  in = Inputs({{"sync", r}}, Target());
  EXPECT_THAT(TableRows(ReportTable(in))[0], HasSubstr("| 1/1 | — | — |"));
  EXPECT_THAT(ReportMarkdown(in, PlotOutcome()), HasSubstr("Target: none"));
}

TEST_F(CompareReportTest, EmulationIsReported) {
  FakeRun r;
  r.compute_ms = 20;
  r.straggler_rank = 1;
  CompareInputs in = Inputs({{"sync", r}});
  in.shaping = "shaped to 1 Gbit/s per process link";
  const std::string md = ReportMarkdown(in, PlotOutcome());
  EXPECT_THAT(md, HasSubstr("emulated compute of 20 ms per step"));
  EXPECT_THAT(md, HasSubstr("straggler: rank 1 computes 3× as long"));
  EXPECT_THAT(md, HasSubstr("links: shaped to 1 Gbit/s"));
}

TEST_F(CompareReportTest, ShareOfTheWire) {
  FakeRun r;
  CompareInputs in = Inputs({{"sync", r}});
  RunMetrics& run = in.modes[0].runs[0];
  ASSERT_FALSE(run.failed) << run.message;
  // Unmeasured wire: the column is empty and the report says so.
  std::string md = ReportMarkdown(in, PlotOutcome());
  EXPECT_THAT(md, HasSubstr("- Wire: not measured"));
  EXPECT_TRUE(CompareJson(in, PlotOutcome())["wire"]["bytes_per_s"].is_null());
  // Measured: share = (sent + received per worker per step) / comm / wire.
  in.wire_bytes_per_s = 1e9;
  in.wire = "iperf3 -l 1M on loopback before the runs";
  ASSERT_TRUE(run.comm_s_per_step);
  run.wire_share = WireShare(
      run.bytes_sent_per_worker_step + run.bytes_received_per_worker_step,
      run.comm_s_per_step, in.wire_bytes_per_s);
  ASSERT_TRUE(run.wire_share);
  md = ReportMarkdown(in, PlotOutcome());
  EXPECT_THAT(md, HasSubstr("- Wire: 1.00 GB/s, iperf3 -l 1M on loopback"));
  EXPECT_THAT(md, HasSubstr("share of wire"));
  const nlohmann::json j = CompareJson(in, PlotOutcome());
  EXPECT_DOUBLE_EQ(j["wire"]["bytes_per_s"].get<double>(), 1e9);
  EXPECT_THAT(j.dump(), HasSubstr("wire_share"));
}

TEST_F(CompareReportTest, PlotsWithoutGnuplotSayWhy) {
  FakeRun a, s;
  a.mode = "async";
  a.histogram = "[30, 8, 2]";
  const CompareInputs in = Inputs({{"sync", s}, {"async:2", a}});
  PlotOutcome plots;
  const std::string script = PlotScript(in, &plots);
  std::vector<std::string> names;
  for (const auto& p : plots.plots) names.push_back(p.second);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "plots/loss_vs_time", "plots/loss_vs_step",
                       "plots/accuracy_vs_time", "plots/staleness_sync",
                       "plots/staleness_async_2"}));
  EXPECT_THAT(script, HasSubstr("'async_2.train.dat' using 2:3"));
  EXPECT_THAT(script, HasSubstr("set output 'loss_vs_time.svg'"));
  EXPECT_THAT(script, HasSubstr("title 'async:2'"));

  plots = WritePlots(in, "");
  EXPECT_FALSE(plots.made);
  EXPECT_THAT(plots.skipped, HasSubstr("gnuplot"));
  EXPECT_TRUE(fs::exists(out_ / "plots" / "plots.gp"));
  EXPECT_TRUE(fs::exists(out_ / "plots" / "async_2.staleness.dat"));

  ASSERT_TRUE(WriteReport(in, plots).ok());
  EXPECT_TRUE(fs::exists(out_ / "report.md"));
  std::ifstream json(out_ / "compare.json");
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j["plots"]["made"], false);
}

TEST_F(CompareReportTest, FailingGnuplotIsReportedNotFatal) {
  FakeRun s;
  const CompareInputs in = Inputs({{"sync", s}});
  const PlotOutcome plots = WritePlots(in, "/bin/false");
  EXPECT_FALSE(plots.made);
  EXPECT_THAT(plots.skipped, HasSubstr("gnuplot failed"));
}

// The two efficiencies, apart, and time to target as their product: the
// README's persistent-straggler case (async needs fewer steps at the same
// s / step) reads as statistical efficiency, a faster mode as hardware.
TEST_F(CompareReportTest, TwoEfficienciesExplainTimeToTarget) {
  FakeRun sync;
  sync.steps = 30;
  sync.wall_s = 3.0;  // 0.1 s / step
  sync.hit_step = 20;
  sync.hit_wall_s = 2.1;
  FakeRun fewer = sync;
  fewer.mode = "async";
  fewer.hit_step = 15;
  fewer.hit_wall_s = 1.6;
  fewer.histogram = "[30, 10, 5]";
  fewer.staleness_max = 2;
  FakeRun faster = fewer;
  faster.wall_s = 1.5;  // 0.05 s / step
  faster.hit_step = 24;
  faster.hit_wall_s = 1.3;
  faster.lr_scaled = true;
  faster.model_clock = true;
  FakeRun never = fewer;
  never.hit_step = 99;  // no evaluation meets the target
  never.final_eval_accuracy = 0.5;
  const CompareInputs in = Inputs({{"sync", sync},
                                   {"async:2", fewer},
                                   {"async:inf:scaled", faster},
                                   {"async:0", never}});
  const std::string table = EfficiencyTable(in);
  const std::vector<std::string> rows = TableRows(table);
  ASSERT_EQ(rows.size(), 4u) << table;
  EXPECT_THAT(table, HasSubstr("| s / step | steady s / step | ms / sample | "
                               "steps to target | "
                               "samples to target | s / step × steps to "
                               "target | measured time to target (s) | "
                               "updates / step | lr per update |"));
  // sync: 0.1 s / step, 20 steps = 1,280 samples, product 2.00, measured
  // 2.10, one update per step at lr.
  EXPECT_THAT(rows[0],
              HasSubstr("| `sync` | 0.1000 | 0.1000 | 1.562 | 20 | 1280 | "
                        "2.00 | 2.10 | 1 | lr (mean of N × B) |"));
  EXPECT_THAT(rows[1],
              HasSubstr("| `async:2` | 0.1000 | 0.1000 | 1.562 | 15 | 960 | "
                        "1.50 | 1.60 | 2 | lr (full) |"));
  EXPECT_THAT(
      rows[2],
      HasSubstr("| `async:inf:scaled` | 0.0500 | 0.1000 | 0.781 | 24 | "
                "1536 | 1.20 | 1.30 | 2 | lr / N (scaled), model clock |"));
  EXPECT_THAT(rows[3], HasSubstr("| not reached | not reached | not reached | "
                                 "not reached |"));
  const std::string why = EfficiencyExplanation(in);
  EXPECT_THAT(why, HasSubstr("- `async:2` beats sync by statistical "
                             "efficiency (fewer steps), not hardware "
                             "efficiency: time to target ×0.75 = hardware "
                             "×1.00 (0.1000 vs 0.1000 s / step) × "
                             "statistical ×0.75 (15 vs 20 steps to target)."));
  EXPECT_THAT(why, HasSubstr("- `async:inf:scaled` beats sync by hardware "
                             "efficiency (faster steps), not statistical "
                             "efficiency: time to target ×0.60 = hardware "
                             "×0.50"));
  EXPECT_THAT(why, HasSubstr("- `async:0`: 0.1000 s / step (sync 0.1000: "
                             "×1.00); steps to target not reached (sync 20)"));
  const std::string md = ReportMarkdown(in, PlotOutcome{});
  EXPECT_THAT(md, HasSubstr("## Two efficiencies"));
  EXPECT_THAT(md, HasSubstr(table));
  EXPECT_THAT(md, HasSubstr(why));
  const nlohmann::json j = CompareJson(in, PlotOutcome{});
  EXPECT_EQ(j["modes"][1]["s_per_step"]["median"], 0.1);
  // faster's wall_s / steps is 0.05 but its metrics.csv steps 0.1 s each.
  EXPECT_NEAR(j["modes"][2]["steady_s_per_step"]["median"].get<double>(), 0.1,
              1e-12);
  EXPECT_NEAR(j["modes"][2]["repeats"][0]["steady_s_per_step"].get<double>(),
              0.1, 1e-12);
  EXPECT_EQ(j["modes"][1]["samples_to_target"]["median"], 960);
  EXPECT_EQ(j["modes"][2]["lr_per_update"], "lr / N (scaled), model clock");
  EXPECT_EQ(j["modes"][2]["updates_per_step"]["median"], 2);
}

TEST_F(CompareReportTest, EfficienciesWithoutATargetSayWhy) {
  const CompareInputs in = Inputs({{"sync", FakeRun{}}}, Target{});
  EXPECT_THAT(EfficiencyExplanation(in), HasSubstr("No target"));
  EXPECT_THAT(EfficiencyTable(in), HasSubstr("| `sync` | 0.2000 |"));
}

}  // namespace
}  // namespace pstrain
