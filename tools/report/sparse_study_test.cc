#include "tools/report/sparse_study.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

SparseRun MakeRun(double sent, double steady) {
  SparseRun r;
  r.sent_bytes = sent;
  r.received_bytes = sent * 1.2;
  r.s_per_step = steady * 1.1;
  r.steady_s_per_step = steady;
  return r;
}

// Three repeats around `sent` and `steady`.
std::vector<SparseRun> Three(double sent, double steady) {
  return {MakeRun(sent * 0.99, steady * 0.9), MakeRun(sent, steady),
          MakeRun(sent * 1.01, steady * 1.2)};
}

// DDP's runs: computed bytes, as python/pstrain/ddp.py marks them.
std::vector<SparseRun> Computed(std::vector<SparseRun> runs) {
  for (SparseRun& r : runs) r.bytes_computed = true;
  return runs;
}

// Shaped like the real study: the PS flat, dense linear in the rows (plus
// the dense layers), the all-gather about 2.2x the PS, DDP's computed bytes
// the dense ring's; dense and DDP not run at 10^7.
SparseRuns Realistic() {
  SparseRuns runs;
  for (int64_t rows : {10000, 100000, 1000000, 10000000}) {
    runs[rows][kSparsePs] = Three(83e3, 0.15);
    runs[rows][kSparseAllgather] = Three(186e3, 0.16);
    if (rows <= 1000000) {
      runs[rows][kSparseDense] =
          Three(1.5 * 4 * (rows * 16.0 + 8900), 0.12 + rows * 1.2e-6);
      runs[rows][kSparseDdp] =
          Computed(Three(1.5 * 4 * (rows * 16.0 + 8900), 0.2 + rows * 1.5e-6));
    }
  }
  return runs;
}

// A copy: callers pass JudgeSparseClaims' temporary result, so a reference
// into it would dangle.
SparseClaim Find(const std::vector<SparseClaim>& claims,
                 const std::string& id) {
  for (const SparseClaim& c : claims) {
    if (c.id == id) return c;
  }
  ADD_FAILURE() << "no claim " << id;
  return SparseClaim();
}

TEST(SparseStudyTest, RealisticNumbersSupportEveryClaim) {
  const std::vector<SparseClaim> claims = JudgeSparseClaims(Realistic());
  ASSERT_EQ(claims.size(), 8u);
  for (const SparseClaim& c : claims) {
    EXPECT_TRUE(c.supported) << c.id << ": " << c.evidence;
    EXPECT_NE(c.evidence.find("Rule: "), std::string::npos) << c.id;
    EXPECT_NE(c.evidence.find("median"), std::string::npos) << c.id;
  }
  EXPECT_NE(Find(claims, "ps-bytes-flat").evidence.find("10^4: 83.0 kB"),
            std::string::npos);
  EXPECT_NE(Find(claims, "dense-bytes-linear")
                .evidence.find("slope from 10^4 "
                               "to 10^6 rows 0.98"),
            std::string::npos)
      << Find(claims, "dense-bytes-linear").evidence;
}

TEST(SparseStudyTest, PsBytesThatGrowAreNotFlat) {
  SparseRuns runs = Realistic();
  runs[10000000][kSparsePs] = Three(83e3 * 1.11, 0.15);
  const SparseClaim& c = Find(JudgeSparseClaims(runs), "ps-bytes-flat");
  EXPECT_FALSE(c.supported) << c.evidence;
  EXPECT_NE(c.evidence.find("×1.110"), std::string::npos) << c.evidence;
  runs[10000000][kSparsePs] = Three(83e3 * 1.09, 0.15);
  EXPECT_TRUE(Find(JudgeSparseClaims(runs), "ps-bytes-flat").supported);
}

TEST(SparseStudyTest, DenseBytesThatGrowSublinearlyAreNotLinear) {
  SparseRuns runs = Realistic();
  // 10x the bytes over 100x the rows: slope 0.5.
  runs[10000][kSparseDense] = Three(1e6, 0.2);
  runs[1000000][kSparseDense] = Three(1e7, 0.4);
  const SparseClaim& c = Find(JudgeSparseClaims(runs), "dense-bytes-linear");
  EXPECT_FALSE(c.supported);
  EXPECT_NE(c.evidence.find("0.500"), std::string::npos) << c.evidence;
}

TEST(SparseStudyTest, AllgatherAboveTheFactorAtOneSizeIsNotNear) {
  SparseRuns runs = Realistic();
  runs[100000][kSparseAllgather] = Three(83e3 * 3.2, 0.16);
  const SparseClaim& c =
      Find(JudgeSparseClaims(runs), "allgather-bytes-near-ps");
  EXPECT_FALSE(c.supported);
  EXPECT_NE(c.evidence.find("above ×3.0 at 10^5"), std::string::npos)
      << c.evidence;
}

TEST(SparseStudyTest, TimeClaimsFollowTheSteadyTimes) {
  SparseRuns runs = Realistic();
  runs[10000000][kSparsePs] = Three(83e3, 0.15 * 1.6);  // grew 1.6x
  runs[1000000][kSparseDense] = Three(96e6, 0.25);      // < 2x the PS
  runs[10000][kSparseAllgather] = Three(186e3, 0.3);    // 2x the PS
  const std::vector<SparseClaim> claims = JudgeSparseClaims(runs);
  EXPECT_FALSE(Find(claims, "ps-time-flat").supported);
  EXPECT_FALSE(Find(claims, "dense-time-grows").supported);
  EXPECT_FALSE(Find(claims, "allgather-time-near-ps").supported);
  EXPECT_NE(Find(claims, "allgather-time-near-ps").evidence.find("at 10^4"),
            std::string::npos);
}

TEST(SparseStudyTest, DdpBytesAwayFromTheDenseRingAreNotLikeIt) {
  SparseRuns runs = Realistic();
  const SparseClaim ok = Find(JudgeSparseClaims(runs), "ddp-bytes-like-dense");
  EXPECT_TRUE(ok.supported) << ok.evidence;
  EXPECT_NE(ok.evidence.find("`ddp`'s bytes are computed"), std::string::npos)
      << ok.evidence;
  runs[100000][kSparseDdp] = Computed(Three(1.3 * 9.65e6, 0.4));
  SparseClaim c = Find(JudgeSparseClaims(runs), "ddp-bytes-like-dense");
  EXPECT_FALSE(c.supported);
  EXPECT_NE(c.evidence.find("outside [×0.80, ×1.25] at 10^5"),
            std::string::npos)
      << c.evidence;
  // Too few bytes fail too (the rule is two-sided); counted bytes are not
  // called computed.
  runs[100000][kSparseDdp] = Three(0.7 * 9.65e6, 0.4);
  for (auto& [rows, modes] : runs) {
    auto m = modes.find(kSparseDdp);
    if (m == modes.end()) continue;
    for (SparseRun& r : m->second) r.bytes_computed = false;
  }
  c = Find(JudgeSparseClaims(runs), "ddp-bytes-like-dense");
  EXPECT_FALSE(c.supported);
  EXPECT_EQ(c.evidence.find("computed"), std::string::npos) << c.evidence;
}

TEST(SparseStudyTest, DdpTimeBelowTwiceThePsDoesNotGrow) {
  SparseRuns runs = Realistic();
  const SparseClaim ok = Find(JudgeSparseClaims(runs), "ddp-time-grows");
  EXPECT_TRUE(ok.supported) << ok.evidence;
  EXPECT_NE(ok.evidence.find("at 10^6 rows ×11.33 `sync`'s"), std::string::npos)
      << ok.evidence;
  runs[1000000][kSparseDdp] = Computed(Three(96e6, 0.15 * 1.9));
  const SparseClaim c = Find(JudgeSparseClaims(runs), "ddp-time-grows");
  EXPECT_FALSE(c.supported);
  EXPECT_NE(c.evidence.find("×1.90 `sync`'s"), std::string::npos) << c.evidence;
}

TEST(SparseStudyTest, FailedRunsAreLeftOutOfTheMedians) {
  SparseRuns runs = Realistic();
  SparseRun failed;
  failed.failed = true;  // its zero bytes must not pull the median down
  runs[10000000][kSparsePs] = {MakeRun(83e3, 0.15), failed, failed};
  EXPECT_TRUE(Find(JudgeSparseClaims(runs), "ps-bytes-flat").supported);
}

TEST(SparseStudyTest, MissingDataIsNotSupportedAndSaysWhat) {
  SparseRuns runs = Realistic();
  for (auto& [rows, modes] : runs) modes.erase(kSparseDense);
  const std::vector<SparseClaim> claims = JudgeSparseClaims(runs);
  for (const char* id : {"dense-bytes-linear", "dense-time-grows"}) {
    const SparseClaim& c = Find(claims, id);
    EXPECT_FALSE(c.supported);
    EXPECT_NE(c.evidence.find("not supported for lack of data: "
                              "`allreduce:dense`"),
              std::string::npos)
        << c.evidence;
  }
  EXPECT_TRUE(Find(claims, "ps-bytes-flat").supported);
  // No PyTorch: the ddp claims say `ddp` is missing.
  SparseRuns no_ddp = Realistic();
  for (auto& [rows, modes] : no_ddp) modes.erase(kSparseDdp);
  const std::vector<SparseClaim> without = JudgeSparseClaims(no_ddp);
  for (const char* id : {"ddp-bytes-like-dense", "ddp-time-grows"}) {
    const SparseClaim& c = Find(without, id);
    EXPECT_FALSE(c.supported);
    EXPECT_NE(c.evidence.find("not supported for lack of data: "),
              std::string::npos)
        << c.evidence;
    EXPECT_NE(c.evidence.find("`ddp`"), std::string::npos) << c.evidence;
  }
  const std::vector<SparseClaim> none = JudgeSparseClaims({});
  ASSERT_EQ(none.size(), 8u);
  for (const SparseClaim& c : none) {
    EXPECT_FALSE(c.supported) << c.id;
    EXPECT_NE(c.evidence.find("lack of data"), std::string::npos) << c.id;
  }
}

MetricsRow Row(int64_t step, double wall, bool training = true) {
  MetricsRow r;
  r.step = step;
  r.wall_s = wall;
  if (training) r.loss = 1.0;
  return r;
}

TEST(SparseStudyTest, SteadyTimeLeavesOutTheFirstStepAndTheFinalEvaluation) {
  // Step 0 took 10 s (allocation); steps 1..4 take 0.5 s each; the final
  // evaluation row (no loss) comes 3 s later.
  std::vector<MetricsRow> rows = {Row(3, 11.5), Row(0, 10), Row(1, 10.5),
                                  Row(2, 11),   Row(4, 12), Row(4, 15, false)};
  std::optional<double> s = SteadySecondsPerStep(rows);
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ(*s, 0.5);
  EXPECT_FALSE(SteadySecondsPerStep({Row(0, 1), Row(1, 2)}).has_value());
}

std::string TempDir() {
  std::string tmpl = std::string(std::getenv("TEST_TMPDIR")) + "/sparseXXXXXX";
  return ::mkdtemp(tmpl.data());
}

TEST(SparseStudyTest, ReadsCompareJsonAndEachRunsMetrics) {
  const std::string dir = TempDir();
  std::filesystem::create_directories(dir + "/runs/sync");
  {
    std::ofstream csv(dir + "/runs/sync/metrics.csv");
    csv << MetricsCsvHeader();
    for (const MetricsRow& r :
         {Row(0, 5), Row(1, 6), Row(2, 6.25), Row(3, 6.5)})
      csv << FormatMetricsRow(r);
  }
  // The ddp run: the same metrics, and a summary.json that says its bytes
  // are computed.
  std::filesystem::create_directories(dir + "/runs/ddp");
  std::filesystem::copy_file(dir + "/runs/sync/metrics.csv",
                             dir + "/runs/ddp/metrics.csv");
  std::ofstream(dir + "/runs/ddp/summary.json")
      << R"({"mode": "ddp", "bytes_computed": true})";
  const std::string json = R"({"modes": [
    {"mode": "sync", "repeats": [
      {"dir": "runs/sync", "failed": false, "bytes_sent_per_worker_step": 83000,
       "bytes_received_per_worker_step": 99000, "s_per_step": 1.6}]},
    {"mode": "ddp", "repeats": [
      {"dir": "runs/ddp", "failed": false, "bytes_sent_per_worker_step": 1500,
       "bytes_received_per_worker_step": 1500, "s_per_step": 1.6}]},
    {"mode": "allreduce:dense", "repeats": [
      {"dir": "runs/dense", "failed": true, "message": "out of memory"}]}]})";
  SparseRuns runs;
  ASSERT_TRUE(AddSparseCompare(json, "c.json", dir, 1000, &runs).ok());
  ASSERT_EQ(runs[1000][kSparsePs].size(), 1u);
  const SparseRun& r = runs[1000][kSparsePs][0];
  EXPECT_EQ(r.sent_bytes, 83000);
  EXPECT_EQ(r.received_bytes, 99000);
  EXPECT_EQ(r.s_per_step, 1.6);
  ASSERT_TRUE(r.steady_s_per_step.has_value());
  EXPECT_DOUBLE_EQ(*r.steady_s_per_step, 0.25);
  EXPECT_FALSE(r.bytes_computed);  // no summary.json: counted
  ASSERT_EQ(runs[1000][kSparseDdp].size(), 1u);
  EXPECT_TRUE(runs[1000][kSparseDdp][0].bytes_computed);
  EXPECT_EQ(runs[1000][kSparseDdp][0].sent_bytes, 1500);
  ASSERT_EQ(runs[1000][kSparseDense].size(), 1u);
  EXPECT_TRUE(runs[1000][kSparseDense][0].failed);
}

TEST(SparseStudyTest, BadInputIsRejectedWithItsSource) {
  SparseRuns runs;
  absl::Status st = AddSparseCompare("{", "a/compare.json", "a", 10, &runs);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("a/compare.json: not a compare.json"),
            std::string::npos);
  st = AddSparseCompare(
      R"({"modes": [{"mode": "sync", "repeats": [{"failed": false}]}]})",
      "b/compare.json", "b", 10, &runs);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("b/compare.json: mode sync: a run without"),
            std::string::npos);
  st = AddSparseCompare(
      R"({"modes": [{"mode": "sync", "repeats": [{"failed": false,
          "dir": "runs/x", "bytes_sent_per_worker_step": 1,
          "bytes_received_per_worker_step": 1, "s_per_step": 1}]}]})",
      "c/compare.json", "/nonexistent-dir", 10, &runs);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("/nonexistent-dir/runs/x/metrics.csv"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(runs.empty());
}

TEST(SparseStudyTest, ReportHasTheTableVerdictsAndNotRunCells) {
  SparseStudyInputs in{"./psctl study sparse", "Setup.", Realistic()};
  const std::vector<SparseClaim> claims = JudgeSparseClaims(in.runs);
  StudyPlotOutcome plots;
  plots.why_not = "gnuplot is not installed";
  const std::string md = SparseStudyMarkdown(in, claims, plots);
  EXPECT_NE(md.find("| 10^7 | `allreduce:dense` | not run |"),
            std::string::npos);
  EXPECT_NE(md.find("| 10^7 | `ddp` | not run |"), std::string::npos);
  EXPECT_NE(md.find("| 10^4 | `ddp` | 3/3 | 1.01 MB (1.00 MB–1.02 MB) "
                    "(computed) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 10^4 | `sync` | 3/3 | 83.0 kB (82.2 kB–83.8 kB) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("- **supported** — The parameter server's bytes"),
            std::string::npos);
  EXPECT_NE(md.find("No gnuplot plots: gnuplot is not installed"),
            std::string::npos);
  const nlohmann::json j = SparseStudyJson(in, claims, plots);
  EXPECT_EQ(j["claims"].size(), 8u);
  EXPECT_EQ(j["claims"][0]["verdict"], "supported");
  EXPECT_EQ(j["plots"]["made"], false);
  // 4 + 4 + 3 + 3 (dense and ddp not at 10^7).
  ASSERT_EQ(j["results"].size(), 14u);
  for (const nlohmann::json& r : j["results"]) {
    EXPECT_EQ(r["bytes_computed"].get<bool>(),
              r["mode"].get<std::string>() == kSparseDdp)
        << r.dump();
  }
}

TEST(SparseStudyTest, PlotsAreLogLogWithOneSeriesPerMode) {
  const std::vector<StudyPlot> plots = SparsePlots(Realistic());
  ASSERT_EQ(plots.size(), 2u);
  for (const StudyPlot& p : plots) {
    EXPECT_TRUE(p.log_x && p.log_y) << p.name;
    ASSERT_EQ(p.series.size(), 4u);
    EXPECT_EQ(p.series[0].points.size(), 4u);  // sync
    EXPECT_EQ(p.series[2].points.size(), 3u);  // dense, not at 10^7
    EXPECT_EQ(p.series[3].points.size(), 3u);  // ddp, not at 10^7
  }
  EXPECT_EQ(plots[0].series[0].points[0].median, 83e3);
  EXPECT_EQ(plots[0].series[0].points[0].min, 83e3 * 0.99);
}

}  // namespace
}  // namespace pstrain
