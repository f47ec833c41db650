#include "tests/stranger/stranger_cli.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_token.h"
#include "tests/stranger/loopback_target.h"

namespace pstrain {
namespace stranger {

absl::StatusOr<StrangerOptions> StrangerOptionsFromFlags(
    const StrangerFlags& flags) {
  StrangerOptions o;
  absl::StatusOr<std::vector<LoopbackTarget>> targets =
      ParseLoopbackTargets(flags.targets);
  if (!targets.ok()) return targets.status();
  o.targets = *std::move(targets);
  if (!(flags.seconds > 0 && flags.seconds <= 3600)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seconds: must be in (0, 3600], got ", flags.seconds));
  }
  o.duration = absl::Seconds(flags.seconds);
  if (flags.max_streams < 1 || flags.max_streams > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_streams: must be 1..1024, got ", flags.max_streams));
  }
  o.max_streams_per_target = flags.max_streams;
  if (flags.rate < 1 || flags.rate > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rate: must be 1..10000, got ", flags.rate));
  }
  o.actions_per_second = flags.rate;
  o.seed = flags.seed != 0 ? flags.seed : std::random_device()();
  if (!flags.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadJobToken(flags.token_file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file: ", token.status().message()));
    }
    o.token = *std::move(token);
  }
  return o;
}

std::string StartLine(const StrangerOptions& options) {
  return absl::StrFormat(
      "ps_stranger: %d target(s), %.1f s, seed %d, %s", options.targets.size(),
      absl::ToDoubleSeconds(options.duration), options.seed,
      options.token.empty() ? "no token" : "with the job token");
}

StrangerVerdict JudgeTally(const StrangerTally& tally, bool with_token) {
  StrangerVerdict v;
  for (const std::string& method : tally.breaches) {
    absl::StrAppend(
        &v.lines, "ps_stranger: BREACH: ", method, " returned OK to a stranger",
        with_token ? " with the token" : " without the token", "\n");
    v.exit_code = 1;
  }
  if (tally.unfinished != 0) {
    absl::StrAppend(&v.lines, "ps_stranger: ", tally.unfinished,
                    " call(s) did not end after the cancel\n");
    v.exit_code = 1;
  }
  return v;
}

}  // namespace stranger
}  // namespace pstrain
