// Where a worker computes more than its own rank under
// training.on_failure: elastic (docs/failures-and-recovery.md): the dead
// ranks it stands in for in mode sync (StandInRanks), and the dead ranks its
// process hosts as extra ring members in mode allreduce (HostedRanks).
#ifndef PSTRAIN_WORKER_STAND_INS_H_
#define PSTRAIN_WORKER_STAND_INS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/liveness.h"
#include "worker/ps/ps_client.h"
#include "worker/ps/trainer.h"
#include "worker/reporter.h"
#include "worker/worker_node.h"

namespace pstrain {

// A client of the job's shards: one channel per shard, and with
// network.push_streams > 1 (PushStreams) one more connection per extra part
// of a push.
absl::StatusOr<std::unique_ptr<PsClient>> ConnectShards(
    const pstrain::v1::JobSpec& job, const JobConfig& config,
    const std::shared_ptr<grpc::ChannelCredentials>& creds,
    PsClientOptions options);

// training.on_failure: elastic, mode sync (docs/failures-and-recovery.md): the
// dead ranks this worker stands in for. Take() registers each rank the
// coordinator named in a heartbeat (RegisterWorkerRequest.adopt, a new
// session id) and gives the trainer what it needs to compute the rank's
// steps beside its own: a client with the rank's session, and a reporter
// and heartbeat of the rank's own, so the coordinator counts the rank's
// records and keeps its lease. Used by the training thread only.
class StandInRanks {
 public:
  StandInRanks(pstrain::v1::Coordinator::Stub* coord,
               std::shared_ptr<grpc::ChannelCredentials> creds,
               const pstrain::v1::JobSpec& job, absl::Duration report_interval,
               Liveness* own, std::function<bool()> stop)
      : coord_(coord),
        creds_(std::move(creds)),
        job_(job),
        config_(job.config()),
        rpc_timeout_(absl::Seconds(config_.network().rpc_timeout_s())),
        report_interval_(report_interval),
        own_(own),
        stop_(std::move(stop)) {}

  // The ranks to stand in for from the weights of step `held` on (see
  // AdoptFn in worker/ps/trainer.h). A rank someone else got meanwhile is
  // skipped with a log line.
  absl::StatusOr<std::vector<StandIn>> Take(int64_t held);

  // Handover (coordinator/elastic.h): when the coordinator asked for rank
  // `d` back, reports its records, tells the coordinator (ReleaseRank) that
  // every step before `next_step` was pushed, and stops standing in for it:
  // true. False to go on (not asked, or the coordinator refused: logged).
  // Called by the trainer between two steps.
  absl::StatusOr<bool> MaybeRelease(uint32_t d, int64_t next_step);

  // After training: the ranks' last records and done reports.
  absl::Status Finish();

 private:
  struct Rank {
    uint32_t rank = 0;
    uint64_t session_id = 0;
    std::unique_ptr<PsClient> client;
    std::unique_ptr<Reporter> reporter;
    std::unique_ptr<Liveness> liveness;  // last: stops before the client
  };

  absl::StatusOr<std::optional<StandIn>> Register(uint32_t d, int64_t held);

  // The rank's heartbeat (with its session): keeps its lease.
  std::unique_ptr<Liveness> MakeLiveness(const Rank& r, uint64_t step);

  pstrain::v1::Coordinator::Stub* const coord_;
  const std::shared_ptr<grpc::ChannelCredentials> creds_;
  const pstrain::v1::JobSpec job_;
  const JobConfig config_;
  const absl::Duration rpc_timeout_, report_interval_;
  Liveness* const own_;
  const std::function<bool()> stop_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// The stand-in ranks of a worker of a job with training.on_failure: elastic
// in mode sync; null otherwise.
std::unique_ptr<StandInRanks> MaybeStandIns(
    pstrain::v1::Coordinator::Stub* coord,
    const std::shared_ptr<grpc::ChannelCredentials>& creds,
    const pstrain::v1::JobSpec& job, absl::Duration report_interval,
    Liveness* own, const std::function<bool()>& stop);

// training.on_failure: elastic, mode allreduce (docs/failures-and-recovery.md):
// the dead ranks this worker process hosts. A thread takes the ranks the
// coordinator names in this worker's heartbeat answers (it looks every
// 50 ms) and runs a WorkerNode for each, registered with `adopt`: a second
// ring member with a ring peer service on a port of its own, its own
// replica, data slice, heartbeat and reports, which waits for the rollback
// like a replacement. A member whose session ends (a new worker took its
// rank back) just stops, and the rank may be offered again later; any other
// error of a member is its own to report (it fails the job).
// Members end with the job, as any worker does (its end, its failure, the
// coordinator's silence, `stop`): nothing else stops them, so the host's
// own error report, which may be what ends the job, goes out before it
// waits for them.
class HostedRanks {
 public:
  // `host` is the hosting node's options; `own` its heartbeat, which must
  // outlive the polling (StopTaking).
  HostedRanks(WorkerNodeOptions host, Liveness* own, std::function<bool()> stop)
      : host_(std::move(host)),
        own_(own),
        stop_(std::move(stop)),
        thread_([this] { Loop(); }) {}
  // Joins every member (each of their waits is bounded).
  ~HostedRanks() {
    StopTaking();
    for (const std::unique_ptr<Member>& m : members_) m->thread.join();
  }

  // Takes no more ranks; `own` is no longer used.
  void StopTaking();

 private:
  struct Member {
    uint32_t rank = 0;
    std::unique_ptr<WorkerNode> node;
    std::atomic<bool> over{false};
    std::thread thread;
  };

  void Loop();

  void Start(uint32_t d);

  const WorkerNodeOptions host_;
  Liveness* const own_;
  const std::function<bool()> stop_;
  // Touched by the polling thread, then (once it is joined) by the
  // destructor.
  std::vector<std::unique_ptr<Member>> members_;
  absl::Notification done_;
  std::thread thread_;  // last: starts once everything above exists
};

// The hosted ranks of a worker of a job with training.on_failure: elastic
// in mode allreduce; null otherwise, and for a hosted member itself.
std::unique_ptr<HostedRanks> MaybeHostedRanks(
    const pstrain::v1::JobSpec& job, const WorkerNodeOptions& options,
    Liveness* own, const std::function<bool()>& stop);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_STAND_INS_H_
