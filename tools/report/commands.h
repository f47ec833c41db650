// ps_report's subcommands (the binary's main only dispatches to them): the
// report side of `psctl compare`.
//
//   ps_report derive-config --base FILE [--set KEY=VALUE]... [--out FILE]
//       the base job file with overrides applied (stdout unless --out);
//       errors name the file and line, or the bad key.
//   ps_report plan --base FILE --modes LIST [--repeats R]
//       [--set KEY=VALUE]... --out DIR
//       the compare plan: for every mode of LIST (sync, async, async:S,
//       async:inf, allreduce) and repeat, a fresh DIR/runs/<name>/ with
//       derived.yaml (the base, the --set overrides, the mode's); then
//       DIR/plan.tsv, one "name<TAB>label" line per run in order. Nothing
//       is written when a mode or override is bad (exit 2, naming it).
//   ps_report compare --out DIR --run LABEL=RUN_DIR [--run ...]
//       [--target-accuracy A | --target-loss L] [--base-config NAME]
//       [--shaping TEXT] [--gnuplot PATH] [--wire-gb-per-s RATE --wire TEXT]
//       reads every run directory (repeats of a mode share its LABEL) and
//       writes DIR/report.md, DIR/compare.json and DIR/plots/; prints the
//       table. Exit status 0, or 1 when some run failed (the report is
//       still written).
//   ps_report summary-get RUN_DIR|summary.json KEY
//       prints one summary.json value (strings bare, null as "null"; a
//       dotted KEY walks into objects: failure.process). Exit 1 when the
//       key is absent, 2 when the file is missing or malformed.
//   ps_report metrics-get RUN_DIR|metrics.csv COLUMN
//       prints COLUMN of every metrics.csv row, one per line (an empty
//       line where the row has no value, e.g. the final evaluation's loss).
//   ps_report failure RUN_DIR|summary.json
//       prints the job's first failure ("worker 2: <message>"); exit 1
//       (printing nothing) when the summary records none.
//   ps_report config-doc [--update FILE]
//       prints the job-config reference rendered from the key table (the
//       generated part of docs/configuration.md, from its marker line on);
//       --update FILE rewrites FILE from its marker line on instead, keeping
//       the text above. A relative FILE is taken from where `bazel run` was
//       started (BUILD_WORKING_DIRECTORY), else the current directory.
//   ps_report study-stragglers --out DIR --scenario NAME=COMPARE_DIR...
//       [--command TEXT] [--setup TEXT] [--gnuplot PATH]
//       psctl study stragglers' report: DIR/report.md and DIR/study.json,
//       each claim's verdict derived from the numbers (straggler_study.h).
//   ps_report study-optimizers --out DIR --optimizer NAME=COMPARE_DIR...
//       [--command TEXT] [--setup TEXT] [--gnuplot PATH]
//       psctl study optimizers' report: DIR/report.md and DIR/study.json,
//       steps to target per optimizer and staleness, a text plot, and the
//       verdicts on momentum and Adam vs SGD (optimizer_study.h).
//       With --gnuplot (a path; empty: not installed) both also draw PNGs
//       under DIR/plots/ (study_plot.h); the optimizers report then shows
//       the image instead of its text plot, or says why there is none.
//   ps_report study-sparse --out DIR --table ROWS=COMPARE_DIR...
//       [--command TEXT] [--setup TEXT] [--gnuplot PATH]
//       psctl study sparse's report: DIR/report.md, DIR/study.json and
//       DIR/plots/ (bytes and steady s / step per table size and mode, and
//       the verdicts; sparse_study.h).
//   ps_report study-scaling --out DIR --run DESIGN:N=RUN_DIR...
//       --model-bytes M --compute-ms C --local-batch B --warmup W --steps T
//       [--link-gbit G] [--links TEXT] [--gnuplot PATH] [--command TEXT]
//       [--setup TEXT]
//       psctl study scaling's report: DIR/report.md, DIR/study.json and
//       DIR/plots/ (efficiency vs N), steady-state s / step per design
//       (ps:K or allreduce) and N beside the analytic model, and the
//       verdicts (scaling_study.h).
//
// Subcommands repeat options (--set, --run), so arguments are parsed here
// rather than with absl flags: "--name value" pairs walked by
// WalkOptionPairs, and the four study commands' shared options (--out,
// --command, --setup, --gnuplot, the repeated input) by one ParseStudyArgs
// (study_args.h).
#ifndef PSTRAIN_TOOLS_REPORT_COMMANDS_H_
#define PSTRAIN_TOOLS_REPORT_COMMANDS_H_

#include <string>

namespace pstrain {
namespace report_cli {

// The usage text above, and its printer: "ps_report: ERROR" and the usage
// on stderr, exit status 2.
extern const char kUsage[];
int Usage(const std::string& error);

// Each takes the arguments after the subcommand and returns the exit status.
int DeriveConfigMain(int argc, char** argv);
int PlanMain(int argc, char** argv);
int CompareMain(int argc, char** argv);
int SummaryGetMain(int argc, char** argv);
int MetricsGetMain(int argc, char** argv);
int FailureMain(int argc, char** argv);
// `record-failure RUN_DIR PROCESS MESSAGE [--wall-s S]`: summary.json for a
// job whose coordinator died before writing one (psctl saw it die): failed,
// its failure {PROCESS, MESSAGE}, the job from RUN_DIR/job.yaml, the steps
// completed from metrics.csv, wall_s S (else null). Refuses (2) to replace a
// summary.json that records a finished job.
int RecordFailureMain(int argc, char** argv);
int ConfigDocMain(int argc, char** argv);
// `study-stragglers --out DIR --scenario NAME=COMPARE_DIR...` (NAME
// persistent, transient or pause; a scenario may be given once per repeat):
// reads each COMPARE_DIR/compare.json, writes DIR/report.md and
// DIR/study.json (tools/report/straggler_study.h) and prints each claim's
// verdict. Exit 2 on a missing or malformed compare.json.
int StudyStragglersMain(int argc, char** argv);
// `study-optimizers --out DIR --optimizer NAME=COMPARE_DIR...` (NAME the
// training.optimizer of that compare's runs, given once per repeat; its
// modes must be async:S or async:inf): reads each COMPARE_DIR/compare.json,
// writes DIR/report.md and DIR/study.json (tools/report/optimizer_study.h)
// and prints each verdict. Exit 2 on a missing or malformed compare.json or
// a mode without a staleness bound.
int StudyOptimizersMain(int argc, char** argv);
// `data-export (--job_spec FILE | --config FILE) --rank R [--steps FROM:TO]
// --out FILE`: rank R's training examples of steps FROM..TO-1 (default the
// whole run) and the whole test set, as worker/data generates them, for a
// Python worker (tools/report/data_export.h has the file layout). The job
// is a serialized pstrain.v1.JobConfig (what GetJob returns) or a YAML job
// file. Exit 2 naming the option or key on bad input; nothing written then.
int DataExportMain(int argc, char** argv);
// `study-sparse --out DIR --table ROWS=COMPARE_DIR...` (ROWS the
// model.buckets of that compare's runs, given once per repeat): reads each
// COMPARE_DIR/compare.json and its runs' metrics.csv, draws the plots with
// --gnuplot (a path; empty or absent: none), writes DIR/report.md and
// DIR/study.json (tools/report/sparse_study.h) and prints each verdict.
// Exit 2 on a bad --table, a missing or malformed compare.json or
// metrics.csv.
int StudySparseMain(int argc, char** argv);
// `study-scaling --out DIR --run DESIGN:N=RUN_DIR... --model-bytes M
// --compute-ms C --local-batch B --warmup W --steps T` (DESIGN ps:K or
// allreduce; a cell given once per repeat; --link-gbit G: the shaped rate,
// absent on loopback): reads each run directory (a failed run, or one too
// short for a steady state, is counted and left out of the medians), writes
// DIR/report.md, DIR/study.json and DIR/plots/ (gnuplot when --gnuplot
// names it) and prints each verdict. Exit 2 on a bad option.
int StudyScalingMain(int argc, char** argv);

}  // namespace report_cli
}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_COMMANDS_H_
