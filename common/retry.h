// Retrying a call while its peer is not up yet (start-up order must not
// matter): UNAVAILABLE and DEADLINE_EXCEEDED are retried with capped
// exponential back-off until `deadline`; any other status is returned.
#ifndef PSTRAIN_COMMON_RETRY_H_
#define PSTRAIN_COMMON_RETRY_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pstrain {

// `what` names the peer in the single "waiting for ..." log line. `stop`
// (may be null) is polled between attempts, every 50 ms of the back-off:
// when it returns true the wait ends with CANCELLED ("stopped while waiting
// for ..."). A call in flight is not interrupted here (see CancelOnStop in
// common/process.h).
absl::Status RetryUntil(absl::Time deadline, const std::string& what,
                        const std::function<absl::Status()>& call,
                        const std::function<bool()>& stop = nullptr);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_RETRY_H_
