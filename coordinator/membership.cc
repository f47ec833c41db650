#include "coordinator/membership.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/client_text.h"
#include "common/status_macros.h"

namespace pstrain {

Membership::Membership(int num_servers, int num_workers, bool ring_peers,
                       std::function<uint64_t()> new_session_id)
    : ring_peers_(ring_peers),
      new_session_id_(std::move(new_session_id)),
      servers_(num_servers),
      workers_(num_workers) {}

uint64_t Membership::RandomSessionId() {
  static std::random_device* const device = new std::random_device();
  uint64_t id = 0;
  while (id == 0) {
    id = (static_cast<uint64_t>((*device)()) << 32) ^ (*device)();
  }
  return id;
}

absl::StatusOr<int> Membership::RegisterServer(const std::string& address,
                                               int requested_shard) {
  if (address.empty()) {
    return absl::InvalidArgumentError("server address is empty");
  }
  PS_RETURN_IF_ERROR(
      CheckClientString("server address", address, kMaxAddressBytes));
  const int k = num_servers();
  for (int s = 0; s < k; ++s) {
    if (servers_[s].address == address) {
      servers_[s].session_id = new_session_id_();
      return s;
    }
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
    return absl::AlreadyExistsError(
        absl::StrCat("shard ", shard, " is already held by ",
                     EchoClientText(servers_[shard].address)));
  }
  servers_[shard].address = address;
  servers_[shard].session_id = new_session_id_();
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
  PS_RETURN_IF_ERROR(
      CheckClientString("worker peer address", peer_address, kMaxAddressBytes));
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
  workers_[rank].session_id = new_session_id_();
  return rank;
}

absl::Status Membership::CheckWorkerSession(int64_t rank, uint64_t session_id,
                                            const char* what) const {
  if (absl::Status st = CheckWorker(rank); !st.ok()) return st;
  if (workers_[rank].session_id == 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": worker ", rank, " was declared dead and its session ended"));
  }
  if (session_id == 0 || session_id != workers_[rank].session_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": the session id for worker ", rank,
        session_id == 0 ? " is missing"
                        : " is not the one its registration got (another "
                          "process, or a replaced one)"));
  }
  return absl::OkStatus();
}

absl::Status Membership::CheckServerSession(int64_t shard, uint64_t session_id,
                                            const char* what) const {
  if (shard < 0 || shard >= num_servers() || servers_[shard].address.empty()) {
    return absl::NotFoundError(absl::StrCat(what, ": unknown shard ", shard));
  }
  if (session_id == 0 || session_id != servers_[shard].session_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": the session id for shard ", shard,
        session_id == 0 ? " is missing"
                        : " is not the one its registration got (another "
                          "process, or a replaced one)"));
  }
  return absl::OkStatus();
}

uint64_t Membership::worker_session(int rank) const {
  if (!CheckWorker(rank).ok()) return 0;
  return workers_[rank].session_id;
}

uint64_t Membership::server_session(int shard) const {
  if (shard < 0 || shard >= num_servers()) return 0;
  return servers_[shard].session_id;
}

std::vector<uint64_t> Membership::worker_sessions() const {
  std::vector<uint64_t> out;
  for (const Worker& w : workers_) out.push_back(w.session_id);
  return out;
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

void Membership::EndWorkerSession(int rank) {
  if (CheckWorker(rank).ok()) workers_[rank].session_id = 0;
}

uint64_t Membership::RenewWorkerSession(int rank) {
  if (!CheckWorker(rank).ok()) return 0;
  workers_[rank].done = false;
  workers_[rank].session_id = new_session_id_();
  return workers_[rank].session_id;
}

std::vector<bool> Membership::registered_workers() const {
  std::vector<bool> out;
  for (const Worker& w : workers_) out.push_back(w.registered);
  return out;
}

std::vector<bool> Membership::done_workers() const {
  std::vector<bool> out;
  for (const Worker& w : workers_) out.push_back(w.done);
  return out;
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

void Membership::VacateServer(int shard) {
  if (shard < 0 || shard >= num_servers()) return;
  servers_[shard] = Server{};
}

void Membership::VacateWorker(int rank) {
  if (rank < 0 || rank >= num_workers()) return;
  workers_[rank] = Worker{};
}

int Membership::ShardOf(const std::string& address) const {
  for (int s = 0; s < num_servers(); ++s) {
    if (!address.empty() && servers_[s].address == address) return s;
  }
  return -1;
}

bool Membership::ServerHeld(int shard) const {
  return shard >= 0 && shard < num_servers() &&
         !servers_[shard].address.empty();
}

bool Membership::WorkerHeld(int rank) const {
  return rank >= 0 && rank < num_workers() && workers_[rank].registered;
}

bool Membership::AnyWorkerDone() const {
  for (const Worker& w : workers_) {
    if (w.done) return true;
  }
  return false;
}

}  // namespace pstrain
