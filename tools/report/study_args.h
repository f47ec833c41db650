// ps_report's option walk ("--name value" pairs; subcommands repeat options,
// so no absl flags) and the one parser of the options the four `study-*`
// commands share: --out DIR, --command TEXT, --setup TEXT, --gnuplot PATH and
// the command's repeated input (--scenario NAME=DIR, --optimizer NAME=DIR,
// --table ROWS=DIR, --run DESIGN:N=DIR), whose KEY each command checks; any
// further options go to the command's own callback.
#ifndef PSTRAIN_TOOLS_REPORT_STUDY_ARGS_H_
#define PSTRAIN_TOOLS_REPORT_STUDY_ARGS_H_

#include <functional>
#include <optional>
#include <string>

namespace pstrain {
namespace report_cli {

// Calls on(name, value) for each pair of argv[0..argc). False, with *error
// "NAME needs a value" (a last name without one) or "unknown option 'NAME'"
// (`on` returned false), at the first such; true after the last pair.
bool WalkOptionPairs(
    int argc, char** argv,
    const std::function<bool(const std::string&, const std::string&)>& on,
    std::string* error);

// What a study command's parse found (the command's typed inputs are in
// what its StudyArgsSpec callbacks filled).
struct StudyArgs {
  std::string out;
  std::string command;  // how the study was run (report.md quotes it)
  std::string setup;    // the job and what was varied (one paragraph)
  std::optional<std::string> gnuplot;  // absent: --gnuplot not given
  int inputs = 0;                      // accepted input values
};

struct StudyArgsSpec {
  std::string input_flag;  // "--scenario"
  // The error for a bad input value VALUE is "INPUT_FLAG VALUE: EXPECTED".
  std::string expected;
  // Takes KEY and DIR of a value "KEY=DIR" (split at the first '='; both
  // non-empty); false when KEY is bad.
  std::function<bool(const std::string& key, const std::string& dir)> add_input;
  // The usage error when --out or every input value is missing.
  std::string needs;
  // The command's other options (may be empty: none): false for a name it
  // does not know; sets *bad for a bad value (the first one counts).
  std::function<bool(const std::string& name, const std::string& value,
                     std::string* bad)>
      other;
};

enum class StudyArgsError {
  kNone,
  kUsage,  // unknown option, option without a value, --out or input missing
  kValue,  // a bad value (the first one), named with its option
};

// Parses argv[0..argc) into *args by `spec`; *error says what is wrong
// (usage errors win over bad values, and a missing --out or input is
// reported only when every option and value was good).
StudyArgsError ParseStudyArgs(int argc, char** argv, const StudyArgsSpec& spec,
                              StudyArgs* args, std::string* error);

}  // namespace report_cli
}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_REPORT_STUDY_ARGS_H_
