// `psctl study stragglers`: the straggler study of issue 28. Runs of the
// same job under three straggler models (persistent, transient, a one-time
// pause) x the modes below, each repeated with different data seeds, are
// summarised per scenario and mode (median and min-max), and the claims of
// Ho et al. 2013 (SSP) and Chen et al. 2016 (backup workers) are checked
// against the numbers by code: each is printed "supported" or "not
// supported" with the figures it rests on, never by hand.
#ifndef PSTRAIN_TOOLS_REPORT_STRAGGLER_STUDY_H_
#define PSTRAIN_TOOLS_REPORT_STRAGGLER_STUDY_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tools/report/report_math.h"
#include "tools/report/study_plot.h"

namespace pstrain {

// The modes the study runs (psctl compare's grammar): BSP, BSP with one
// backup worker, SSP s = 2 and unbounded async at sync's learning rate per
// sample, and SSP s = 2 at the full rate per push (the update-count
// confound of the README's old straggler result).
inline constexpr char kStudySync[] = "sync";
inline constexpr char kStudyBackup[] = "backup:1";
inline constexpr char kStudySsp[] = "async:2:scaled";
inline constexpr char kStudyAsync[] = "async:inf:scaled";
inline constexpr char kStudySspFullLr[] = "async:2";
inline constexpr char kStudyModes[] =
    "sync,backup:1,async:2:scaled,async:inf:scaled,async:2";

// The scenarios, by name: persistent, transient, pause.
inline constexpr char kPersistent[] = "persistent";
inline constexpr char kTransient[] = "transient";
inline constexpr char kPause[] = "pause";

// A relative difference below this is "little" (10%).
inline constexpr double kLittle = 0.10;

// One run's figures, from compare.json. steps / time to target are +inf
// when the run did not reach the target.
struct StudyRun {
  bool failed = false;
  double s_per_step = 0;
  double samples_per_s = 0;
  double steps_to_target = 0;
  double time_to_target_s = 0;
  std::optional<double> staleness_max;
  bool model_clock = false;  // async on training.clock model
};

// scenario -> mode label -> runs (every repeat of every compare).
using StudyRuns =
    std::map<std::string, std::map<std::string, std::vector<StudyRun>>>;

// Adds the runs of one compare.json text (named `source` in errors) to
// `runs[scenario]`. INVALID_ARGUMENT for malformed JSON or a mode without
// its figures.
absl::Status AddCompareJson(const std::string& text, const std::string& source,
                            const std::string& scenario, StudyRuns* runs);

struct ClaimVerdict {
  std::string id;         // "ho-transient"
  std::string source;     // "Ho et al. 2013"
  std::string statement;  // the claim
  std::string scenario;
  bool supported = false;
  std::string evidence;  // the numbers it rests on, and the rule applied
};

// The claims, each decided from the medians of `runs`.
std::vector<ClaimVerdict> JudgeClaims(const StudyRuns& runs);

struct StudyInputs {
  std::string command;  // how the study was run
  std::string setup;    // job, emulation, links, repeats (one paragraph)
  StudyRuns runs;
  // The gnuplot plots (StragglerPlots, drawn by DrawStudyPlots); nullopt:
  // the report has no plot section.
  std::optional<StudyPlotOutcome> plots;
};

// Two plots over the modes (x) with one series per scenario: median s /
// step (hardware efficiency) and median time to target (runs that did not
// reach it are left out), each with its (min-max) spread.
std::vector<StudyPlot> StragglerPlots(const StudyRuns& runs);

std::string StudyMarkdown(const StudyInputs& in,
                          const std::vector<ClaimVerdict>& claims);
nlohmann::json StudyJson(const StudyInputs& in,
                         const std::vector<ClaimVerdict>& claims);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_STRAGGLER_STUDY_H_
