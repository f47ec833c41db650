// A stranger at a job's ports (docs/security.md, "Threat model"): for a bounded
// time it opens idle and junk streams and sends valid-looking but made-up
// requests to every target, and counts what each call returned. Written from
// proto/pstrain.proto and gRPC's public API only (generated stubs for the
// valid-looking calls, grpc::GenericStub for raw bytes, plain sockets for
// unfinished HTTP/2 prefaces), as an outsider would.
//
// Per target, at `actions_per_second`, it picks one of (weights in
// stranger.cc):
//   - an idle stream: Push, Pull or RingPeer/SendSegments opened and left
//     silent until its deadline (0.5..5 s);
//   - a junk stream: 1..4 messages of random bytes (up to 64 KiB each) on
//     Push, SendSegments or Pull, half-closed or left open;
//   - a valid-looking push (made-up session in the header and in
//     x-pstrain-push-session, an absurd chunk) or ring segment (made-up
//     session, step 2^64-1);
//   - grpc.health.v1.Health/Check, or a Watch held 1..10 s
//     (`max_watches_per_target` at once);
//   - a made-up unary call: Rollback(generation 2^64-1, "/etc"), Checkpoint,
//     Shutdown, GetStats, JobStatus (session 0), Report (a 900 KiB error),
//     RegisterServer (a 64 KiB address), RegisterWorker, GetJob,
//     ServerReady, GetWorkerSessions, GetPeers, ReleaseRank;
//   - an unfinished HTTP/2 connection: a TCP connect that sends part of the
//     client preface (or all of it and a junk frame) and idles 1..10 s
//     (`max_raw_per_target` at once).
// Every method goes to every target: the stranger does not know which
// service a port serves. At most `max_streams_per_target` calls are open per
// target at once; an action beyond a bound is skipped and counted. At the
// end every open call is cancelled and every connection closed.
//
// Loopback only: targets are LoopbackTargets (loopback_target.h).
#ifndef PSTRAIN_TESTS_STRANGER_STRANGER_H_
#define PSTRAIN_TESTS_STRANGER_STRANGER_H_

#include <grpcpp/support/status.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tests/stranger/loopback_target.h"

namespace pstrain {
namespace stranger {

struct StrangerOptions {
  std::vector<LoopbackTarget> targets;
  absl::Duration duration = absl::Seconds(60);
  // The job token to present on every call; "" (a stranger's usual lot)
  // presents none.
  std::string token;
  int max_streams_per_target = 64;  // calls of any kind open at once
  // Health Watch streams among them: twice what a process allows one peer
  // (HealthLimits), so some are refused.
  int max_watches_per_target = 8;
  int max_raw_per_target = 8;    // unfinished TCP connections at once
  int actions_per_second = 100;  // per target
  uint64_t seed = 1;             // what is chosen, made up and junk
};

// What the calls returned.
struct StrangerTally {
  // "/package.Service/Method" -> status code name -> calls.
  std::map<std::string, std::map<std::string, int64_t>> by_method;
  std::map<std::string, int64_t> by_code;  // summed over the methods
  // LoopbackTarget::given -> status code name -> calls.
  std::map<std::string, std::map<std::string, int64_t>> by_target;
  int64_t raw_opened = 0;   // unfinished HTTP/2 connections made
  int64_t raw_refused = 0;  // connects that failed
  int64_t skipped = 0;      // actions not taken: a bound was reached
  int64_t most_open = 0;    // the most calls open at once on one target
  // Calls still open 10 s after the final cancel (gRPC never ended them).
  int64_t unfinished = 0;
  // Methods of which a call returned OK although ShouldHaveBeenRefused.
  std::set<std::string> breaches;
};

// Whether a call of `method` that returned OK changed or revealed what it
// must not: any method but grpc.health.v1.Health's without the token; with
// the token (a stranger who holds it: every call carries a made-up session,
// key or absurd field), any method but health, GetStats, GetJob and
// JobStatus (reads; JobStatus with session 0 renews no lease).
bool ShouldHaveBeenRefused(absl::string_view method, bool with_token);

// "OK", "UNAUTHENTICATED", ... (grpc::StatusCode's names); "CODE_<n>" for
// a value outside the enum.
std::string StatusCodeName(grpc::StatusCode code);

// Runs the stranger for options.duration (one driver thread per target),
// then cancels what is open and waits up to 10 s for it to end.
// INVALID_ARGUMENT for options out of range (no targets, a bound or rate
// below 1, a duration not > 0). Thread-compatible; blocks the caller.
absl::StatusOr<StrangerTally> RunStranger(const StrangerOptions& options);

// The tally as lines a test can grep: "status CODE N", "method M CODE N",
// "target T CODE N", "raw opened N refused N", "skipped N", "most open
// N", and "unfinished N" when not 0.
std::string FormatTally(const StrangerTally& tally);

}  // namespace stranger
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_STRANGER_STRANGER_H_
