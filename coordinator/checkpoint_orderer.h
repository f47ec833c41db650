// The coordinator's side of checkpoints (checkpoint/checkpoint.h): where they
// go, which one a resumed job starts from, and the loop that orders consistent
// cuts and writes each manifest once every shard saved its file.
//
// Ordering (sync and async; async shards hold reads at the cuts:
// server/shard.h, "Checkpoints"): the next cut t is the next multiple of
// checkpoint.every_steps (or, when checkpoint.every_seconds has passed since
// the last checkpoint, the next step the shards can reach, whichever is
// smaller: in sync the largest shard version + 1; in async the largest
// worker clock + 1, which the fastest worker reads only after its next
// push, so the order is normally in first; an async shard keeps holding an
// ordered cut between the orderer's calls, Shard::SnapshotAt, so a slow
// worker does not make it miss). The last cut is always training.steps, the
// final state. The orderer asks
// every shard for cut t (ParameterServer/Checkpoint) before the shards reach
// it; each shard captures the cut itself in the critical section that
// completes step t - 1, so training never pauses. Calls are short (`poll`)
// and repeated until every shard answered; a shard answers a repeat from
// memory. A shard already past t (FAILED_PRECONDITION) means the cut was
// missed: the orderer logs it and moves to a later cut. Once every shard
// answered, the orderer writes MANIFEST.json (job, step, shard map, files
// with size and CRC-32C) and applies checkpoint.keep.
#ifndef PSTRAIN_COORDINATOR_CHECKPOINT_ORDERER_H_
#define PSTRAIN_COORDINATOR_CHECKPOINT_ORDERER_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "common/job_config.h"
#include "coordinator/supervision_notes.h"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {

// The job's checkpoint root: checkpoint.dir, else `out`/ckpt when
// checkpoint.every_* is set (else ""). INVALID_ARGUMENT naming
// checkpoint.dir when checkpoints are on with neither.
absl::StatusOr<std::string> CheckpointRoot(const JobConfig& config,
                                           const std::string& out);

// Where a resumed job starts.
struct ResumePoint {
  std::string dir;    // the complete checkpoint (a step directory)
  uint64_t step = 0;  // its cut: workers start there
  // Newer complete checkpoints passed over because they are damaged, as
  // "DIR: why" (newest first; empty when the newest was usable).
  std::vector<std::string> skipped;
};

// `resume` (--resume): "latest", the newest complete checkpoint under
// `root`; a checkpoint directory (with MANIFEST.json); or a root holding
// step directories (its newest complete one). Reads and verifies every file
// (DATA_LOSS naming a bad one). Through a root ("latest" or a root folder),
// a damaged checkpoint (DATA_LOSS: a file missing, truncated or failing its
// checksum, a bad manifest) is skipped with a logged warning naming it and
// why, for the newest older complete one that reads back whole
// (ResumePoint::skipped); DATA_LOSS only when none does. A checkpoint
// directory given itself is never replaced. Then checks that it fits `job`
// (same tensors, workers, optimizer, the job's mode (sync or async), step <=
// training.steps): FAILED_PRECONDITION naming the difference. Errors start with
// "--resume".
absl::StatusOr<ResumePoint> ResolveResume(CheckpointEnv* env,
                                          const std::string& resume,
                                          const std::string& root,
                                          const pstrain::v1::JobSpec& job);

struct CheckpointOrdererOptions {
  std::string root;  // CheckpointRoot; must not be empty
  uint64_t every_steps = 0;
  double every_seconds = 0;
  uint32_t keep = 0;
  uint64_t start_step = 0;   // the last cut already saved (resume) or 0
  pstrain::v1::JobSpec job;  // name, mode, workers, shards, optimizer, map
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // coordinator role
  std::string coordinator_key;  // CoordinatorService::coordinator_key()
  absl::Duration poll = absl::Seconds(1);  // longest single Checkpoint call
  CheckpointEnv* env = nullptr;            // null: CheckpointEnv::Default()
  // Where each complete checkpoint is noted ("saved checkpoint of step ...",
  // supervision_notes.h) once its manifest is written; "": nowhere.
  std::string supervision_file;
};

// Thread-safe: Run on one thread, Stop and last_saved from any.
class CheckpointOrderer {
 public:
  explicit CheckpointOrderer(CheckpointOrdererOptions options);

  // Orders cuts on the calling thread, shards at `addresses` (by shard id),
  // until the final cut (training.steps) is saved (OK) or Stop() (OK, within
  // about `poll`). An error (a shard that cannot write, a manifest that
  // cannot be written) ends the loop and is returned: the job should fail.
  absl::Status Run(const std::vector<std::string>& addresses);
  void Stop();
  // The last cut whose manifest is written (start_step before any).
  uint64_t last_saved() const;

  // training.on_failure: restart. Interrupt() makes Run return OK within
  // about `poll` (interrupted() then true), so that the node can choose the
  // rollback checkpoint while no manifest is being written; WaitIdle waits
  // (bounded) until Run is not running. Resume(step) after the rollback:
  // cuts continue after `step`. WaitResumed blocks until Resume or Stop;
  // true after Resume.
  void Interrupt();
  bool interrupted() const;
  bool WaitIdle(absl::Time deadline) const;
  void Resume(uint64_t step);
  bool WaitResumed() const;

 private:
  // One round of Checkpoint(cut) calls (each waiting up to `wait`) to the
  // shards not yet in `files`.
  // Returns OK when all are in, UNAVAILABLE to retry, FAILED_PRECONDITION
  // when the cut is missed, ALREADY_EXISTS when it is already complete on
  // disk, anything else as a failure.
  absl::Status Round(uint64_t cut, absl::Duration wait,
                     std::vector<CheckpointFile>* files,
                     std::vector<bool>* have);
  // The largest version (sync) or worker clock (async) over the shards
  // (GetStats), at least `floor`.
  uint64_t MaxVersion(uint64_t floor);
  absl::Status WriteManifestAndRetain(uint64_t cut,
                                      std::vector<CheckpointFile> files);
  bool stopping() const;  // stopped or interrupted
  absl::Status RunCuts(const std::vector<std::string>& addresses);

  const CheckpointOrdererOptions options_;
  CheckpointEnv* const env_;
  SupervisionNotes notes_;  // thread-safe (supervision_notes.h)
  std::vector<std::unique_ptr<pstrain::v1::ParameterServer::Stub>> stubs_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_saved_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_CHECKPOINT_ORDERER_H_
