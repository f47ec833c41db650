#include "worker/liveness.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/coordinator_lease.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"

namespace pstrain {

Liveness::Liveness(pstrain::v1::Coordinator::Stub* coord, uint32_t rank,
                   uint64_t session_id, absl::Duration lease,
                   absl::Duration rpc_timeout, std::function<bool()> stop)
    : coord_(coord),
      rank_(rank),
      lease_(lease),
      rpc_timeout_(rpc_timeout),
      stop_(std::move(stop)),
      session_id_(session_id),
      thread_([this] { Loop(); }) {}

Liveness::~Liveness() {
  done_.Notify();
  thread_.join();
}

std::vector<uint32_t> Liveness::TakeAdoptions() {
  absl::MutexLock lock(&mu_);
  std::vector<uint32_t> out;
  out.swap(adopt_);
  return out;
}

void Liveness::Forget(uint32_t d) {
  absl::MutexLock lock(&mu_);
  adopt_seen_.erase(d);
}

void Liveness::set_client(PsClient* client) {
  absl::MutexLock lock(&mu_);
  client_ = client;
  if (client_ != nullptr && (ended_ || seen_ > generation_)) {
    client_->Cancel();
  }
}

void Liveness::set_generation(uint64_t generation) {
  absl::MutexLock lock(&mu_);
  generation_ = generation;
}

bool Liveness::rollback_pending() const {
  absl::MutexLock lock(&mu_);
  return seen_ > generation_;
}

bool Liveness::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

std::string Liveness::reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

bool Liveness::lost_coordinator() const {
  absl::MutexLock lock(&mu_);
  return lost_;
}

void Liveness::End(const std::string& reason, bool lost) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  ended_ = true;
  lost_ = lost;
  reason_ = reason;
  if (client_ != nullptr) client_->Cancel();
}

void Liveness::SeeGeneration(uint64_t generation) {
  absl::MutexLock lock(&mu_);
  if (generation <= seen_) return;
  seen_ = generation;
  if (seen_ > generation_) {
    PS_LOG_WARN(
        "the job starts generation %d (a process failed): stopping this "
        "generation's work for the rollback",
        seen_);
    if (client_ != nullptr) client_->Cancel();
  }
}

void Liveness::SeeAdoptions(const pstrain::v1::JobStatusResponse& status) {
  absl::MutexLock lock(&mu_);
  for (uint32_t d : status.adopt_ranks()) {
    if (adopt_seen_.insert(d).second) adopt_.push_back(d);
  }
}

void Liveness::Loop() {
  LeaseOptions options;
  options.process = "worker";
  options.id = static_cast<int32_t>(rank_);
  options.coordinator = "";
  options.lease = lease_;
  options.rpc_timeout = rpc_timeout_;
  const LeaseOutcome ended = RunCoordinatorLease(
      coord_, options, &done_, stop_,
      [this](pstrain::v1::JobStatusRequest* req) {
        req->set_step(step_.load());
        req->set_session_id(session_id_.load());
      },
      [this](const pstrain::v1::JobStatusResponse& status) {
        if (status.failed()) {
          End(absl::StrCat("the job failed: ", status.message()), false);
          return false;
        }
        SeeGeneration(status.generation());
        SeeAdoptions(status);
        release_.store(status.release_rank());
        return true;
      });
  switch (ended.end) {
    case LeaseEnd::kStopped:
      End("stopped on request", false);
      break;
    case LeaseEnd::kRefused:
    case LeaseEnd::kSilent:
      PS_LOG_ERROR("%s", ended.why);
      End(ended.why, true);
      break;
    case LeaseEnd::kDone:
      break;
  }
}

absl::StatusOr<pstrain::v1::JobSpec> AwaitRollback(
    pstrain::v1::Coordinator::Stub* coord, uint64_t generation,
    const JobConfig& config, const std::function<bool()>& stop) {
  const absl::Duration rpc = absl::Seconds(config.network().rpc_timeout_s());
  const absl::Time deadline =
      absl::Now() + absl::Seconds(config.training().restart_timeout_s()) + rpc;
  pstrain::v1::JobSpec job;
  PS_RETURN_IF_ERROR(CallUntil(
      deadline, absl::StrCat("the rollback of generation ", generation), rpc,
      stop, [&](grpc::ClientContext* ctx) {
        pstrain::v1::GetJobRequest req;
        req.set_wait_for_generation(generation);
        return coord->GetJob(ctx, req, &job);
      }));
  return job;
}

absl::StatusOr<pstrain::v1::JobSpec> AwaitNewGeneration(
    pstrain::v1::Coordinator::Stub* coord, const Liveness& liveness,
    uint64_t current, const JobConfig& config,
    const std::function<bool()>& stop) {
  const absl::Time until =
      absl::Now() + absl::Seconds(2 * config.network().lease_s() + 1);
  while (!liveness.rollback_pending()) {
    if (stop() || liveness.ended() || absl::Now() > until) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the job stayed in generation ", current,
          liveness.ended() ? absl::StrCat(": ", liveness.reason()) : ""));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return AwaitRollback(coord, current + 1, config, stop);
}

}  // namespace pstrain
