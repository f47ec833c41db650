#include "coordinator/elastic.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pstrain {

ElasticWorkers::ElasticWorkers(ElasticOptions options)
    : options_(options),
      state_(std::max(options.num_workers, 0)),
      wanted_(state_.size(), false),
      released_step_(state_.size(), 0) {}

absl::Status ElasticWorkers::Depart(int rank, const std::vector<bool>& done) {
  if (rank < 0 || rank >= static_cast<int>(state_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("unknown worker ", rank));
  }
  // A released rank whose new worker never came: nobody waits for it now.
  if (state_[rank] == State::kReleased) wanted_[rank] = false;
  state_[rank] = State::kDeparted;
  ++epoch_;
  const int live = live_workers();
  if (live < options_.min_workers) {
    return absl::FailedPreconditionError(absl::StrCat(
        live, " live worker", live == 1 ? "" : "s", " left, fewer than ",
        "training.min_workers = ", options_.min_workers));
  }
  return absl::OkStatus();
}

bool ElasticWorkers::Handles(int requested_rank,
                             const std::vector<bool>& registered) const {
  if (requested_rank >= static_cast<int>(registered.size())) return false;
  if (requested_rank >= 0) return registered[requested_rank];
  for (bool r : registered) {
    if (!r) return false;
  }
  return true;
}

absl::StatusOr<int> ElasticWorkers::RankFor(int requested_rank,
                                            bool adopt) const {
  const int n = static_cast<int>(state_.size());
  if (requested_rank >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "requested rank ", requested_rank, " but the job has ", n, " workers"));
  }
  if (requested_rank < 0) {
    if (!adopt) {
      for (int r = 0; r < n; ++r) {
        if (state_[r] == State::kReleased) return r;
      }
    }
    for (int r = 0; r < n; ++r) {
      if (vacant(r)) return r;
    }
    if (!adopt) {
      for (int r = 0; r < n; ++r) {
        if (state_[r] == State::kStandIn || state_[r] == State::kHandover) {
          return r;
        }
      }
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", n, " worker ranks are held by live workers"));
  }
  switch (state_[requested_rank]) {
    case State::kDeparted:
    case State::kAbandoned:
      return requested_rank;
    case State::kStandIn:
    case State::kHandover:
    case State::kReleased:
      if (!adopt) return requested_rank;
      return absl::AlreadyExistsError(absl::StrCat(
          "worker rank ", requested_rank, " is already taken over"));
    case State::kLive:
      break;
  }
  return absl::AlreadyExistsError(absl::StrCat(
      "worker rank ", requested_rank,
      " is held by a live worker (training.on_failure: elastic lets a worker "
      "join only a rank whose worker was declared dead)"));
}

bool ElasticWorkers::Ready(int rank) const {
  return !options_.takeover || state_[rank] == State::kReleased;
}

void ElasticWorkers::Want(int rank) {
  if (!options_.takeover || state_[rank] == State::kLive) return;
  wanted_[rank] = true;
  if (state_[rank] == State::kStandIn) state_[rank] = State::kHandover;
}

absl::Status ElasticWorkers::Release(int rank, uint64_t next_step) {
  if (state_[rank] != State::kHandover) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker rank ", rank,
                     " is not being handed over (no new worker asked for "
                     "it); keep standing in"));
  }
  state_[rank] = State::kReleased;
  released_step_[rank] = next_step;
  ++epoch_;
  return absl::OkStatus();
}

void ElasticWorkers::Registered(int rank, bool adopt) {
  if (adopt) {
    state_[rank] = wanted_[rank] ? State::kHandover : State::kStandIn;
  } else {
    state_[rank] = State::kLive;
    wanted_[rank] = false;
  }
  ++epoch_;
}

std::vector<int> ElasticWorkers::Adopters(const std::vector<bool>& done) const {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(state_.size()); ++r) {
    if (state_[r] == State::kLive && !done[r]) out.push_back(r);
  }
  return out;
}

int ElasticWorkers::AdopterOf(int departed,
                              const std::vector<bool>& done) const {
  if (!options_.takeover || state_[departed] != State::kDeparted) return -1;
  const std::vector<int> adopters = Adopters(done);
  if (adopters.empty()) return -1;
  return adopters[departed % adopters.size()];
}

std::vector<int> ElasticWorkers::Abandon(const std::vector<bool>& done) {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(state_.size()); ++r) {
    if (state_[r] == State::kDeparted && AdopterOf(r, done) < 0) {
      state_[r] = State::kAbandoned;
      out.push_back(r);
    }
  }
  return out;
}

std::vector<uint32_t> ElasticWorkers::AdoptionsFor(
    int rank, const std::vector<bool>& done) const {
  std::vector<uint32_t> out;
  if (!options_.takeover) return out;
  for (int d = 0; d < static_cast<int>(state_.size()); ++d) {
    if (AdopterOf(d, done) == rank) out.push_back(d);
  }
  return out;
}

int ElasticWorkers::live_workers() const {
  int n = 0;
  for (State s : state_) n += s == State::kLive;
  return n;
}

}  // namespace pstrain
