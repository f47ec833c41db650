// ps_stranger: a stranger at a job's ports, for soak tests
// (tests/stranger/stranger.h says what it does). Loopback targets only.
//
//   ps_stranger --targets=127.0.0.1:4000,127.0.0.1:4001 --seconds=60
//
// flags -> StrangerOptionsFromFlags -> RunStranger -> JudgeTally
// (stranger_cli.h). Prints the tally (FormatTally) on stdout. Exit 0 when
// every call that had to be refused was (for a stranger without the token:
// every call but health); 1 naming each method a call of which returned OK
// instead, or when calls did not end after the final cancel; 2 on bad flags.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/stranger/stranger.h"
#include "tests/stranger/stranger_cli.h"

ABSL_FLAG(std::string, targets, "",
          "comma-separated host:port list; hosts 127.0.0.1, localhost or "
          "[::1] only");
ABSL_FLAG(double, seconds, 60, "how long to act (0 < seconds <= 3600)");
ABSL_FLAG(std::string, token_file, "",
          "present this job token (a stranger normally has none)");
ABSL_FLAG(int, max_streams, 64, "calls open at once per target (1..1024)");
ABSL_FLAG(int, rate, 100, "actions per second per target (1..10000)");
ABSL_FLAG(uint64_t, seed, 0, "what is chosen and made up; 0: random");

namespace pstrain {
namespace stranger {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ps_stranger: %s\n",
               std::string(status.message()).c_str());
  return 2;
}

int Main() {
  StrangerFlags flags;
  flags.targets = absl::GetFlag(FLAGS_targets);
  flags.seconds = absl::GetFlag(FLAGS_seconds);
  flags.max_streams = absl::GetFlag(FLAGS_max_streams);
  flags.rate = absl::GetFlag(FLAGS_rate);
  flags.seed = absl::GetFlag(FLAGS_seed);
  flags.token_file = absl::GetFlag(FLAGS_token_file);
  absl::StatusOr<StrangerOptions> options = StrangerOptionsFromFlags(flags);
  if (!options.ok()) return Fail(options.status());
  std::printf("%s\n", StartLine(*options).c_str());
  std::fflush(stdout);
  const absl::Time start = absl::Now();
  absl::StatusOr<StrangerTally> tally = RunStranger(*options);
  if (!tally.ok()) return Fail(tally.status());
  std::printf("%s", FormatTally(*tally).c_str());
  std::printf("ps_stranger: done after %.1f s\n",
              absl::ToDoubleSeconds(absl::Now() - start));
  const StrangerVerdict verdict =
      JudgeTally(*tally, /*with_token=*/!options->token.empty());
  std::printf("%s", verdict.lines.c_str());
  std::fflush(stdout);
  return verdict.exit_code;
}

}  // namespace
}  // namespace stranger
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "a stranger at a job's loopback ports, for soak tests.\nUsage: "
      "ps_stranger --targets=127.0.0.1:PORT,... --seconds=S [flags]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::stranger::Main();
}
