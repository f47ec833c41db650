// The worker's one training loop over job generations, for every mode.
//
// A job generation is one attempt at the job from a start step: the first
// starts where the job starts; under a failure policy that rolls back
// (training.on_failure: restart, and elastic all-reduce;
// coordinator/failure_policy.h) the coordinator starts a new generation
// after a lost process, from the rollback's checkpoint, and every live
// worker trains again from there. RunGenerations is that story and nothing
// else:
//
//   1. A worker registered into generation g > 0 (a replacement) first waits
//      for g's rollback and starts at its step.
//   2. TrainerFactory::Begin, once.
//   3. Per generation: TrainerFactory::NewTrainer, then the trainer's Run.
//      OK: the final weights are kept and TrainerFactory::Finish decides the
//      outcome. An error under a policy that does not roll back, or once the
//      worker was stopped or the job is over, is the outcome. Otherwise the
//      loop waits (bounded) for the coordinator's next generation; when
//      none comes the error is the outcome, with why none came; when one
//      comes, the factory's resume line is logged and the loop goes on.
//
// What differs between the modes (connecting to the shards or forming the
// ring, stand-ins, the lines logged) lives in the factories
// (worker/ps_trainer_factory.h, worker/ring_trainer_factory.h); how the
// coordinator is asked lives in GenerationLoopOptions, so the loop is
// tested without processes (worker/generation_loop_test.cc).
#ifndef PSTRAIN_WORKER_GENERATION_LOOP_H_
#define PSTRAIN_WORKER_GENERATION_LOOP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"
#include "worker/generation_trainer.h"

namespace pstrain {

// Makes one mode's trainer for each generation. Called by RunGenerations on
// its thread only; borrows nothing beyond a call except what its own
// constructor documents.
class TrainerFactory {
 public:
  virtual ~TrainerFactory() = default;

  // Once, before the first NewTrainer, with the first generation's spec
  // (after a replacement's rollback). An error ends the loop.
  virtual absl::Status Begin(const pstrain::v1::JobSpec& job) = 0;

  // The trainer of generation job.generation(), starting at `start_step`
  // (job.resume_from, when set, holds that step's state): connects what it
  // trains through (the shards, the ring) for this generation. The previous
  // generation's trainer has been destroyed. An error ends the loop.
  virtual absl::StatusOr<std::unique_ptr<GenerationTrainer>> NewTrainer(
      const pstrain::v1::JobSpec& job, int64_t start_step) = 0;

  // After `trainer`'s Run returned OK: the worker's outcome (e.g. handing
  // back the ranks it stood in for).
  virtual absl::Status Finish(const GenerationTrainer& trainer) = 0;

  // The warning logged when the loop moves on to generation `next` after
  // the previous one ended with `failed`.
  virtual std::string ResumeLine(const pstrain::v1::JobSpec& next,
                                 const absl::Status& failed) const = 0;
};

// How the loop learns about generations. Every function must be set; each
// is called on the loop's thread and must return within its own bound.
struct GenerationLoopOptions {
  // The failure policy rolls back (FailurePolicy::RollsBack): a failed
  // generation may be followed by another.
  bool rolls_back = false;
  // The spec of generation `generation` (or a newer one) once its rollback
  // is done (worker/liveness.h AwaitRollback).
  std::function<absl::StatusOr<pstrain::v1::JobSpec>(uint64_t generation)>
      await_rollback;
  // After a failed generation `current`: the spec of the next one, once its
  // rollback is done; an error when none follows (worker/liveness.h
  // AwaitNewGeneration).
  std::function<absl::StatusOr<pstrain::v1::JobSpec>(uint64_t current)>
      await_next;
  // True once no new generation can help: the worker was stopped, its
  // reports were refused, the coordinator is gone or the job is over.
  std::function<bool()> ended;
  // Called with the next generation's spec when this process rolls back
  // in-process (before its trainer is made); may be null.
  std::function<void(const pstrain::v1::JobSpec& next)> on_resume;
};

// Runs generations from `job` (the registration's spec) at `start_step`
// (the registration's start step) until one succeeds or the loop ends, as
// the top of this file says. On OK, and on a Finish error, `final_params`
// holds the last trainer's final weights. Errors: those of the options'
// functions and the factory, unchanged; a trainer's error, unchanged, or
// when no next generation came, with "; no rollback: <why>" appended (same
// code).
absl::Status RunGenerations(pstrain::v1::JobSpec job, int64_t start_step,
                            TrainerFactory* factory,
                            const GenerationLoopOptions& options,
                            const StepCallback& on_step,
                            const std::function<bool()>& should_stop,
                            TensorList* final_params);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_GENERATION_LOOP_H_
