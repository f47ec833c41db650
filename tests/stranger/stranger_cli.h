// ps_stranger's command line (ps_stranger_main.cc is flags -> these): the
// flags' values checked into StrangerOptions, and what the binary prints
// and returns for a finished run.
#ifndef PSTRAIN_TESTS_STRANGER_STRANGER_CLI_H_
#define PSTRAIN_TESTS_STRANGER_STRANGER_CLI_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/stranger/stranger.h"

namespace pstrain {
namespace stranger {

// The flags' values, as given (defaults: ps_stranger_main.cc's flags).
struct StrangerFlags {
  std::string targets;     // --targets: loopback host:port list
  double seconds = 60;     // --seconds: (0, 3600]
  int max_streams = 64;    // --max_streams: 1..1024
  int rate = 100;          // --rate: actions per second per target, 1..10000
  uint64_t seed = 0;       // --seed: 0 draws one from std::random_device
  std::string token_file;  // --token_file: "" presents no token
};

// The options the flags ask for. INVALID_ARGUMENT naming the flag
// ("--seconds: must be in (0, 3600], got 0") for a value out of range, a
// target list ParseLoopbackTargets refuses, or a token file that cannot be
// read (ReadJobToken); checked in the order of StrangerFlags.
absl::StatusOr<StrangerOptions> StrangerOptionsFromFlags(
    const StrangerFlags& flags);

// The line said before the run: "ps_stranger: N target(s), S s, seed X, no
// token|with the job token".
std::string StartLine(const StrangerOptions& options);

// A finished run's verdict: its lines (after the tally and the time, which
// ps_stranger_main prints) and exit status. 0 when every call that had to be
// refused was and every call ended; else 1, with "ps_stranger: BREACH: M
// returned OK to a stranger with(out) the token" for each breached method
// and "ps_stranger: N call(s) did not end after the cancel".
struct StrangerVerdict {
  std::string lines;
  int exit_code = 0;
};
StrangerVerdict JudgeTally(const StrangerTally& tally, bool with_token);

}  // namespace stranger
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_STRANGER_STRANGER_CLI_H_
