// A worker's heartbeat and its watch on stopping (Liveness), and the waits
// for a new job generation under training.on_failure: restart.
#ifndef PSTRAIN_WORKER_LIVENESS_H_
#define PSTRAIN_WORKER_LIVENESS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/ps/ps_client.h"

namespace pstrain {

// The worker's heartbeat and its watch on stopping: a thread that renews the
// worker's lease (RunCoordinatorLease, JobStatus naming its rank and step)
// about every min(1 s, lease / 4), and polls `stop` every 50 ms. When `stop`
// turns true, the coordinator stays silent for the lease, or it says the job
// is over, every parameter-server call in flight is cancelled, so that no
// wait (a pull blocked on a barrier) outlasts it by more than ~50 ms.
// Thread-safe.
class Liveness {
 public:
  // `session_id`: the rank's session (RegisterWorkerResponse), which every
  // heartbeat carries from the first: the coordinator renews no lease
  // without it.
  Liveness(pstrain::v1::Coordinator::Stub* coord, uint32_t rank,
           uint64_t session_id, absl::Duration lease,
           absl::Duration rpc_timeout, std::function<bool()> stop);
  ~Liveness();

  // The rank this heartbeat names (the process's own, for its stand-ins
  // and hosted ring members: RegisterWorkerRequest.adopter).
  uint32_t rank() const { return rank_; }
  void set_step(uint64_t step) { step_.store(step); }
  // A new session id for the heartbeats to carry. With it the coordinator
  // refuses a replaced process (PERMISSION_DENIED: this process stops) and
  // names the ranks to take over (elastic sync, TakeAdoptions).
  void set_session(uint64_t session_id) { session_id_.store(session_id); }
  // training.on_failure: elastic: the dead ranks the coordinator asked this
  // worker to take over, each returned once.
  std::vector<uint32_t> TakeAdoptions();
  // Elastic sync, a stand-in's heartbeat for the rank it stands in for:
  // whether the last answer asked to release the rank to a new worker.
  bool release_requested() const { return release_.load(); }
  // Elastic: rank `d` was handed back; it may be offered again.
  void Forget(uint32_t d);
  // The client to cancel when stopping (null: none); must outlive this.
  void set_client(PsClient* client);
  // training.on_failure: restart. The generation this worker trains in;
  // a heartbeat that reports a newer one cancels the client's calls, and
  // rollback_pending() turns true until set_generation catches up.
  void set_generation(uint64_t generation);
  bool rollback_pending() const;
  // True once training must end: stopped, coordinator gone or job over.
  bool ended() const;
  // Why (empty while !ended()); lost_coordinator() when it was silent.
  std::string reason() const;
  bool lost_coordinator() const;

 private:
  void End(const std::string& reason, bool lost);
  void SeeGeneration(uint64_t generation);
  void SeeAdoptions(const pstrain::v1::JobStatusResponse& status);
  void Loop();

  pstrain::v1::Coordinator::Stub* const coord_;
  const uint32_t rank_;
  const absl::Duration lease_, rpc_timeout_;
  const std::function<bool()> stop_;
  std::atomic<uint64_t> step_{0};
  std::atomic<uint64_t> session_id_{0};
  std::atomic<bool> release_{false};
  mutable absl::Mutex mu_;
  std::vector<uint32_t> adopt_ ABSL_GUARDED_BY(mu_);  // not taken yet
  std::set<uint32_t> adopt_seen_ ABSL_GUARDED_BY(mu_);
  PsClient* client_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool lost_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t seen_ ABSL_GUARDED_BY(mu_) = 0;  // newest from a heartbeat
  absl::Notification done_;
  std::thread thread_;  // last: starts once everything above exists
};

// training.on_failure: restart: the job spec of generation `generation` (or
// a newer one) once its rollback is done, from GetJob, which waits for it.
// Bounded by training.restart_timeout_s + network.rpc_timeout_s; CANCELLED
// on `stop`; FAILED_PRECONDITION when the job ended meanwhile.
absl::StatusOr<pstrain::v1::JobSpec> AwaitRollback(
    pstrain::v1::Coordinator::Stub* coord, uint64_t generation,
    const JobConfig& config, const std::function<bool()>& stop);

// After a failed step under training.on_failure: restart: waits up to
// 2 x network.lease_s + 1 s for the coordinator to start a generation after
// `current` (a peer died: its lease runs out), then for its rollback.
// FAILED_PRECONDITION when none starts (the failure was this worker's own),
// the job ended, or `stop`.
absl::StatusOr<pstrain::v1::JobSpec> AwaitNewGeneration(
    pstrain::v1::Coordinator::Stub* coord, const Liveness& liveness,
    uint64_t current, const JobConfig& config,
    const std::function<bool()>& stop);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_LIVENESS_H_
