#include "worker/ps_trainer_factory.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_config.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/stand_ins.h"

namespace pstrain {
namespace {

class PsTrainerFactory : public TrainerFactory {
 public:
  PsTrainerFactory(TrainerContext context, absl::Duration report_interval,
                   std::unique_ptr<PsClient>* client)
      : c_(std::move(context)),
        report_interval_(report_interval),
        client_(client) {}

  absl::Status Begin(const pstrain::v1::JobSpec& job) override {
    const JobConfig& config = c_.options.config;
    const bool model_clock =
        config.training().mode() == pstrain::v1::MODE_ASYNC &&
        config.training().clock() == pstrain::v1::TrainingConfig::CLOCK_MODEL;
    PS_LOG_INFO(
        "rank %d of %d: %s model, %d %s, local batch %d x %d "
        "accumulation",
        c_.options.rank, config.job().workers(),
        ConfigName(config.model().type()), config.training().steps(),
        model_clock
            ? absl::StrCat("model steps (training.clock model: until "
                           "the servers took ",
                           config.training().steps() * config.job().workers(),
                           " pushes)")
            : std::string("steps"),
        config.training().local_batch(), config.training().grad_accum_steps());
    // Elastic sync: dead ranks this worker may be asked to stand in for.
    stand_ins_ = MaybeStandIns(c_.coord, c_.creds, job, report_interval_,
                               c_.liveness, c_.stop);
    if (stand_ins_ != nullptr) {
      c_.options.adopt = [s = stand_ins_.get()](int64_t held) {
        return s->Take(held);
      };
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<GenerationTrainer>> NewTrainer(
      const pstrain::v1::JobSpec& job, int64_t start_step) override {
    const JobConfig& config = c_.options.config;
    PsClientOptions client_options;
    client_options.rpc_timeout =
        absl::Seconds(config.network().rpc_timeout_s());
    // The coordinator's value (JobSpec.config) is the one every server
    // applies.
    client_options.barrier_timeout =
        absl::Seconds(config.network().barrier_timeout_s());
    client_options.startup_timeout =
        absl::Seconds(config.network().startup_timeout_s());
    client_options.session_id = c_.session_id;
    client_options.wire_dtype = config.network().wire_dtype();
    client_options.generation = job.generation();
    c_.liveness->set_client(nullptr);
    c_.reporter->set_client(nullptr);
    c_.metrics->set_client(nullptr);
    PS_ASSIGN_OR_RETURN(*client_,
                        ConnectShards(job, config, c_.creds, client_options));
    c_.liveness->set_generation(job.generation());
    c_.reporter->set_generation(job.generation());
    c_.liveness->set_client(client_->get());
    c_.reporter->set_client(client_->get());
    c_.metrics->set_client(client_->get());
    c_.options.start_step = start_step;
    return std::make_unique<Trainer>(c_.options, client_->get(), c_.model,
                                     c_.data);
  }

  absl::Status Finish(const GenerationTrainer&) override {
    return stand_ins_ != nullptr ? stand_ins_->Finish() : absl::OkStatus();
  }

  std::string ResumeLine(const pstrain::v1::JobSpec& next,
                         const absl::Status& failed) const override {
    return absl::StrFormat("resuming at step %d in generation %d (was: %s)",
                           next.start_step(), next.generation(),
                           failed.message());
  }

 private:
  TrainerContext c_;  // options.adopt and start_step set here
  const absl::Duration report_interval_;
  std::unique_ptr<PsClient>* const client_;
  std::unique_ptr<StandInRanks> stand_ins_;  // elastic sync only
};

}  // namespace

std::unique_ptr<TrainerFactory> NewPsTrainerFactory(
    TrainerContext context, absl::Duration report_interval,
    std::unique_ptr<PsClient>* client) {
  return std::make_unique<PsTrainerFactory>(std::move(context), report_interval,
                                            client);
}

}  // namespace pstrain
