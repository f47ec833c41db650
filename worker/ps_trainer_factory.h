// The parameter-server modes' TrainerFactory (worker/generation_loop.h):
// per generation a client of the generation's shards and a Trainer
// (worker/ps/trainer.h) over it; under training.on_failure: elastic in mode
// sync, the dead ranks this worker stands in for (worker/stand_ins.h).
#ifndef PSTRAIN_WORKER_PS_TRAINER_FACTORY_H_
#define PSTRAIN_WORKER_PS_TRAINER_FACTORY_H_

#include <memory>

#include "absl/time/time.h"
#include "worker/generation_loop.h"
#include "worker/ps/ps_client.h"
#include "worker/trainer_context.h"

namespace pstrain {

// `client` holds the current generation's client: the factory replaces it
// per generation (the liveness, reporter and metrics are told first), and
// the caller keeps it past the factory (the liveness may cancel it, and the
// final report reads its byte counters). `report_interval`: the stand-ins'
// reporters'.
std::unique_ptr<TrainerFactory> NewPsTrainerFactory(
    TrainerContext context, absl::Duration report_interval,
    std::unique_ptr<PsClient>* client);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PS_TRAINER_FACTORY_H_
