#include "worker/generation_loop.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {

absl::Status RunGenerations(pstrain::v1::JobSpec job, int64_t start_step,
                            TrainerFactory* factory,
                            const GenerationLoopOptions& options,
                            const StepCallback& on_step,
                            const std::function<bool()>& should_stop,
                            TensorList* final_params) {
  if (options.rolls_back && job.generation() > 0) {
    // A replacement: it starts where the rollback puts every worker.
    PS_ASSIGN_OR_RETURN(job, options.await_rollback(job.generation()));
    start_step = static_cast<int64_t>(job.start_step());
  }
  PS_RETURN_IF_ERROR(factory->Begin(job));
  for (;;) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<GenerationTrainer> trainer,
                        factory->NewTrainer(job, start_step));
    const absl::Status trained = trainer->Run(on_step, should_stop);
    if (trained.ok()) {
      *final_params = trainer->final_params();
      return factory->Finish(*trainer);
    }
    if (!options.rolls_back || options.ended()) return trained;
    // A failed call may be a sign of a dead peer: wait (bounded) for the
    // coordinator's verdict, then roll back with everyone.
    absl::StatusOr<pstrain::v1::JobSpec> next =
        options.await_next(job.generation());
    if (!next.ok()) {
      return absl::Status(trained.code(),
                          absl::StrCat(trained.message(), "; no rollback: ",
                                       next.status().message()));
    }
    job = *std::move(next);
    start_step = static_cast<int64_t>(job.start_step());
    PS_LOG_WARN("%s", factory->ResumeLine(job, trained));
    if (options.on_resume) options.on_resume(job);
  }
}

}  // namespace pstrain
