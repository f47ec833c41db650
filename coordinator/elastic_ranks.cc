#include "coordinator/elastic_ranks.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/failure_policy.h"

namespace pstrain {
namespace {

// The adopting worker's own rank, when it named itself (checked by the
// service: CheckAdopter).
std::optional<int> Adopter(const pstrain::v1::RegisterWorkerRequest& r) {
  if (!r.has_adopter()) return std::nullopt;
  return static_cast<int>(r.adopter());
}

}  // namespace

ElasticRanks::ElasticRanks(ElasticOptions options, const FailurePolicy* policy,
                           Membership* members, LeaseTable* leases,
                           StepLog* step_log, Recovery* recovery,
                           JobEvents* events, SupervisionNotes* notes,
                           absl::Mutex* mu, absl::Duration wait_cap)
    : workers_(options),
      policy_(*policy),
      members_(*members),
      leases_(*leases),
      step_log_(*step_log),
      recovery_(*recovery),
      events_(*events),
      notes_(*notes),
      mu_(*mu),
      wait_cap_(wait_cap) {}

bool ElasticRanks::Handles(int requested_rank) const {
  return workers_.Handles(requested_rank, members_.registered_workers());
}

absl::StatusOr<ElasticRanks::Rejoined> ElasticRanks::Rejoin(
    const grpc::ServerContext& context,
    const pstrain::v1::RegisterWorkerRequest& request,
    uint64_t job_start_step) {
  PS_ASSIGN_OR_RETURN(const int rank, workers_.RankFor(request.requested_rank(),
                                                       request.adopt()));
  const bool handover = !request.adopt() && policy_.HandsOver();
  if (handover && !workers_.Ready(rank)) {
    PS_RETURN_IF_ERROR(AwaitHandover(context, rank));
  }
  // Sync: the first step nobody reported for the rank; the shards
  // acknowledge pushes of steps the rank's earlier process already pushed
  // without applying them again (server/shard.h, "Elastic workers").
  const uint64_t unreported =
      std::max(step_log_.NextStep(rank), job_start_step);
  uint64_t start = unreported;
  if (request.adopt()) {
    // The stand-in starts at the step whose weights it holds: the rank's
    // dead process pushed the steps before it (the shards completed them)
    // but its records of them are lost.
    start = std::max(start, request.adopt_from_step());
  }
  if (handover) {
    // The first step the stand-in did not push (it reported the others).
    start = workers_.released_step(rank);
  }
  if (!policy_.HandsOver()) {
    // Async: where the slowest live worker is, so nobody waits for the
    // newcomer; the rank's micro-batches in between are skipped.
    const std::vector<bool> done = members_.done_workers();
    std::optional<uint64_t> slowest;
    for (int r = 0; r < members_.num_workers(); ++r) {
      if (r == rank || done[r] ||
          workers_.state(r) != ElasticWorkers::State::kLive) {
        continue;
      }
      if (std::optional<uint64_t> s = leases_.Step(r); s.has_value()) {
        slowest = std::min(slowest.value_or(*s), *s);
      }
    }
    start = std::max(start, slowest.value_or(0));
  }
  const ElasticWorkers::State before = workers_.state(rank);
  workers_.Registered(rank, request.adopt());
  const uint64_t session = members_.RenewWorkerSession(rank);
  if ((request.adopt() || handover) && start > unreported) {
    step_log_.Excuse(rank, unreported);
    PS_LOG_WARN(
        "worker rank %d: steps %d to %d were pushed by its dead process but "
        "not reported; their metrics rows count the other workers' records",
        rank, unreported, start - 1);
  }
  step_log_.Expect(rank, start);
  leases_.Hold(LeaseHolder::kWorker, rank, absl::Now(), context.peer());
  if (request.adopt()) {
    notes_.TakenOver(rank, start, Adopter(request));
    PS_LOG_INFO(
        "worker rank %d taken over from step %d by a live worker at %s "
        "(training.on_failure: elastic; global batch kept)",
        rank, start, context.peer());
  } else {
    notes_.Rejoined(rank, start);
    PS_LOG_INFO(
        "worker rank %d joined again at %s from step %d with a new session%s "
        "(training.on_failure: elastic)",
        rank, context.peer(), start,
        before == ElasticWorkers::State::kReleased
            ? " (handover: its stand-in pushed every step before it)"
            : "");
  }
  return Rejoined{rank, session, start};
}

absl::Status ElasticRanks::AwaitHandover(const grpc::ServerContext& context,
                                         int rank) {
  if (members_.done_workers()[rank]) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker rank ", rank,
                     " has finished (its stand-in did its last step)"));
  }
  if (workers_.state(rank) == ElasticWorkers::State::kAbandoned) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker rank ", rank,
        " was abandoned (every live worker finished): nobody holds weights "
        "it could start from"));
  }
  if (!workers_.ReleaseRequested(rank)) {
    workers_.Want(rank);
    PS_LOG_INFO(
        "worker rank %d: a new worker at %s asks for it; %s (training."
        "on_failure: elastic, handover)",
        rank, context.peer(),
        workers_.ReleaseRequested(rank)
            ? "its stand-in releases it at its next step boundary"
            : "it is handed over once a live worker has taken it over");
  }
  HandoverWait wait{this, rank};
  mu_.AwaitWithDeadline(absl::Condition(&HandoverOver, &wait),
                        ServerDeadline(context, wait_cap_));
  if (events_.ended()) return events_.EndedError();
  if (context.IsCancelled()) {
    return absl::CancelledError("RegisterWorker: cancelled by the caller");
  }
  switch (workers_.state(rank)) {
    case ElasticWorkers::State::kReleased:
      return absl::OkStatus();
    case ElasticWorkers::State::kLive:
      return absl::AlreadyExistsError(absl::StrCat(
          "worker rank ", rank, " was given to another new worker meanwhile"));
    default:
      break;
  }
  if (members_.done_workers()[rank] ||
      workers_.state(rank) == ElasticWorkers::State::kAbandoned) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker rank ", rank,
        " finished while it was being handed over (its stand-in did its "
        "last step)"));
  }
  return absl::UnavailableError(absl::StrCat(
      "worker rank ", rank,
      " is being handed over: its stand-in has not released it yet (it does "
      "so between two steps); retry"));
}

bool ElasticRanks::HandoverOver(HandoverWait* wait) {
  const ElasticRanks& r = *wait->ranks;
  const ElasticWorkers::State state = r.workers_.state(wait->rank);
  return r.events_.ended() || state == ElasticWorkers::State::kReleased ||
         state == ElasticWorkers::State::kLive ||
         state == ElasticWorkers::State::kAbandoned ||
         r.members_.done_workers()[wait->rank];
}

absl::Status ElasticRanks::Release(
    const pstrain::v1::ReleaseRankRequest& request) {
  const int rank = static_cast<int>(request.rank());
  PS_RETURN_IF_ERROR(members_.CheckWorkerSession(
      request.rank(), request.session_id(), "ReleaseRank"));
  PS_RETURN_IF_ERROR(workers_.Release(rank, request.next_step()));
  // The stand-in stops: its session for the rank ends. The rank's lease now
  // waits for the new worker: if it does not register within lease_s, the
  // rank departs again and is taken over.
  members_.EndWorkerSession(rank);
  leases_.Hold(LeaseHolder::kWorker, rank, absl::Now(),
               "(released by its stand-in, for a new worker)");
  notes_.Released(rank, request.next_step());
  PS_LOG_INFO(
      "worker rank %d released by its stand-in, which pushed every step "
      "before %d; the new worker starts there (training.on_failure: "
      "elastic, handover)",
      rank, request.next_step());
  return absl::OkStatus();
}

ElasticRanks::Departure ElasticRanks::Depart(const ExpiredLease& dead) {
  const int rank = dead.id;
  const std::vector<bool> done = members_.done_workers();
  members_.EndWorkerSession(rank);
  leases_.Release(LeaseHolder::kWorker, rank);
  const absl::Status st = workers_.Depart(rank, done);
  if (!st.ok()) {
    events_.Fail({"worker", rank, -1,
                  absl::StrCat(dead.Cause(leases_.lease()), "; ", st.message(),
                               " (training.on_failure: elastic)")});
    return Departure::kJobFailed;
  }
  const uint64_t from = step_log_.NextStep(rank);
  const int adopter = workers_.AdopterOf(rank, done);
  if (policy_.OnLost(LeaseHolder::kWorker) == LossResponse::kHostAndRollBack) {
    // Mode allreduce: the live worker hosts the rank as a second ring
    // member, and every rank rolls back as under restart (the generation
    // machinery), so the ring keeps its N members and its sum order.
    if (adopter >= 0) {
      PS_LOG_WARN(
          "training.on_failure: elastic: worker %d hosts rank %d as a second "
          "ring member (global batch kept, same sums); %d live workers",
          adopter, rank, workers_.live_workers());
    }
    events_.Lose(LeaseHolder::kWorker, rank, dead.Cause(leases_.lease()));
    return Departure::kRolledBack;
  }
  if (adopter >= 0) {
    PS_LOG_WARN(
        "training.on_failure: elastic: worker %d takes rank %d's "
        "micro-batches over from step %d (global batch kept, same "
        "gradients); %d live workers",
        adopter, rank, from, workers_.live_workers());
  } else if (!policy_.HandsOver()) {
    notes_.Dropped(rank, from);
    PS_LOG_WARN(
        "training.on_failure: elastic: the job goes on without worker %d "
        "from step %d (mode async: its micro-batches are skipped, so the "
        "global batch shrinks; the learning rate is unchanged); %d live "
        "workers",
        rank, from, workers_.live_workers());
  }
  return Departure::kGoesOn;
}

void ElasticRanks::AbandonStranded() {
  for (int r : workers_.Abandon(members_.done_workers())) {
    const uint64_t from = step_log_.NextStep(r);
    step_log_.Excuse(r, from);
    PS_LOG_INFO(
        "worker rank %d: nobody takes it over; its reports from step %d on "
        "are not expected",
        r, from);
  }
}

int ElasticRanks::RingPeerRank(const std::string& address) const {
  const std::vector<std::string> peers = members_.peer_addresses();
  for (int r = 0; r < static_cast<int>(peers.size()); ++r) {
    if (!address.empty() && members_.WorkerHeld(r) && peers[r] == address) {
      return r;
    }
  }
  return -1;
}

absl::Status ElasticRanks::CheckRingMember(
    const pstrain::v1::RegisterWorkerRequest& request, int* rank) {
  if (*rank < 0) {
    if (request.adopt()) {
      return absl::InvalidArgumentError(
          "RegisterWorker: adopt needs requested_rank (the rank to host)");
    }
    // While a slot is vacant the usual rule picks it (the lowest free one),
    // and a registration from a known ring peer is a retry (Membership).
    if (!members_.AllWorkersRegistered() ||
        RingPeerRank(request.peer_address()) >= 0) {
      return absl::OkStatus();
    }
    PS_ASSIGN_OR_RETURN(*rank, workers_.RankFor(-1, false));
  }
  if (*rank >= members_.num_workers()) {
    return workers_.RankFor(*rank, request.adopt()).status();
  }
  if (!members_.WorkerHeld(*rank)) {
    // The first registration, or the vacant slot of a lost rank.
    if (request.adopt() &&
        workers_.state(*rank) != ElasticWorkers::State::kDeparted) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RegisterWorker: adopt is only for a rank whose worker was declared "
          "dead (training.on_failure: elastic); rank ",
          *rank, " is not one"));
    }
    return absl::OkStatus();
  }
  if (RingPeerRank(request.peer_address()) == *rank) {
    return absl::OkStatus();  // a retry (Membership answers it)
  }
  // Held: by its own live worker (refused), or by a live worker's second
  // ring member, which a new worker process replaces (and no other live
  // worker may host: ALREADY_EXISTS).
  PS_RETURN_IF_ERROR(workers_.RankFor(*rank, request.adopt()).status());
  if (recovery_.Covers(LeaseHolder::kWorker, *rank)) {
    // The rollback that hosted it has not happened yet: the new worker
    // takes the slot in the same recovery.
    members_.VacateWorker(*rank);
  } else {
    events_.Lose(LeaseHolder::kWorker, *rank,
                 "a new worker registered for it; the live worker hosting it "
                 "drops its second ring member");
    if (events_.ended()) return events_.EndedError();
  }
  PS_LOG_INFO(
      "worker rank %d: a new worker takes it back from the live worker "
      "hosting it (training.on_failure: elastic)",
      *rank);
  return absl::OkStatus();
}

void ElasticRanks::RingMemberRegistered(
    int rank, const pstrain::v1::RegisterWorkerRequest& request) {
  workers_.Registered(rank, request.adopt());
  if (request.adopt()) {
    notes_.Hosted(rank, Adopter(request));
    PS_LOG_WARN(
        "worker rank %d hosted by a live worker as a second ring member "
        "(its ring peer at %s; training.on_failure: elastic, global batch "
        "kept)",
        rank, request.peer_address());
  }
}

}  // namespace pstrain
