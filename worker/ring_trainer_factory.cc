#include "worker/ring_trainer_factory.h"

#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/job_config.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "worker/allreduce/allreduce_trainer.h"
#include "worker/allreduce/checkpointing.h"
#include "worker/allreduce/heap_reuse.h"
#include "worker/allreduce/nccl_allreducer.h"
#include "worker/allreduce/ring_allreduce.h"

namespace pstrain {
namespace {

class RingTrainerFactory : public TrainerFactory {
 public:
  RingTrainerFactory(TrainerContext context,
                     std::shared_ptr<ComputeBackend> backend,
                     RingPeerService* peer, AllReduceLink* link,
                     std::function<bool()> cancelled)
      : c_(std::move(context)),
        backend_(std::move(backend)),
        peer_(peer),
        link_(link),
        cancelled_(std::move(cancelled)) {}

  absl::Status Begin(const pstrain::v1::JobSpec&) override {
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<GenerationTrainer>> NewTrainer(
      const pstrain::v1::JobSpec& job, int64_t start_step) override {
    const JobConfig& config = c_.options.config;
    const uint32_t rank = c_.options.rank;
    c_.liveness->set_generation(job.generation());
    c_.reporter->set_generation(job.generation());
    c_.reporter->set_reducer(nullptr);
    c_.metrics->set_reducer(nullptr);
    link_->reducer.reset();  // borrows the transport
    link_->transport.reset();
    PS_RETURN_IF_ERROR(JoinRing(job.generation()));
    c_.reporter->set_reducer(link_->reducer.get());
    c_.metrics->set_reducer(link_->reducer.get());
    PS_LOG_INFO(
        "rank %d of %d (allreduce): %s model, %d steps from step %d, "
        "local batch %d x %d accumulation",
        rank, config.job().workers(), ConfigName(config.model().type()),
        config.training().steps(), start_step, config.training().local_batch(),
        config.training().grad_accum_steps());
    c_.options.start_step = start_step;
    // Checkpoints and --resume (worker/allreduce/checkpointing.h).
    PS_ASSIGN_OR_RETURN(std::unique_ptr<AllReduceTrainer> trainer,
                        AllReduceTrainer::Create(
                            c_.options, link_->reducer.get(), c_.model, c_.data,
                            AllReduceCheckpointOptionsFromJob(job, rank)));
    return std::unique_ptr<GenerationTrainer>(std::move(trainer));
  }

  absl::Status Finish(const GenerationTrainer& trainer) override {
    PS_LOG_INFO("final weights fingerprint %016x (FNV-1a; equal on every rank)",
                ParamsFingerprint(trainer.final_params()));
    return absl::OkStatus();
  }

  std::string ResumeLine(const pstrain::v1::JobSpec& next,
                         const absl::Status& failed) const override {
    return absl::StrFormat(
        "re-forming the ring: resuming at step %d in generation %d from %s "
        "(was: %s)",
        next.start_step(), next.generation(),
        next.resume_from().empty() ? "the initial state" : next.resume_from(),
        failed.message());
  }

 private:
  // The ring from the coordinator, then the collective, in job generation
  // `generation`, into *link_.
  absl::Status JoinRing(uint64_t generation) {
    const JobConfig& config = c_.options.config;
    const uint32_t rank = c_.options.rank;
    const bool nccl = config.allreduce().backend() == AllReduceConfig::NCCL;
    std::string nccl_id;
    if (nccl) {
      PS_RETURN_IF_ERROR(NcclUsable(*backend_));
      if (rank == 0) {
        PS_ASSIGN_OR_RETURN(nccl_id, NewNcclUniqueId());
      }
    }
    pstrain::v1::GetPeersResponse peers;
    PS_RETURN_IF_ERROR(CallUntil(
        absl::Now() + absl::Seconds(config.network().startup_timeout_s()),
        "the other workers", c_.rpc_timeout, c_.stop,
        [&](grpc::ClientContext* ctx) {
          pstrain::v1::GetPeersRequest req;
          req.set_rank(rank);
          req.set_session_id(c_.session_id);
          req.set_nccl_unique_id(nccl_id);
          return c_.coord->GetPeers(ctx, req, &peers);
        }));
    const int n = peers.peer_addresses_size();
    const absl::Duration timeout =
        absl::Seconds(config.allreduce().timeout_s());
    if (nccl) {
      PS_ASSIGN_OR_RETURN(link_->reducer, CreateNcclAllReducer(
                                              backend_, rank, n,
                                              peers.nccl_unique_id(), timeout));
    } else {
      const std::string& right = peers.peer_addresses((rank + 1) % n);
      PS_ASSIGN_OR_RETURN(
          link_->transport,
          GrpcTransport::Create(rank, n, MakeRingChannel(right, c_.creds),
                                peer_, c_.session_id, peers.left_session_id(),
                                generation));
      // The ring's segment buffers: reuse freed heap (heap_reuse.h).
      if (absl::Status st = KeepFreedHeapForReuse(); !st.ok()) {
        PS_LOG_WARN("ring: %s (freed buffers go back to the kernel)",
                    st.ToString());
      }
      RingOptions ring;
      ring.segment_elems = config.allreduce().segment_bytes() / sizeof(float);
      ring.timeout = timeout;
      ring.cancelled = cancelled_;
      if (config.network().wire_dtype() == pstrain::v1::DTYPE_BF16) {
        ring.wire_dtype = pstrain::v1::DTYPE_BF16;  // a bf16 ring
      }
      link_->reducer =
          std::make_unique<RingAllReducer>(link_->transport.get(), ring);
      PS_LOG_INFO("ring of %d: right neighbour rank %d at %s", n,
                  (rank + 1) % n, right);
    }
    PS_LOG_INFO("all-reduce: %s", link_->reducer->name());
    return absl::OkStatus();
  }

  TrainerContext c_;  // options.start_step set here
  const std::shared_ptr<ComputeBackend> backend_;
  RingPeerService* const peer_;
  AllReduceLink* const link_;
  const std::function<bool()> cancelled_;
};

}  // namespace

std::unique_ptr<TrainerFactory> NewRingTrainerFactory(
    TrainerContext context, std::shared_ptr<ComputeBackend> backend,
    RingPeerService* peer, AllReduceLink* link,
    std::function<bool()> cancelled) {
  return std::make_unique<RingTrainerFactory>(
      std::move(context), std::move(backend), peer, link, std::move(cancelled));
}

}  // namespace pstrain
