#include "tools/report/study_args.h"

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace report_cli {

bool WalkOptionPairs(
    int argc, char** argv,
    const std::function<bool(const std::string&, const std::string&)>& on,
    std::string* error) {
  for (int i = 0; i < argc; i += 2) {
    const std::string name = argv[i];
    if (i + 1 >= argc) {
      *error = absl::StrCat(name, " needs a value");
      return false;
    }
    if (!on(name, std::string(argv[i + 1]))) {
      *error = absl::StrCat("unknown option '", name, "'");
      return false;
    }
  }
  return true;
}

StudyArgsError ParseStudyArgs(int argc, char** argv, const StudyArgsSpec& spec,
                              StudyArgs* args, std::string* error) {
  std::string bad;
  const bool walked = WalkOptionPairs(
      argc, argv,
      [&](const std::string& n, const std::string& v) {
        if (n == "--out") {
          args->out = v;
        } else if (n == "--command") {
          args->command = v;
        } else if (n == "--setup") {
          args->setup = v;
        } else if (n == "--gnuplot") {
          args->gnuplot = v;
        } else if (n == spec.input_flag) {
          const size_t eq = v.find('=');
          if (eq != std::string::npos && eq > 0 && eq + 1 < v.size() &&
              spec.add_input(v.substr(0, eq), v.substr(eq + 1))) {
            ++args->inputs;
          } else if (bad.empty()) {
            bad = absl::StrCat(spec.input_flag, " ", v, ": ", spec.expected);
          }
        } else {
          std::string other_bad;
          if (!spec.other || !spec.other(n, v, &other_bad)) return false;
          if (bad.empty()) bad = other_bad;
        }
        return true;
      },
      error);
  if (!walked) return StudyArgsError::kUsage;
  if (!bad.empty()) {
    *error = bad;
    return StudyArgsError::kValue;
  }
  if (args->out.empty() || args->inputs == 0) {
    *error = spec.needs;
    return StudyArgsError::kUsage;
  }
  return StudyArgsError::kNone;
}

}  // namespace report_cli
}  // namespace pstrain
