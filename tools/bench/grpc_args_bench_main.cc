// grpc_args_bench: gRPC's bare upload or download with one HTTP/2 setting
// changed at a time (tools/bench/grpc_args.h).
//
//   bazel run -c opt //tools/bench:grpc_args_bench -- --rounds 5 --steps 20
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tools/bench/grpc_args.h"

ABSL_FLAG(int, rounds, 3, "interleaved rounds (every variant once each)");
ABSL_FLAG(int, steps, 20, "warm transfers per variant and size per round");
ABSL_FLAG(std::string, sizes_mb, "4,16,64", "transfer sizes in decimal MB");
ABSL_FLAG(bool, download, false,
          "downloads (server to client) instead of uploads");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  pstrain::bench::GrpcArgsBenchOptions options;
  options.rounds = absl::GetFlag(FLAGS_rounds);
  options.steps = absl::GetFlag(FLAGS_steps);
  options.download = absl::GetFlag(FLAGS_download);
  options.sizes_mb.clear();
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes_mb), ',')) {
    int mb = 0;
    if (!absl::SimpleAtoi(s, &mb) || mb < 1) {
      std::fprintf(stderr,
                   "grpc_args_bench: --sizes_mb: '%s' is not a positive "
                   "number of MB\n",
                   std::string(s).c_str());
      return 2;
    }
    options.sizes_mb.push_back(mb);
  }
  absl::StatusOr<std::string> table = pstrain::bench::RunGrpcArgsBench(
      options, pstrain::bench::GrpcArgsVariants());
  if (!table.ok()) {
    std::fprintf(stderr, "grpc_args_bench: %s\n",
                 table.status().ToString().c_str());
    return table.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::fputs(table->c_str(), stdout);
  return 0;
}
