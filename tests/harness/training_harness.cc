#include "tests/harness/training_harness.h"

#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "tests/harness/test_cluster.h"
#include "worker/data/data.h"
#include "worker/model/model.h"
#include "worker/ps/trainer.h"

namespace pstrain {

JobConfig SmallSoftmaxJob(pstrain::v1::ConsistencyMode mode, int64_t staleness,
                          int workers, int64_t local_batch, uint64_t steps) {
  JobConfig config = DefaultJobConfig();
  config.mutable_job()->set_workers(workers);
  config.mutable_job()->set_servers(2);
  config.mutable_training()->set_mode(mode);
  config.mutable_training()->set_staleness(staleness);
  config.mutable_model()->set_type(ModelConfig::SOFTMAX);
  config.mutable_model()->set_input_dim(16);
  config.mutable_model()->set_num_classes(4);
  config.mutable_model()->clear_hidden();
  config.mutable_data()->set_num_features(16);
  config.mutable_data()->set_num_classes(4);
  config.mutable_training()->set_local_batch(local_batch);
  config.mutable_training()->set_steps(steps);
  config.mutable_server()->set_chunk_bytes(64);
  config.mutable_training()->mutable_optimizer()->set_base_lr(0.1);
  FinalizeJobConfig(&config);
  return config;
}

absl::Status OnThreads(int n, const std::function<absl::Status(int)>& body) {
  std::vector<absl::Status> st(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { st[r] = body(r); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!st[r].ok()) {
      return absl::Status(st[r].code(),
                          absl::StrCat("worker ", r, ": ", st[r].message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorList>> RunParameterServerJob(
    const JobConfig& config) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<TestCluster> cluster,
                      TestCluster::Start(config));
  PsClientOptions client_options;
  client_options.rpc_timeout = absl::Seconds(config.network().rpc_timeout_s());
  client_options.barrier_timeout =
      absl::Seconds(config.network().barrier_timeout_s());
  client_options.push_streams = PushStreams(config);  // as workers do
  client_options.pull_streams = PullStreams(config);
  std::vector<TensorList> finals(config.job().workers());
  PS_RETURN_IF_ERROR(
      OnThreads(config.job().workers(), [&](int r) -> absl::Status {
        PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                            cluster->NewClient(client_options, r));
        PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                            Model::Create(config.model()));
        PS_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                            DataSource::Create(config.data()));
        TrainerOptions options;
        options.rank = r;
        options.config = config;
        Trainer trainer(options, client.get(), model.get(), data.get());
        PS_RETURN_IF_ERROR(trainer.Run(nullptr, nullptr));
        finals[r] = trainer.final_params();
        return absl::OkStatus();
      }));
  return finals;
}

absl::StatusOr<Learner> Learner::Create(const JobConfig& config) {
  Learner l;
  PS_ASSIGN_OR_RETURN(l.model_, Model::Create(config.model()));
  PS_ASSIGN_OR_RETURN(l.data_, DataSource::Create(config.data()));
  return l;
}

absl::Status Learner::Gradient(const TensorList& params, uint64_t step,
                               int rank, int world, int64_t local_batch,
                               TensorList* grads) {
  PS_ASSIGN_OR_RETURN(
      Batch batch,
      data_->TrainBatch(FirstExampleId(step, rank, world, local_batch),
                        local_batch));
  PS_ASSIGN_OR_RETURN(double loss,
                      model_->LossAndGradient(params, batch, grads));
  if (!std::isfinite(loss)) return absl::InternalError("loss is not finite");
  return absl::OkStatus();
}

double MaxAbsDiff(const TensorList& a, const TensorList& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    if (a[t].size() != b[t].size()) return INFINITY;
    for (size_t i = 0; i < a[t].size(); ++i) {
      m = std::max(m, std::fabs(static_cast<double>(a[t][i]) - b[t][i]));
    }
  }
  return m;
}

absl::StatusOr<TensorList> InitialParams(const ModelConfig& model) {
  PS_ASSIGN_OR_RETURN(std::vector<pstrain::v1::TensorSpec> specs,
                      ModelParamSpecs(model));
  TensorList out;
  for (const auto& spec : specs) {
    std::vector<float> v(NumElements(spec));
    InitialValues(spec, 0, v.size(), v.data());
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace pstrain
