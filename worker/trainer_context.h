// What a worker's trainer factories (worker/ps_trainer_factory.h,
// worker/ring_trainer_factory.h) borrow from its node for every generation.
#ifndef PSTRAIN_WORKER_TRAINER_CONTEXT_H_
#define PSTRAIN_WORKER_TRAINER_CONTEXT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/time/time.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/data/data.h"
#include "worker/liveness.h"
#include "worker/model/model.h"
#include "worker/ps/trainer.h"
#include "worker/reporter.h"
#include "worker/worker_metrics.h"

namespace pstrain {

// Plain data. Every pointer is borrowed and must outlive the factory made
// from it; the factory uses them on the generation loop's thread only.
struct TrainerContext {
  // rank and config; start_step is set per generation.
  TrainerOptions options;
  uint64_t session_id = 0;  // the rank's (RegisterWorkerResponse)
  pstrain::v1::Coordinator::Stub* coord = nullptr;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  absl::Duration rpc_timeout;  // the node's, for calls to the coordinator
  Liveness* liveness = nullptr;
  Reporter* reporter = nullptr;
  WorkerMetrics* metrics = nullptr;
  Model* model = nullptr;
  DataSource* data = nullptr;
  std::function<bool()> stop;  // the node's stop (thread-safe)
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_TRAINER_CONTEXT_H_
