// Liveness of the job's processes as the coordinator sees it: every
// registered server and worker holds a lease that each of its messages
// renews (registration, reports, JobStatus heartbeats). A lease not renewed
// for `lease` is expired: the process is dead (killed, stopped, cut off).
//
// A plain value class (no locking, no clock of its own): the coordinator
// service holds it under its mutex and passes the time in, so tests need no
// sleeps. A lease starts at Hold (registration) and ends at Release (a
// worker that finished, a job that ended); Renew only renews a held lease,
// so a finished process that still says hello is never declared dead
// later. Expired() looks only at held leases.
#ifndef PSTRAIN_COORDINATOR_LEASES_H_
#define PSTRAIN_COORDINATOR_LEASES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pstrain {

enum class LeaseHolder { kServer, kWorker };

// One expired lease, for the log line and summary.json's `failure`.
struct ExpiredLease {
  LeaseHolder holder;
  int id = -1;          // shard or rank
  std::string address;  // where it registered from
  uint64_t step = 0;    // worker: the last step it reported working on
  bool has_step = false;
  absl::Duration silent;  // since its last renewal
  // "worker 1 at ipv4:127.0.0.1:4242 is dead: silent for 5.2 s
  // (network.lease_s = 5); last step 12"
  std::string Describe(absl::Duration lease) const;
  // The same without the name, for RunFailure::message: "dead (at
  // ipv4:127.0.0.1:4242): silent for 5.2 s (network.lease_s = 5); last
  // step 12".
  std::string Cause(absl::Duration lease) const;
};

class LeaseTable {
 public:
  LeaseTable(int num_servers, int num_workers, absl::Duration lease);

  // Starts (or restarts) the lease of server shard / worker rank `id`,
  // registered from `address`. Ids out of range are ignored.
  void Hold(LeaseHolder holder, int id, absl::Time now,
            const std::string& address);
  // Renews a held lease (no-op otherwise); `step` (workers) only moves
  // forward.
  void Renew(LeaseHolder holder, int id, absl::Time now,
             std::optional<uint64_t> step = std::nullopt);
  // The last step worker `rank` said it works on, if any.
  std::optional<uint64_t> Step(int rank) const;
  // Whether `id` holds a lease now.
  bool Held(LeaseHolder holder, int id) const;
  // Ends the lease (the process is done; its silence is no death).
  void Release(LeaseHolder holder, int id);
  // Ends every lease (the job is over).
  void ReleaseAll();

  // The held lease silent the longest, when it is silent longer than the
  // lease; servers before workers at equal silence.
  std::optional<ExpiredLease> Expired(absl::Time now) const;

  absl::Duration lease() const { return lease_; }

 private:
  struct Entry {
    bool held = false;
    absl::Time last = absl::InfinitePast();
    std::string address;
    uint64_t step = 0;
    bool has_step = false;
  };
  std::vector<Entry>* Of(LeaseHolder holder);
  const absl::Duration lease_;
  std::vector<Entry> servers_;
  std::vector<Entry> workers_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_LEASES_H_
