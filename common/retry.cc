#include "common/retry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace pstrain {

absl::Status RetryUntil(absl::Time deadline, const std::string& what,
                        const std::function<absl::Status()>& call,
                        const std::function<bool()>& stop) {
  auto stopped = [&] { return stop && stop(); };
  auto stopped_error = [&] {
    return absl::CancelledError(
        absl::StrCat("stopped while waiting for ", what));
  };
  absl::Duration backoff = absl::Milliseconds(50);
  bool logged = false;
  while (true) {
    if (stopped()) return stopped_error();
    absl::Status s = call();
    if (stopped() && !s.ok()) return stopped_error();
    if (s.ok() || (s.code() != absl::StatusCode::kUnavailable &&
                   s.code() != absl::StatusCode::kDeadlineExceeded)) {
      return s;
    }
    if (absl::Now() + backoff > deadline) {
      return absl::Status(s.code(), absl::StrCat("gave up waiting for ", what,
                                                 ": ", s.message()));
    }
    if (!logged) {
      PS_LOG_INFO("waiting for %s (%s)", what, s.message());
      logged = true;
    }
    for (absl::Time until = absl::Now() + backoff; absl::Now() < until;) {
      if (stopped()) return stopped_error();
      absl::SleepFor(std::min(absl::Milliseconds(50), until - absl::Now()));
    }
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

}  // namespace pstrain
