#include "common/coordinator_lease.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/process.h"

namespace pstrain {

LeaseOutcome RunCoordinatorLease(
    pstrain::v1::Coordinator::StubInterface* coord, const LeaseOptions& options,
    absl::Notification* done, const std::function<bool()>& stop,
    const std::function<void(pstrain::v1::JobStatusRequest*)>& fill,
    const std::function<bool(const pstrain::v1::JobStatusResponse&)>&
        on_answer) {
  const absl::Duration beat = std::min(absl::Seconds(1), options.lease / 4);
  const std::string who = absl::StrCat(options.process, " ", options.id);
  const std::string coordinator =
      options.coordinator.empty()
          ? std::string("the coordinator")
          : absl::StrCat("the coordinator at ", options.coordinator);
  auto request = [&] {
    pstrain::v1::JobStatusRequest req;
    req.set_process(options.process);
    req.set_id(options.id);
    if (fill) fill(&req);
    return req;
  };
  absl::Time last_contact = absl::Now();
  absl::Time next_beat = absl::Now();
  while (!done->WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
    if (stop()) {
      if (!options.stopping_note.empty()) {
        // The last word, bounded: a stop ends a process within a second.
        grpc::ClientContext ctx;
        SetTimeout(&ctx,
                   std::min(absl::Milliseconds(100), options.rpc_timeout));
        pstrain::v1::JobStatusRequest req = request();
        req.set_stopping(options.stopping_note);
        pstrain::v1::JobStatusResponse status;
        const grpc::Status told = coord->JobStatus(&ctx, req, &status);
        if (!told.ok()) {
          return {LeaseEnd::kStopped,
                  absl::StrCat("could not tell ", coordinator, ": ",
                               told.error_message())};
        }
      }
      return {LeaseEnd::kStopped, ""};
    }
    if (absl::Now() < next_beat) continue;
    next_beat = absl::Now() + beat;
    grpc::ClientContext ctx;
    SetTimeout(&ctx, std::min(beat, options.rpc_timeout));
    pstrain::v1::JobStatusResponse status;
    grpc::Status s;
    {
      // A hung coordinator holds the call for the whole beat: a stop
      // cancels it (and is then handled above at once).
      CancelOnStop cancel(&ctx,
                          [&] { return stop() || done->HasBeenNotified(); });
      s = coord->JobStatus(&ctx, request(), &status);
    }
    if (s.error_code() == grpc::StatusCode::CANCELLED &&
        (stop() || done->HasBeenNotified())) {
      continue;
    }
    if (s.ok()) {
      last_contact = absl::Now();
      if (!on_answer(status)) return {LeaseEnd::kDone, ""};
    } else if (s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      return {LeaseEnd::kRefused,
              absl::StrCat(coordinator, " ended the session of ", who,
                           " (declared dead or given to another process): ",
                           s.error_message())};
    } else if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      return {LeaseEnd::kRefused, absl::StrCat(coordinator, " does not know ",
                                               who, ": ", s.error_message())};
    } else if (absl::Now() - last_contact > options.lease) {
      return {LeaseEnd::kSilent,
              absl::StrFormat("%s has been silent for %.1f s "
                              "(network.lease_s = %g): it is gone (%s)",
                              coordinator,
                              absl::ToDoubleSeconds(absl::Now() - last_contact),
                              absl::ToDoubleSeconds(options.lease),
                              s.error_message())};
    }
  }
  return {LeaseEnd::kDone, ""};
}

}  // namespace pstrain
