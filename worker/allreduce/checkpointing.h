// Checkpoints in mode allreduce (docs/checkpoints.md, "Checkpoints in mode
// allreduce"): the same on-disk format as the parameter-server modes
// (checkpoint/checkpoint.h), written and read with the same code, for a job
// that has no servers.
//
// The state: after every step all ranks hold bit-identical weights and
// optimizer slots (worker/allreduce/allreduce_trainer.h), so one replica is
// the whole job's state. It is stored as a checkpoint of ONE shard (the
// shard map for K = 1 with every tensor a single whole chunk): one file
// `shard-00000-of-00001.ckpt` with one record per tensor (offset 0, the
// whole tensor: weights, then the slots slot-major), header cut = version =
// schedule_step = the step (the state after step cut - 1, as a sync cut),
// every worker clock = cut, no sync exponent; and MANIFEST.json with mode
// "allreduce", num_shards 1. Records are keyed by tensor ranges as always, so
// `ps_checkpoint inspect` and `export` read it unchanged.
//
// Who writes: rank 0 alone (every rank holds the same bytes), at the end of
// the step that completes the cut, through SaveCheckpoint: NAME.tmp, fsync,
// rename, directory fsync, manifest last, then checkpoint.keep. Who reads:
// every rank, from the shared file system (the PS modes' servers share it
// with the coordinator the same way): no collective is added to the ring,
// and every rank verifies the CRCs itself.
#ifndef PSTRAIN_WORKER_ALLREDUCE_CHECKPOINTING_H_
#define PSTRAIN_WORKER_ALLREDUCE_CHECKPOINTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// What a rank needs to take and resume checkpoints; from the JobSpec
// (AllReduceCheckpointOptionsFromJob). Plain data.
struct AllReduceCheckpointOptions {
  pstrain::v1::JobSpec job;  // tensors, optimizer, workers, name
  std::string root;          // JobSpec.checkpoint_dir; "" = none written
  uint64_t every_steps = 0;  // checkpoint.every_steps; 0: off
  double every_seconds = 0;  // checkpoint.every_seconds; 0: off
  uint32_t keep = 0;         // checkpoint.keep
  bool writer = false;       // rank 0 writes; the others never do
  // JobSpec.resume_from ("" = a fresh start); its step is JobSpec.start_step
  // (TrainerOptions.start_step).
  std::string resume_from;
  CheckpointEnv* env = nullptr;  // null: CheckpointEnv::Default()
};

// The options for rank `rank` of `job`.
AllReduceCheckpointOptions AllReduceCheckpointOptionsFromJob(
    const pstrain::v1::JobSpec& job, uint32_t rank);

// The manifest of an all-reduce checkpoint of `job` at cut `step`: mode
// "allreduce", one shard whose chunks are the whole tensors; files empty.
absl::StatusOr<CheckpointManifest> AllReduceManifest(
    const pstrain::v1::JobSpec& job, uint64_t step);

// One replica's state: tensors in the job's order (shard_map.tensors).
struct ReplicaView {
  // Every tensor's weights back to back (the trainer's host buffer).
  absl::Span<const float> weights;
  // Per tensor, num_slots * elements values, slot-major (Optimizer layout).
  const std::vector<std::vector<float>>* slots = nullptr;
};

// Writes the checkpoint of cut `step` under `root` (SaveCheckpoint: the
// shard file, then the manifest, then retention with `keep`) and returns its
// directory. ALREADY_EXISTS when that checkpoint is already complete on disk
// (it is never rewritten); INVALID_ARGUMENT when `state` does not match the
// job's tensors.
absl::StatusOr<std::string> SaveReplicaCheckpoint(
    CheckpointEnv* env, const std::string& root,
    const pstrain::v1::JobSpec& job, uint64_t step, const ReplicaView& state,
    uint32_t keep);

// Reads the complete checkpoint in `dir` into `weights` (per tensor) and
// `slots` (per tensor, Optimizer layout), both resized to the job's tensors.
// Checks that it fits `job`: mode allreduce (a PS checkpoint is
// FAILED_PRECONDITION: sync shards sum with a fixed-point accumulator, so
// the trajectories differ in the last bits), the same tensors, workers and
// optimizer, and its step equals `step`. Errors name `dir`; on an error
// `weights` and `slots` are unchanged.
absl::Status LoadReplicaCheckpoint(CheckpointEnv* env, const std::string& dir,
                                   const pstrain::v1::JobSpec& job,
                                   uint64_t step,
                                   std::vector<std::vector<float>>* weights,
                                   std::vector<std::vector<float>>* slots);

// When rank 0 checkpoints: after the step that completes cut `cut` when cut
// is a multiple of every_steps, the last step (training.steps), or once
// every_seconds passed since the last checkpoint (or the start). Only the
// writer needs this: the cut is rank 0's alone to choose, every rank holding
// the same state. Not thread-safe.
class AllReduceCheckpointSchedule {
 public:
  AllReduceCheckpointSchedule(const AllReduceCheckpointOptions& options,
                              uint64_t steps, absl::Time start);
  bool Due(uint64_t cut, absl::Time now) const;
  void Saved(absl::Time now) { last_ = now; }

 private:
  const uint64_t every_steps_;
  const double every_seconds_;
  const uint64_t steps_;
  const bool on_;
  absl::Time last_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_CHECKPOINTING_H_
