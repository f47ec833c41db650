// ps_report: the report side of `psctl compare`; the subcommands and their
// usage are in tools/report/commands.h.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/report/commands.h"

int main(int argc, char** argv) {
  if (argc < 2) return pstrain::report_cli::Usage("no subcommand");
  const std::string sub = argv[1];
  if (sub == "derive-config")
    return pstrain::report_cli::DeriveConfigMain(argc - 2, argv + 2);
  if (sub == "plan") return pstrain::report_cli::PlanMain(argc - 2, argv + 2);
  if (sub == "compare")
    return pstrain::report_cli::CompareMain(argc - 2, argv + 2);
  if (sub == "summary-get")
    return pstrain::report_cli::SummaryGetMain(argc - 2, argv + 2);
  if (sub == "metrics-get")
    return pstrain::report_cli::MetricsGetMain(argc - 2, argv + 2);
  if (sub == "failure")
    return pstrain::report_cli::FailureMain(argc - 2, argv + 2);
  if (sub == "record-failure")
    return pstrain::report_cli::RecordFailureMain(argc - 2, argv + 2);
  if (sub == "config-doc")
    return pstrain::report_cli::ConfigDocMain(argc - 2, argv + 2);
  if (sub == "study-stragglers")
    return pstrain::report_cli::StudyStragglersMain(argc - 2, argv + 2);
  if (sub == "study-optimizers")
    return pstrain::report_cli::StudyOptimizersMain(argc - 2, argv + 2);
  if (sub == "data-export")
    return pstrain::report_cli::DataExportMain(argc - 2, argv + 2);
  if (sub == "study-sparse")
    return pstrain::report_cli::StudySparseMain(argc - 2, argv + 2);
  if (sub == "study-scaling")
    return pstrain::report_cli::StudyScalingMain(argc - 2, argv + 2);
  if (sub == "-h" || sub == "--help" || sub == "help") {
    std::fputs(pstrain::report_cli::kUsage, stdout);
    return 0;
  }
  return pstrain::report_cli::Usage(
      absl::StrCat("unknown subcommand '", sub, "'"));
}
