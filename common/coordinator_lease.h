// One process's lease with the coordinator, the same for servers and
// workers (and the Python client's twin, python/pstrain/session.py): a
// heartbeat (JobStatus naming the process, its id and its session) about
// every min(1 s, lease / 4), each answer handed to the caller, until one of
// the ways a process's part in a job ends:
//
//   kStopped  `stop` turned true (SIGTERM, SIGINT); with a stopping note the
//             coordinator is told at once (JobStatusRequest.stopping,
//             bounded by 100 ms) instead of waiting for the lease to run out
//   kDone     the caller is done: `on_answer` returned false (the job is
//             over) or `done` was notified
//   kRefused  the coordinator ended this process's session
//             (PERMISSION_DENIED: declared dead or replaced) or does not
//             know it (NOT_FOUND)
//   kSilent   no answer for the lease: the coordinator is gone
//
// `stop` and `done` are polled every 50 ms, and cancel a heartbeat in
// flight, so no end waits longer.
#ifndef PSTRAIN_COMMON_COORDINATOR_LEASE_H_
#define PSTRAIN_COMMON_COORDINATOR_LEASE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {

struct LeaseOptions {
  std::string process;      // JobStatusRequest.process: "server", "worker"
  int32_t id = 0;           // shard or rank
  std::string coordinator;  // its address, for messages (may be empty)
  absl::Duration lease = absl::Seconds(5);  // network.lease_s
  absl::Duration rpc_timeout = absl::Seconds(30);
  // Non-empty: sent as JobStatusRequest.stopping when `stop` turns true.
  std::string stopping_note;
};

enum class LeaseEnd { kStopped, kDone, kRefused, kSilent };

struct LeaseOutcome {
  LeaseEnd end = LeaseEnd::kDone;
  std::string why;  // kRefused, kSilent: a sentence naming the coordinator
};

// Heartbeats until the lease ends (see above). `fill` adds what changes
// between beats (session id, step) to each request; `on_answer` sees every
// answer and returns false to end (kDone). Blocks; thread-compatible.
LeaseOutcome RunCoordinatorLease(
    pstrain::v1::Coordinator::StubInterface* coord, const LeaseOptions& options,
    absl::Notification* done, const std::function<bool()>& stop,
    const std::function<void(pstrain::v1::JobStatusRequest*)>& fill,
    const std::function<bool(const pstrain::v1::JobStatusResponse&)>&
        on_answer);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_COORDINATOR_LEASE_H_
