#include "coordinator/membership.h"

#include "absl/strings/str_cat.h"

namespace pstrain {

Membership::Membership(int num_servers, int num_workers, bool ring_peers)
    : ring_peers_(ring_peers), servers_(num_servers), workers_(num_workers) {}

absl::StatusOr<int> Membership::RegisterServer(const std::string& address,
                                               int requested_shard) {
  if (address.empty()) {
    return absl::InvalidArgumentError("server address is empty");
  }
  const int k = num_servers();
  for (int s = 0; s < k; ++s) {
    if (servers_[s].address == address) return s;
  }
  int shard = requested_shard;
  if (shard >= k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "requested shard ", shard, " but the job has ", k, " servers"));
  }
  if (shard < 0) {
    for (shard = 0; shard < k && !servers_[shard].address.empty(); ++shard) {
    }
    if (shard == k) {
      return absl::ResourceExhaustedError(
          absl::StrCat("all ", k, " server shards are taken"));
    }
  } else if (!servers_[shard].address.empty()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "shard ", shard, " is already held by ", servers_[shard].address));
  }
  servers_[shard].address = address;
  return shard;
}

absl::Status Membership::MarkServerReady(int64_t shard) {
  if (shard < 0 || shard >= num_servers() || servers_[shard].address.empty()) {
    return absl::NotFoundError(absl::StrCat("unknown shard ", shard));
  }
  servers_[shard].ready = true;
  return absl::OkStatus();
}

absl::StatusOr<int> Membership::RegisterWorker(
    int requested_rank, const std::string& peer_address) {
  const int n = num_workers();
  if (ring_peers_ && peer_address.empty()) {
    return absl::InvalidArgumentError(
        "mode allreduce: the worker must register its ring peer address "
        "(RegisterWorkerRequest.peer_address)");
  }
  int rank = requested_rank;
  if (rank >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "requested rank ", rank, " but the job has ", n, " workers"));
  }
  if (rank < 0) {
    if (ring_peers_) {
      for (int r = 0; r < n; ++r) {
        if (workers_[r].registered && workers_[r].peer_address == peer_address)
          return r;
      }
    }
    for (rank = 0; rank < n && workers_[rank].registered; ++rank) {
    }
    if (rank == n) {
      return absl::ResourceExhaustedError(
          absl::StrCat("all ", n, " worker ranks are taken"));
    }
  } else if (workers_[rank].registered) {
    if (ring_peers_ && workers_[rank].peer_address == peer_address) {
      return rank;
    }
    return absl::AlreadyExistsError(
        absl::StrCat("worker rank ", rank, " is already registered"));
  }
  workers_[rank].registered = true;
  workers_[rank].peer_address = ring_peers_ ? peer_address : "";
  return rank;
}

absl::Status Membership::CheckWorker(int64_t rank) const {
  if (rank < 0 || rank >= num_workers() || !workers_[rank].registered) {
    return absl::NotFoundError(absl::StrCat("unknown worker ", rank));
  }
  return absl::OkStatus();
}

void Membership::MarkWorkerDone(int rank) {
  if (CheckWorker(rank).ok()) workers_[rank].done = true;
}

bool Membership::AllServersRegistered() const {
  for (const Server& s : servers_) {
    if (s.address.empty()) return false;
  }
  return true;
}

bool Membership::AllServersReady() const {
  for (const Server& s : servers_) {
    if (!s.ready) return false;
  }
  return true;
}

bool Membership::AllWorkersRegistered() const {
  for (const Worker& w : workers_) {
    if (!w.registered) return false;
  }
  return true;
}

bool Membership::AllWorkersDone() const {
  for (const Worker& w : workers_) {
    if (!w.done) return false;
  }
  return true;
}

bool Membership::AllPeersKnown() const { return missing_peers().empty(); }

int Membership::registered_servers() const {
  int n = 0;
  for (const Server& s : servers_) n += !s.address.empty();
  return n;
}

int Membership::live_workers() const {
  int n = 0;
  for (const Worker& w : workers_) n += w.registered && !w.done;
  return n;
}

std::vector<std::string> Membership::server_addresses() const {
  std::vector<std::string> out;
  for (const Server& s : servers_) out.push_back(s.address);
  return out;
}

std::vector<std::string> Membership::peer_addresses() const {
  std::vector<std::string> out;
  for (const Worker& w : workers_) out.push_back(w.peer_address);
  return out;
}

std::vector<int> Membership::missing_peers() const {
  std::vector<int> out;
  for (int r = 0; r < num_workers(); ++r) {
    if (workers_[r].peer_address.empty()) out.push_back(r);
  }
  return out;
}

}  // namespace pstrain
