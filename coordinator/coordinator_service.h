// The coordinator's gRPC service: registration of servers and workers (with
// Membership), the shard map, per-step reports (with StepLog), the job's end.
// absl::Status inside; each handler maps to grpc::Status once, at its return.
//
// Lifecycle: servers register (RegisterServer) and fetch the JobSpec once all
// K have registered (GetJob waits); each builds its shard and calls
// ServerReady. Workers register (RegisterWorker waits until every shard is
// ready) and get a rank and the JobSpec. Workers Report per-step metrics and
// a final report; when all N have finished (or one failed, or the loss
// diverged with training.fail_on_divergence) the job is over: WaitForEnd()
// returns, and CoordinatorNode collects shard statistics, writes the summary
// and shuts the servers down.
//
// Mode allreduce has no servers: workers register with the address of their
// ring peer service, then GetPeers (blocking until every worker has
// registered) gives each the ring in rank order, plus rank 0's NCCL unique id
// with allreduce.backend nccl. Workers report their ring byte counters as
// bytes_pushed (sent) and bytes_pulled (received).
//
// Session ids (docs/security.md): registration gives each process a random
// id (coordinator/membership.h). Report and GetPeers need the worker's
// current id, ServerReady and GetWorkerSessions the shard's
// (PERMISSION_DENIED, nothing changed). GetPeers hands a worker its left
// neighbour's id (for the ring segments it receives); GetWorkerSessions
// hands a shard every worker's (for pushes and pulls).
//
// Reports: from registered ranks only (NOT_FOUND), idempotent per (worker,
// step), bounded (see coordinator/step_log.h). Completed rows go to
// metrics.csv after the service's mutex is released: the handler queues them
// under the mutex and writes them without it (coordinator/row_writer.h).
//
// The first failure is kept with its cause (which process, what it said);
// later ones do not overwrite it.
//
// Liveness (coordinator/leases.h): a server holds a lease from ServerReady,
// a worker from RegisterWorker until its final report; reports and
// JobStatus calls that name the caller renew it. CheckLeases() (the node
// calls it a few times a second) fails the job naming the first process
// silent for network.lease_s (training.on_failure: fail). A heartbeat from
// a process that holds no lease (a coordinator restarted under it) is
// NOT_FOUND while the job runs.
//
// training.on_failure: restart (coordinator/recovery.h): a process declared
// dead, or a replacement registering for a slot whose holder holds a lease
// (a server from ServerReady, a worker from its registration), starts a new
// generation (JobSpec and
// JobStatusResponse.generation) and frees the slot; CheckLeases fails the
// job when the replacement is not in within training.restart_timeout_s.
// Once every replacement is in, RollbackDue() tells the node to roll every
// shard back (ParameterServer/Rollback) and FinishRollback() ends the
// recovery: JobSpec.resume_from/start_step name the rollback point, and
// GetJob with wait_for_generation returns to the waiting workers. Reports
// of another generation are ABORTED and change nothing.
// Elastic workers (training.on_failure: elastic, coordinator/elastic.h): a
// dead worker does not end the job (unless fewer than training.min_workers
// remain). Its rank departs: its session ends (its process is refused
// everywhere, heartbeats included when they carry the session id) and
// servers learn it from the membership epoch in JobStatus answers, through
// GetWorkerSessions (departed ranks, start steps). Mode sync: a live
// worker is asked, in its heartbeat answers, to take the rank over
// (JobStatusResponse.adopt_ranks; it registers for the rank with `adopt`
// and starts at the rank's first unreported step). Mode async, or nobody
// left to take over: the step log stops expecting the rank's reports. A
// worker registering later for a dead (or taken over) rank gets it: in
// async at once, from the slowest live worker's step; in sync after the
// handover (coordinator/elastic.h): its registration waits until the
// rank's stand-in released it (ReleaseRank) and starts at the first step
// the stand-in did not push.
// Mode allreduce (an elastic ring): the rank's loss also starts a new
// generation, as under restart. The live worker named in adopt_ranks hosts
// the rank as a second ring member (it registers for it with `adopt`, as
// the recovery's replacement); once it is in, every rank rolls back to the
// newest checkpoint and the ring re-forms with N members. A new worker
// process registering later for a hosted rank takes it back: the hosting
// member's session ends and one more generation rolls every rank back.
//
// Thread-safe. Every wait is bounded by the call's deadline and wait_cap.
#ifndef PSTRAIN_COORDINATOR_COORDINATOR_SERVICE_H_
#define PSTRAIN_COORDINATOR_COORDINATOR_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "common/job_token.h"
#include "common/metrics.h"
#include "common/run_record.h"
#include "coordinator/elastic.h"
#include "coordinator/elastic_ranks.h"
#include "coordinator/failure_policy.h"
#include "coordinator/job_outcome.h"
#include "coordinator/leases.h"
#include "coordinator/membership.h"
#include "coordinator/recovery.h"
#include "coordinator/rollbacks.h"
#include "coordinator/row_writer.h"
#include "coordinator/step_log.h"
#include "coordinator/supervision_notes.h"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {

// The largest request the coordinator reads: its requests are small (a
// report holds the step records of about one second), so large junk is
// refused (RESOURCE_EXHAUSTED) before the service sees it.
inline constexpr int kMaxCoordinatorRequestBytes = 1 << 20;

struct CoordinatorOptions {
  JobConfig config =
      DefaultJobConfig();   // effective config (after flag overrides)
  std::string metrics_csv;  // path, or empty for none
  // Notes for a supervisor (psctl; coordinator/supervision_notes.h), or
  // empty for none: "lost GENERATION server|worker ID" when a process is
  // declared lost under training.on_failure restart (a supervisor ends a
  // process still running under that name, e.g. a hung one, and starts it
  // again), "registered worker RANK" when a worker process registers for its
  // rank, and "failed" once the job has failed (a process exiting after that
  // exits because of it).
  std::string supervision_file;
  absl::Duration wait_cap = absl::Seconds(30);  // longest a waiting RPC blocks
  bool progress = true;  // log a progress line about every second
  // Steps that may wait for reports at once (StepLogOptions).
  int64_t max_pending_steps = 1 << 16;
  // Where to publish pstrain_coordinator_* metrics; may be null. Must
  // outlive the service.
  MetricsRegistry* metrics = nullptr;
  // The run's coordinator key (coordinator_key()); empty: a new one.
  std::string coordinator_key;
  // Checkpoints (coordinator/checkpoint_orderer.h), published in the JobSpec:
  // where shards write them ("" = none) and, for a resumed job, the
  // checkpoint every shard restores (resume_from) and its step, where
  // workers and the step log start.
  std::string checkpoint_dir;
  std::string resume_from;
  uint64_t start_step = 0;
};

// The failure a coordinator stopped by a signal records.
inline constexpr absl::string_view kCoordinatorStopped =
    "coordinator stopped by signal";

class CoordinatorService final : public pstrain::v1::Coordinator::Service {
 public:
  // Validates the config; creates metrics.csv when options.metrics_csv is
  // set (INVALID_ARGUMENT naming it when it cannot).
  static absl::StatusOr<std::unique_ptr<CoordinatorService>> Create(
      CoordinatorOptions options);
  ~CoordinatorService() override;

  grpc::Status RegisterServer(
      grpc::ServerContext* context,
      const pstrain::v1::RegisterServerRequest* request,
      pstrain::v1::RegisterServerResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context,
                      const pstrain::v1::GetJobRequest* request,
                      pstrain::v1::JobSpec* response) override;
  grpc::Status ServerReady(grpc::ServerContext* context,
                           const pstrain::v1::ServerReadyRequest* request,
                           pstrain::v1::ServerReadyResponse* response) override;
  grpc::Status RegisterWorker(
      grpc::ServerContext* context,
      const pstrain::v1::RegisterWorkerRequest* request,
      pstrain::v1::RegisterWorkerResponse* response) override;
  grpc::Status Report(grpc::ServerContext* context,
                      const pstrain::v1::ReportRequest* request,
                      pstrain::v1::ReportResponse* response) override;
  grpc::Status JobStatus(grpc::ServerContext* context,
                         const pstrain::v1::JobStatusRequest* request,
                         pstrain::v1::JobStatusResponse* response) override;
  grpc::Status GetPeers(grpc::ServerContext* context,
                        const pstrain::v1::GetPeersRequest* request,
                        pstrain::v1::GetPeersResponse* response) override;
  grpc::Status GetWorkerSessions(
      grpc::ServerContext* context,
      const pstrain::v1::GetWorkerSessionsRequest* request,
      pstrain::v1::GetWorkerSessionsResponse* response) override;
  grpc::Status ReleaseRank(grpc::ServerContext* context,
                           const pstrain::v1::ReleaseRankRequest* request,
                           pstrain::v1::ReleaseRankResponse* response) override;

  // Blocks until the job ends or `deadline`; true if it ended.
  bool WaitForEnd(absl::Time deadline);
  // Ends the job as failed because of `failure` (e.g. the coordinator's
  // start-up timeout, a signal). Only the first failure is kept.
  void Fail(const RunFailure& failure);
  // The coordinator's own stop (SIGTERM, SIGINT; thread-safe, polled). A
  // worker or server that stops on a signal (ReportRequest.stopped,
  // JobStatusRequest.stopping) while it returns true did not cause the end:
  // Ctrl-C reaches every process at once, and the failure recorded is then
  // the coordinator's stop (kCoordinatorStopped), whoever reports first.
  void SetStopRequested(std::function<bool()> stop_requested);
  // True when the job failed on such a stop (a worker's or server's, read
  // before the coordinator's own stop showed): Ctrl-C on a loaded machine
  // may run the worker's report before the coordinator's signal handler.
  bool FailedOnAStopReport() const;
  // The coordinator was stopped too (after FailedOnAStopReport): the record
  // names the coordinator's stop (kCoordinatorStopped) instead.
  void CoordinatorStoppedToo();
  // After a failed job: waits until every worker that held a lease when the
  // job failed (but the one the failure names) has asked JobStatus since,
  // i.e. has learned the end, or until `deadline`; true if all did. A
  // coordinator that exits sooner leaves a worker that missed the end to
  // wait out its lease on a gone coordinator.
  bool AwaitWorkersSawEnd(absl::Time deadline);
  JobOutcome Outcome() const;
  // Declares dead the process whose lease expired at `now`, if any: one log
  // line naming it, and the job fails with it as the cause (a worker with
  // training.on_failure elastic: its rank departs, see above). True if the
  // job failed. No-op once the job is over.
  bool CheckLeases(absl::Time now);
  // True once every worker has registered.
  bool TrainingStarted() const;
  // Blocks until every worker has registered, the job ended or `deadline`;
  // true if training started.
  bool WaitForTrainingStart(absl::Time deadline) const;
  // Server addresses by shard (complete once all servers registered).
  std::vector<std::string> ServerAddresses() const;

  // training.on_failure: restart. A rollback the node should order now:
  // every replacement is in (set while recovering, not ended).
  struct RollbackOrder {
    uint64_t generation = 0;
    std::vector<std::string> addresses;  // by shard
  };
  std::optional<RollbackOrder> RollbackDue() const;
  // Every shard rolled back to `checkpoint` ("" = the initial state) at
  // `step` for `generation`: the recovery ends and the workers resume. False
  // (nothing changed) if another failure started a newer generation.
  bool FinishRollback(uint64_t generation, const std::string& checkpoint,
                      uint64_t step);
  // Where the job started: the rollback point when no checkpoint exists.
  const std::string& start_checkpoint() const { return options_.resume_from; }
  uint64_t start_step() const { return options_.start_step; }
  // This run's coordinator key (RegisterServerResponse.coordinator_key):
  // the coordinator adds it to its Shutdown, Checkpoint and Rollback calls
  // (AddCoordinatorKey), and shards refuse those calls without it.
  const std::string& coordinator_key() const { return coordinator_key_; }

 private:
  CoordinatorService(CoordinatorOptions options, pstrain::v1::JobSpec job,
                     std::unique_ptr<RowWriter> rows);

  absl::Status RegisterServerLocked(
      const pstrain::v1::RegisterServerRequest& request,
      pstrain::v1::RegisterServerResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RegisterWorkerLocked(
      const grpc::ServerContext& context,
      const pstrain::v1::RegisterWorkerRequest& request,
      pstrain::v1::RegisterWorkerResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReportLocked(const pstrain::v1::ReportRequest& request,
                            pstrain::v1::ReportResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status GetPeersLocked(const grpc::ServerContext& context,
                              const pstrain::v1::GetPeersRequest& request,
                              pstrain::v1::GetPeersResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(const RunFailure& failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A process that stops on a signal: `own`, or the coordinator's stop when
  // that is under way too (SetStopRequested).
  RunFailure SignalStopCauseLocked(RunFailure own) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FailLocked(SignalStopCauseLocked(own)), noting a failure on `own`
  // (FailedOnAStopReport).
  void FailOnStopLocked(RunFailure own) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A GetJob waiting for generation `generation` (absl::Condition, called
  // with mu_ held).
  struct GenerationWait {
    const CoordinatorService* service;
    uint64_t generation;
  };
  static bool GenerationReady(GenerationWait* wait)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Fails the job naming the process whose lease expired; true.
  bool FailOnLeaseLocked(const ExpiredLease& dead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Elastic: worker `dead` departs; false when the job fails instead.
  bool DepartLocked(const ExpiredLease& dead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Elastic: a registration for a rank that was registered before.
  absl::Status RejoinLocked(const grpc::ServerContext& context,
                            const pstrain::v1::RegisterWorkerRequest& request,
                            pstrain::v1::RegisterWorkerResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReleaseRankLocked(const pstrain::v1::ReleaseRankRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Elastic: stops expecting reports of ranks nobody can take over
  // (ElasticRanks::AbandonStranded), then queues the rows that completed and
  // ends the job when every worker is done.
  void AbandonLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every rank finished, or (elastic) abandoned.
  bool AllWorkersDoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void QueueRowsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EndedError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllServersRegisteredLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllServersReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StartedOrEndedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every ring peer registered (and the NCCL id published when needed), or
  // the job ended.
  bool PeersKnownLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the queued rows (RowWriter::Flush). Called without mu_ held.
  void FlushRows() ABSL_LOCKS_EXCLUDED(mu_) { rows_->Flush(); }

  const CoordinatorOptions options_;
  const std::string coordinator_key_ = options_.coordinator_key.empty()
                                           ? NewCoordinatorKey()
                                           : options_.coordinator_key;
  // metrics.csv, progress and gauges; queued under mu_, written without it.
  const std::unique_ptr<RowWriter> rows_;

  mutable absl::Mutex mu_;
  pstrain::v1::JobSpec job_ ABSL_GUARDED_BY(mu_);  // shard map filled at start
  Membership members_ ABSL_GUARDED_BY(mu_);
  LeaseTable leases_ ABSL_GUARDED_BY(mu_);
  std::function<bool()> stop_requested_ ABSL_GUARDED_BY(mu_);
  StepLog step_log_ ABSL_GUARDED_BY(mu_);
  // What ElasticRanks asks of the service (called with mu_ held).
  class Events final : public JobEvents {
   public:
    explicit Events(CoordinatorService* s) : s_(*s) {}
    bool ended() const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return s_.ended_;
    }
    absl::Status EndedError() const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return s_.EndedError();
    }
    void Fail(const RunFailure& failure) override
        ABSL_NO_THREAD_SAFETY_ANALYSIS {
      s_.FailLocked(failure);
    }
    void Lose(LeaseHolder holder, int id,
              const std::string& why) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
      s_.rollbacks_->Lose(holder, id, why);
    }

   private:
    CoordinatorService& s_;
  };
  Events events_{this};
  // Null unless training.on_failure is elastic; created after every member
  // it points to.
  std::unique_ptr<ElasticRanks> elastic_ ABSL_GUARDED_BY(mu_);
  // By rank: the step its current registration starts at.
  std::vector<uint64_t> start_steps_ ABSL_GUARDED_BY(mu_);
  std::string nccl_unique_id_ ABSL_GUARDED_BY(mu_);
  absl::Time train_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Workers expected to learn a failed job's end (AwaitWorkersSawEnd); a
  // worker's JobStatus after the end removes it.
  std::vector<bool> end_unseen_ ABSL_GUARDED_BY(mu_);
  JobOutcomeRecorder outcome_ ABSL_GUARDED_BY(mu_);
  SupervisionNotes notes_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_on_stop_report_ ABSL_GUARDED_BY(mu_) = false;
  // training.on_failure (coordinator/failure_policy.h): what a loss and a
  // registration for a held slot do.
  const std::unique_ptr<const FailurePolicy> policy_;
  Recovery recovery_ ABSL_GUARDED_BY(mu_);
  // Lost processes, generations and rollbacks (restart, elastic ring).
  std::unique_ptr<Rollbacks> rollbacks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_COORDINATOR_SERVICE_H_
