// What crosses between the host and the compute backend per training step
// (issue 12, item 8), counted by a CountingBackend around the real backend:
//   - parameter servers: the pulled weights go in once per step (not once
//     per micro-batch) from the pinned buffer the pull decodes into, the
//     micro-batches go in, and the gradient comes out once, straight into
//     the pinned buffer the push encodes from;
//   - all-reduce with a reducer that sums on the device (NCCL): the same
//     weights and batches in, one float in (the sample count), the reduced
//     gradient out once into pinned memory, and no host round trip before
//     the reduction; with a host reducer (the ring): the gradient out once.
// Each case runs on the CPU backend everywhere and on CUDA where a GPU is
// visible (elsewhere it says why it skips; tests/gpu/check.sh runs it on a
// GPU and fails on a skip). The CPU twin keeps its numbers: the accumulated
// gradient on the backend equals, bit for bit, the host accumulation it
// replaced.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/job_config.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "tests/gpu/counting_backend.h"
#include "tests/harness/test_cluster.h"
#include "worker/allreduce/allreduce_trainer.h"
#include "worker/allreduce/allreducer.h"
#include "worker/compute/compute_backend.h"
#include "worker/data/data.h"
#include "worker/model/local_step.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"
#include "worker/ps/trainer.h"

namespace pstrain {
namespace {

constexpr int64_t kBatch = 8;
constexpr int64_t kDim = 16;
constexpr int64_t kAccum = 3;
constexpr int64_t kSteps = 4;

JobConfig MakeConfig(pstrain::v1::ConsistencyMode mode) {
  JobConfig config = DefaultJobConfig();
  config.mutable_job()->set_name("device-transfer");
  config.mutable_training()->set_mode(mode);
  config.mutable_job()->set_workers(1);
  config.mutable_job()->set_servers(2);
  config.mutable_training()->set_local_batch(kBatch);
  config.mutable_training()->set_grad_accum_steps(kAccum);
  config.mutable_training()->set_steps(kSteps);
  config.mutable_model()->set_type(ModelConfig::MLP);
  config.mutable_model()->set_input_dim(kDim);
  SetList(config.mutable_model()->mutable_hidden(), {32});
  config.mutable_model()->set_num_classes(4);
  config.mutable_model()->set_seed(3);
  config.mutable_data()->set_source(DataConfig::SYNTHETIC);
  config.mutable_data()->set_num_features(kDim);
  config.mutable_data()->set_num_classes(4);
  config.mutable_data()->set_seed(11);
  config.mutable_data()->set_test_examples(0);
  config.mutable_server()->set_chunk_bytes(256);
  config.mutable_network()->set_rpc_timeout_s(10);
  config.mutable_network()->set_barrier_timeout_s(20);
  config.mutable_allreduce()->set_timeout_s(10);
  FinalizeJobConfig(&config);
  return config;
}

// Floats of the micro-batches of one step (features and labels).
constexpr int64_t kBatchFloats = kAccum * (kBatch * kDim + kBatch);

// The per-step differences of the snapshots taken at each step's end.
std::vector<CopyCounts> PerStep(const std::vector<CopyCounts>& at_end) {
  std::vector<CopyCounts> steps;
  CopyCounts before;
  for (const CopyCounts& c : at_end) {
    steps.push_back(c - before);
    before = c;
  }
  return steps;
}

class Transfers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ComputeBackend>> inner =
        CreateComputeBackend(GetParam());
    if (GetParam() == "cuda" && absl::IsFailedPrecondition(inner.status())) {
      GTEST_SKIP() << "no CUDA device here (" << inner.status().message()
                   << "); tests/gpu/check.sh runs this case on a GPU";
    }
    ASSERT_TRUE(inner.ok()) << inner.status();
    inner_ = std::move(*inner);
    counting_ = std::make_unique<CountingBackend>(inner_.get());
  }

  std::unique_ptr<ComputeBackend> inner_;
  std::unique_ptr<CountingBackend> counting_;  // destroyed before inner_
};

TEST_P(Transfers, ParameterServerStepMovesWeightsInOnceAndGradientOutOnce) {
  const JobConfig config = MakeConfig(pstrain::v1::MODE_SYNC);
  absl::StatusOr<std::unique_ptr<TestCluster>> cluster =
      TestCluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  PsClientOptions client_options;
  client_options.rpc_timeout = absl::Seconds(config.network().rpc_timeout_s());
  client_options.barrier_timeout =
      absl::Seconds(config.network().barrier_timeout_s());
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      (*cluster)->NewClient(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(config.model(), counting_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<DataSource>> data =
      DataSource::Create(config.data());
  ASSERT_TRUE(data.ok()) << data.status();

  TrainerOptions options;
  options.config = config;
  Trainer trainer(options, client->get(), model->get(), data->get());
  std::vector<CopyCounts> at_end;
  ASSERT_TRUE(trainer
                  .Run(
                      [&](const pstrain::v1::StepMetrics&) {
                        at_end.push_back(counting_->counts());
                        return absl::OkStatus();
                      },
                      nullptr)
                  .ok());
  ASSERT_EQ(at_end.size(), kSteps + 1);  // the steps, then the final pull
  const int64_t tensors = (*model)->params().size();
  const int64_t total = (*model)->num_params();
  const std::vector<CopyCounts> steps = PerStep(at_end);
  for (int64_t s = 0; s < kSteps; ++s) {
    const CopyCounts& d = steps[s];
    SCOPED_TRACE(
        absl::StrCat("step ", s, " on ", GetParam(), ": ", d.ToString()));
    // In: each pulled tensor once, and the micro-batches (x and y each).
    EXPECT_EQ(d.uploads, tensors + 2 * kAccum);
    EXPECT_EQ(d.uploaded, total + kBatchFloats);
    // Out: the accumulated gradient, once, into the pinned push buffer.
    EXPECT_EQ(d.downloads, 1);
    EXPECT_EQ(d.downloaded, total);
    EXPECT_EQ(d.staged_downloads, 0);
    // The pull decodes into pinned memory, so only the micro-batches (from
    // the data source's vectors) are staged.
    EXPECT_EQ(d.staged_uploads, 2 * kAccum);
    EXPECT_EQ(d.sums, kAccum);  // the micro-batches' losses
  }
  // The final pull: the weights in once, nothing out (no test set).
  EXPECT_EQ(steps[kSteps].uploaded, total) << steps[kSteps].ToString();
  EXPECT_EQ(steps[kSteps].downloads, 0) << steps[kSteps].ToString();
}

// A reducer for one rank (the sum over one rank is the data itself) that
// records where it was asked to sum.
class OneRankReducer : public AllReducer {
 public:
  explicit OneRankReducer(bool on_device) : on_device_(on_device) {}
  std::string name() const override { return "one rank"; }
  bool sums_on_device() const override { return on_device_; }
  absl::Status SumInPlaceOnDevice(uint64_t, DeviceBuffer* data,
                                  int64_t n) override {
    if (!on_device_) return absl::InternalError("not on the device");
    ++device_sums;
    last_device_data = data->data();
    last_n = n;
    return absl::OkStatus();
  }
  absl::Status SumInPlace(uint64_t, absl::Span<float> data) override {
    ++host_sums;
    last_n = data.size();
    return absl::OkStatus();
  }
  absl::Status Close() override { return absl::OkStatus(); }
  uint64_t bytes_sent() const override { return 0; }
  uint64_t bytes_received() const override { return 0; }

  int device_sums = 0, host_sums = 0;
  const float* last_device_data = nullptr;
  int64_t last_n = 0;

 private:
  const bool on_device_;
};

// Runs an all-reduce job of one rank through `reducer` on `counting`, with
// the model it creates in *model; the per-step copies (the steps, then the
// final evaluation), and the final weights in *final.
std::vector<CopyCounts> RunAllReduce(CountingBackend* counting,
                                     AllReducer* reducer,
                                     std::unique_ptr<Model>* model,
                                     TensorList* final) {
  const JobConfig config = MakeConfig(pstrain::v1::MODE_ALLREDUCE);
  absl::StatusOr<std::unique_ptr<Model>> created =
      Model::Create(config.model(), counting);
  EXPECT_TRUE(created.ok()) << created.status();
  if (!created.ok()) return {};
  *model = std::move(*created);
  absl::StatusOr<std::unique_ptr<DataSource>> data =
      DataSource::Create(config.data());
  EXPECT_TRUE(data.ok()) << data.status();
  if (!data.ok()) return {};
  TrainerOptions options;
  options.config = config;
  absl::StatusOr<std::unique_ptr<AllReduceTrainer>> trainer =
      AllReduceTrainer::Create(options, reducer, model->get(), data->get());
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  std::vector<CopyCounts> at_end;
  const absl::Status run = (*trainer)->Run(
      [&](const pstrain::v1::StepMetrics&) {
        at_end.push_back(counting->counts());
        return absl::OkStatus();
      },
      nullptr);
  EXPECT_TRUE(run.ok()) << run;
  *final = (*trainer)->params();
  return PerStep(at_end);
}

TEST_P(Transfers, AllReduceOnTheDeviceHasNoHostRoundTripBeforeTheSum) {
  OneRankReducer on_device(/*on_device=*/true);
  std::unique_ptr<Model> owned;
  TensorList device_final;
  const std::vector<CopyCounts> steps =
      RunAllReduce(counting_.get(), &on_device, &owned, &device_final);
  ASSERT_EQ(steps.size(), kSteps + 1);
  Model* model = owned.get();
  const int64_t tensors = model->params().size();
  const int64_t total = model->num_params();
  EXPECT_EQ(on_device.device_sums, kSteps);
  EXPECT_EQ(on_device.host_sums, 0);
  // In place on the model's gradient, with the sample count behind it.
  EXPECT_EQ(on_device.last_device_data, model->gradient()->data());
  EXPECT_EQ(on_device.last_n, total + 1);
  for (int64_t s = 0; s < kSteps; ++s) {
    const CopyCounts& d = steps[s];
    SCOPED_TRACE(
        absl::StrCat("step ", s, " on ", GetParam(), ": ", d.ToString()));
    // In: the weights once, the micro-batches, the sample count (1 float).
    EXPECT_EQ(d.uploads, tensors + 2 * kAccum + 1);
    EXPECT_EQ(d.uploaded, total + kBatchFloats + 1);
    // Staged: the micro-batches and the count; the weights come from the
    // replica's pinned buffer.
    EXPECT_EQ(d.staged_uploads, 2 * kAccum + 1);
    // Out: only the reduced gradient and count, once, into pinned memory,
    // for the optimizer on the host.
    EXPECT_EQ(d.downloads, 1);
    EXPECT_EQ(d.downloaded, total + 1);
    EXPECT_EQ(d.staged_downloads, 0);
  }

  // With a reducer that sums host memory (the ring): the gradient comes out
  // once, then is summed there; the same weights result.
  CountingBackend host_counting(inner_.get());
  OneRankReducer on_host(/*on_device=*/false);
  std::unique_ptr<Model> owned_host;
  TensorList host_final;
  const std::vector<CopyCounts> host_steps =
      RunAllReduce(&host_counting, &on_host, &owned_host, &host_final);
  ASSERT_EQ(host_steps.size(), kSteps + 1);
  EXPECT_EQ(on_host.host_sums, kSteps);
  EXPECT_EQ(on_host.last_n, total + 1);
  for (int64_t s = 0; s < kSteps; ++s) {
    const CopyCounts& d = host_steps[s];
    SCOPED_TRACE(absl::StrCat("step ", s, " (host reducer) on ", GetParam(),
                              ": ", d.ToString()));
    EXPECT_EQ(d.uploads, tensors + 2 * kAccum);
    EXPECT_EQ(d.uploaded, total + kBatchFloats);
    EXPECT_EQ(d.staged_uploads, 2 * kAccum);
    EXPECT_EQ(d.downloads, 1);
    EXPECT_EQ(d.downloaded, total);
    EXPECT_EQ(d.staged_downloads, 0);
  }
  ASSERT_EQ(host_final.size(), device_final.size());
  for (size_t t = 0; t < host_final.size(); ++t) {
    ASSERT_EQ(host_final[t].size(), device_final[t].size());
    EXPECT_EQ(std::memcmp(host_final[t].data(), device_final[t].data(),
                          host_final[t].size() * sizeof(float)),
              0)
        << "tensor " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Transfers, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

// The CPU twin's numbers did not change: LocalStep's gradient, accumulated
// on the backend (Add, then Scale), equals bit for bit the host
// accumulation of per-micro-batch gradients it replaced (copy, +=, *= 1/A).
TEST(CpuTwin, AccumulatedGradientIsBitIdenticalToTheHostAccumulation) {
  const JobConfig config = MakeConfig(pstrain::v1::MODE_SYNC);
  absl::StatusOr<std::unique_ptr<Model>> resident =
      Model::Create(config.model());
  absl::StatusOr<std::unique_ptr<Model>> host = Model::Create(config.model());
  absl::StatusOr<std::unique_ptr<DataSource>> data =
      DataSource::Create(config.data());
  ASSERT_TRUE(resident.ok() && host.ok() && data.ok());
  TensorList params;
  for (const auto& spec : (*host)->params()) {
    std::vector<float> w(NumElements(spec));
    InitialValues(spec, 0, w.size(), w.data());
    for (size_t k = 0; k < w.size(); ++k) w[k] += 0.01f * (k % 7);  // biases
    params.push_back(std::move(w));
  }
  const int64_t step = 2;

  ASSERT_TRUE((*resident)->SetParams(params).ok());
  LocalStep local(config, /*rank=*/0, resident->get(), data->get());
  absl::StatusOr<double> loss_sum = local.Gradient(step);
  ASSERT_TRUE(loss_sum.ok()) << loss_sum.status();
  const int64_t total = (*resident)->num_params();
  std::vector<float> got(total);
  ASSERT_TRUE((*resident)
                  ->backend()
                  ->CopyToHost(*(*resident)->gradient(), total, got.data())
                  .ok());

  // The host accumulation, as LocalStep did it before.
  const uint64_t first = FirstExampleId(step, 0, 1, local.slice());
  TensorList want, micro;
  double want_loss = 0;
  for (int64_t a = 0; a < kAccum; ++a) {
    absl::StatusOr<Batch> batch =
        (*data)->TrainBatch(first + a * kBatch, kBatch);
    ASSERT_TRUE(batch.ok());
    absl::StatusOr<double> loss =
        (*host)->LossAndGradient(params, *batch, &micro);
    ASSERT_TRUE(loss.ok());
    want_loss += *loss * batch->n;
    if (a == 0) {
      want = micro;
      continue;
    }
    for (size_t i = 0; i < want.size(); ++i) {
      for (size_t j = 0; j < want[i].size(); ++j) want[i][j] += micro[i][j];
    }
  }
  const float inv = 1.0f / static_cast<float>(kAccum);
  for (auto& g : want) {
    for (float& v : g) v *= inv;
  }
  EXPECT_EQ(*loss_sum, want_loss);
  std::vector<float> flat;
  for (const auto& g : want) flat.insert(flat.end(), g.begin(), g.end());
  ASSERT_EQ(flat.size(), got.size());
  EXPECT_EQ(std::memcmp(flat.data(), got.data(), got.size() * sizeof(float)),
            0);
}

}  // namespace
}  // namespace pstrain
