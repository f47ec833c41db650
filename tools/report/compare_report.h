// The outputs of `psctl compare`: report.md (one table, one row per mode,
// the definitions, failed runs, plot links) and compare.json (the same
// numbers). Plots are made by tools/report/plots.h.
#ifndef PSTRAIN_TOOLS_REPORT_COMPARE_REPORT_H_
#define PSTRAIN_TOOLS_REPORT_COMPARE_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "tools/report/report_math.h"
#include "tools/report/run_metrics.h"

namespace pstrain {

// The repeats of one mode, in the order they ran.
struct ModeRuns {
  std::string label;  // "sync", "async:2", "allreduce"
  std::vector<RunMetrics> runs;
};

struct CompareInputs {
  std::string out_dir;      // report.md links are relative to it
  std::string base_config;  // the job file every run derives from
  Target target;
  std::string shaping;  // one line on link shaping, e.g. "none (loopback)"
  // The wire every run is compared with (bytes per second; 0: unknown) and
  // how it was measured, e.g. "iperf3 -l 1M on loopback before the runs".
  double wire_bytes_per_s = 0;
  std::string wire;
  std::vector<ModeRuns> modes;
};

struct PlotOutcome {
  bool made = false;
  std::string skipped;  // why not, when !made
  // (title, path relative to out_dir without extension); each has .png and
  // .svg.
  std::vector<std::pair<std::string, std::string>> plots;
};

// The markdown table alone (also what psctl prints).
std::string ReportTable(const CompareInputs& in);
// The two efficiencies per mode (hardware: s / step, ms / sample;
// statistical: steps and samples to target; their product; updates per step
// and the learning rate of an update), and one line per mode decomposing its
// time to target against `sync`'s into the two ratios.
std::string EfficiencyTable(const CompareInputs& in);
std::string EfficiencyExplanation(const CompareInputs& in);
std::string ReportMarkdown(const CompareInputs& in, const PlotOutcome& plots);
nlohmann::json CompareJson(const CompareInputs& in, const PlotOutcome& plots);

// Writes out_dir/report.md and out_dir/compare.json.
absl::Status WriteReport(const CompareInputs& in, const PlotOutcome& plots);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_COMPARE_REPORT_H_
