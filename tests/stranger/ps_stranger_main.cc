// ps_stranger: a stranger at a job's ports, for soak tests
// (tests/stranger/stranger.h says what it does). Loopback targets only.
//
//   ps_stranger --targets=127.0.0.1:4000,127.0.0.1:4001 --seconds=60
//
// Prints the tally (FormatTally) on stdout. Exit 0 when every call that had
// to be refused was (for a stranger without the token: every call but
// health); 1 naming each method a call of which returned OK instead, or when
// calls did not end after the final cancel; 2 on bad flags.
#include <cstdio>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/job_token.h"
#include "tests/stranger/loopback_target.h"
#include "tests/stranger/stranger.h"

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

absl::StatusOr<StrangerOptions> OptionsFromFlags() {
  StrangerOptions o;
  auto targets = ParseLoopbackTargets(absl::GetFlag(FLAGS_targets));
  if (!targets.ok()) return targets.status();
  o.targets = *std::move(targets);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  if (!(seconds > 0 && seconds <= 3600)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seconds: must be in (0, 3600], got ", seconds));
  }
  o.duration = absl::Seconds(seconds);
  o.max_streams_per_target = absl::GetFlag(FLAGS_max_streams);
  if (o.max_streams_per_target < 1 || o.max_streams_per_target > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_streams: must be 1..1024, got ", o.max_streams_per_target));
  }
  o.actions_per_second = absl::GetFlag(FLAGS_rate);
  if (o.actions_per_second < 1 || o.actions_per_second > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rate: must be 1..10000, got ", o.actions_per_second));
  }
  o.seed = absl::GetFlag(FLAGS_seed);
  if (o.seed == 0) o.seed = std::random_device()();
  const std::string token_file = absl::GetFlag(FLAGS_token_file);
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = ReadJobToken(token_file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file: ", token.status().message()));
    }
    o.token = *std::move(token);
  }
  return o;
}

int Main() {
  absl::StatusOr<StrangerOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "ps_stranger: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  std::printf("ps_stranger: %zu target(s), %.1f s, seed %llu, %s\n",
              options->targets.size(), absl::ToDoubleSeconds(options->duration),
              static_cast<unsigned long long>(options->seed),
              options->token.empty() ? "no token" : "with the job token");
  std::fflush(stdout);
  const absl::Time start = absl::Now();
  absl::StatusOr<StrangerTally> tally = RunStranger(*options);
  if (!tally.ok()) {
    std::fprintf(stderr, "ps_stranger: %s\n",
                 std::string(tally.status().message()).c_str());
    return 2;
  }
  std::printf("%s", FormatTally(*tally).c_str());
  std::printf("ps_stranger: done after %.1f s\n",
              absl::ToDoubleSeconds(absl::Now() - start));
  int rc = 0;
  for (const std::string& method : tally->breaches) {
    std::printf(
        "ps_stranger: BREACH: %s returned OK to a stranger%s\n", method.c_str(),
        options->token.empty() ? " without the token" : " with the token");
    rc = 1;
  }
  if (tally->unfinished != 0) {
    std::printf("ps_stranger: %lld call(s) did not end after the cancel\n",
                static_cast<long long>(tally->unfinished));
    rc = 1;
  }
  std::fflush(stdout);
  return rc;
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
