// `psctl study optimizers`: the staleness study of issue 28 (Dai et al.
// 2019, "Toward understanding the impact of staleness in distributed
// machine learning"). Runs of one job per optimizer (sgd, momentum, adam) x
// SSP staleness bound s (modes async:S, psctl compare's grammar), each
// repeated with different data seeds, are summarised as steps to target per
// optimizer and s (median and min-max), drawn as a text plot, and the claim
// "staleness hurts momentum / Adam more than plain SGD" is judged per
// optimizer by code: "supported", "not supported" or "inconclusive", with
// the numbers it rests on and the rule applied.
#ifndef PSTRAIN_TOOLS_REPORT_OPTIMIZER_STUDY_H_
#define PSTRAIN_TOOLS_REPORT_OPTIMIZER_STUDY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "tools/report/straggler_study.h"
#include "tools/report/study_plot.h"

namespace pstrain {

// The optimizers, by training.optimizer name; the baseline is SGD.
inline constexpr char kOptSgd[] = "sgd";
inline constexpr char kOptMomentum[] = "momentum";
inline constexpr char kOptAdam[] = "adam";

// Staleness slows an optimizer "more" at s when its slowdown ratio
// steps(s) / steps(0) is at least this factor times SGD's (and "less" when
// at most SGD's divided by it). Steps to target are multiples of the
// evaluation interval, so one interval more at 20 steps already clears it.
inline constexpr double kOptMargin = 1.10;

// Runs of the study: optimizer -> mode label ("async:0", ..., "async:inf")
// -> runs; the StudyRuns map of straggler_study.h keyed by optimizer. Read
// with AddCompareJson(text, source, optimizer, &runs).
using OptimizerRuns = StudyRuns;

// The staleness bound of a mode label: "async:S" or "async:S:scaled" -> S,
// "async:inf" -> +inf; nullopt for any other label.
std::optional<double> StalenessOfMode(const std::string& mode);

// The verdict on one optimizer against SGD.
enum class OptVerdict { kSupported, kNotSupported, kInconclusive };
const char* OptVerdictName(OptVerdict v);  // "supported", ...

struct OptimizerClaim {
  std::string id;         // "dai-momentum"
  std::string optimizer;  // "momentum"
  std::string statement;  // the claim
  OptVerdict verdict = OptVerdict::kInconclusive;
  std::string evidence;  // the numbers it rests on, and the rule applied
};

// The claim for momentum and for Adam, each against SGD, decided from the
// medians of steps to target (a run that failed is left out; one that did
// not reach the target counts as +inf steps). For every s > 0 both
// optimizers ran, with r(s) = median steps(s) / median steps(0):
//   more at s: r_X(s) >= kOptMargin * r_SGD(s) (or X did not reach the
//              target at s and SGD did);
//   less at s: r_SGD(s) >= kOptMargin * r_X(s) (or the reverse);
//   same otherwise (also when neither reached it).
// Supported: "more" at half or more of those s and "less" at none. Not
// supported: "more" at fewer than half and "less" at none, or "less" and
// never "more". Inconclusive: "more" at some s and "less" at another; or
// X's or SGD's s = 0 runs are missing, all failed, or did not reach the
// target (no baseline); or fewer than two s > 0 values.
std::vector<OptimizerClaim> JudgeOptimizerClaims(const OptimizerRuns& runs);

struct OptimizerStudyInputs {
  std::string command;  // how the study was run
  std::string setup;    // job, optimizers, modes, repeats (one paragraph)
  OptimizerRuns runs;
  // The gnuplot plot (StepsVsStalenessGnuplot, drawn by DrawStudyPlots).
  // Made: the report shows it; otherwise (or nullopt) it shows the text
  // plot, and says why there is no image when the outcome says so.
  std::optional<StudyPlotOutcome> plots;
};

// The gnuplot version of StepsVsStalenessPlot: median steps to target
// against s (categorical axis 0, 1, ..., inf), one series per optimizer,
// with the (min-max) spread; runs that did not reach the target are left
// out (the table shows them).
StudyPlot StepsVsStalenessGnuplot(const OptimizerRuns& runs);

// A text plot of median steps to target against s (columns s = 0, 1, ...,
// inf as they were run), one letter per optimizer (S sgd, M momentum,
// A adam; '*' where several coincide); "not reached" on the top row (^).
std::string StepsVsStalenessPlot(const OptimizerRuns& runs);

std::string OptimizerStudyMarkdown(const OptimizerStudyInputs& in,
                                   const std::vector<OptimizerClaim>& claims);
nlohmann::json OptimizerStudyJson(const OptimizerStudyInputs& in,
                                  const std::vector<OptimizerClaim>& claims);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_OPTIMIZER_STUDY_H_
