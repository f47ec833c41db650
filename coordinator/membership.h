// Who is in the job: server shards (address, ready), worker ranks (taken,
// done) and, in mode allreduce, each rank's ring peer address. A plain value
// class: no locking, no waiting, no RPC; the coordinator service holds it
// under its mutex and waits on its predicates.
//
// Assignment rules (docs/architecture.md):
// - A server asks for a shard (or -1: the lowest free one). A retry from an
//   address that already holds a shard gets that shard back. A shard held by
//   another address is ALREADY_EXISTS; a shard >= K is INVALID_ARGUMENT; no
//   free shard is RESOURCE_EXHAUSTED.
// - A worker asks for a rank (or -1: the lowest free one). A taken rank is
//   ALREADY_EXISTS, except in mode allreduce when the same peer address asks
//   again (a retry after a lost answer): it gets its rank back. A rank >= N
//   is INVALID_ARGUMENT; no free rank is RESOURCE_EXHAUSTED. Mode allreduce
//   requires a peer address.
//
// Session ids: every successful registration gets a random 64-bit id (never
// 0) for the registering process, except mode allreduce's retry from the
// same peer address, which gets the rank's id back (the answer to the first
// attempt may have been lost, and the ring neighbours may already know it).
// A server's re-registration from its address gets a new id and its old one
// stops being accepted. The checks answer PERMISSION_DENIED naming the rank
// or shard, never the expected id.
#ifndef PSTRAIN_COORDINATOR_MEMBERSHIP_H_
#define PSTRAIN_COORDINATOR_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {

class Membership {
 public:
  // `ring_peers`: mode allreduce (workers register ring peer addresses).
  // `new_session_id` draws session ids (tests may fix them); it must not
  // return 0.
  Membership(int num_servers, int num_workers, bool ring_peers,
             std::function<uint64_t()> new_session_id = RandomSessionId);

  // 64 bits from the operating system's random source (std::random_device),
  // never 0.
  static uint64_t RandomSessionId();

  // The shard `address` holds (see the rules above).
  absl::StatusOr<int> RegisterServer(const std::string& address,
                                     int requested_shard);
  // NOT_FOUND for a shard that is not registered.
  absl::Status MarkServerReady(int64_t shard);
  // The rank the worker gets.
  absl::StatusOr<int> RegisterWorker(int requested_rank,
                                     const std::string& peer_address);
  // OK when `rank` is a registered worker, else NOT_FOUND naming it.
  absl::Status CheckWorker(int64_t rank) const;
  // CheckWorker, then PERMISSION_DENIED unless `session_id` is the rank's
  // current session id. `what` names the call in the message ("Report").
  absl::Status CheckWorkerSession(int64_t rank, uint64_t session_id,
                                  const char* what) const;
  // NOT_FOUND for an unregistered shard; PERMISSION_DENIED unless
  // `session_id` is its current session id.
  absl::Status CheckServerSession(int64_t shard, uint64_t session_id,
                                  const char* what) const;
  // The current session id of a registered worker or shard (0 otherwise).
  uint64_t worker_session(int rank) const;
  uint64_t server_session(int shard) const;
  // By rank; 0 where none registered yet.
  std::vector<uint64_t> worker_sessions() const;
  // Marks a registered worker finished (idempotent).
  void MarkWorkerDone(int rank);
  // training.on_failure: restart (coordinator/recovery.h): frees the slot of
  // a dead server shard / worker rank for its replacement (address, ready,
  // done and session id cleared; the old id stops being accepted). Ids out
  // of range are ignored.
  void VacateServer(int shard);
  void VacateWorker(int rank);
  // The shard `address` holds (-1: none).
  int ShardOf(const std::string& address) const;
  bool ServerHeld(int shard) const;  // registered (an address holds it)
  bool WorkerHeld(int rank) const;   // registered
  bool AnyWorkerDone() const;
  // Elastic workers (coordinator/elastic.h), for a registered rank: ends
  // its session (its id is refused from now on, and listed as 0), or gives
  // it a new one (a worker registered for it again; not done). The new id.
  void EndWorkerSession(int rank);
  uint64_t RenewWorkerSession(int rank);
  // By rank: registered (at least once), done.
  std::vector<bool> registered_workers() const;
  std::vector<bool> done_workers() const;

  bool AllServersRegistered() const;
  bool AllServersReady() const;
  bool AllWorkersRegistered() const;
  bool AllWorkersDone() const;
  bool AllPeersKnown() const;  // every rank's ring peer address
  int registered_servers() const;
  int live_workers() const;  // registered and not done
  int num_servers() const { return static_cast<int>(servers_.size()); }
  int num_workers() const { return static_cast<int>(workers_.size()); }

  // By shard; "" where none registered yet.
  std::vector<std::string> server_addresses() const;
  // By rank; "" where none registered yet.
  std::vector<std::string> peer_addresses() const;
  // Ranks without a peer address yet.
  std::vector<int> missing_peers() const;

 private:
  struct Server {
    std::string address;
    bool ready = false;
    uint64_t session_id = 0;
  };
  struct Worker {
    bool registered = false;
    bool done = false;
    std::string peer_address;
    uint64_t session_id = 0;
  };
  const bool ring_peers_;
  const std::function<uint64_t()> new_session_id_;
  std::vector<Server> servers_;
  std::vector<Worker> workers_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_MEMBERSHIP_H_
