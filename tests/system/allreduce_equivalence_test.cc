// Ring all-reduce training is sync (BSP) training without servers: N
// workers all-reducing their sample-weighted gradients and applying the
// optimizer locally end within 1e-5 of N workers on a sync parameter server
// and of one worker with an N times larger batch, and every replica holds
// bit-identical weights. Workers run as threads, over the in-memory
// transport and over real gRPC streams with the coordinator's rendezvous.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/job_config.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/job_spec.h"
#include "gtest/gtest.h"
#include "proto/pstrain.grpc.pb.h"
#include "tests/harness/in_process_job.h"
#include "tests/harness/test_cluster.h"
#include "tests/harness/training_harness.h"
#include "worker/allreduce/allreduce_trainer.h"
#include "worker/allreduce/grpc_transport.h"
#include "worker/allreduce/in_memory_transport.h"
#include "worker/allreduce/ring_allreduce.h"
#include "worker/data/data.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"
#include "worker/ps/trainer.h"

namespace pstrain {
namespace {

using pstrain::v1::OptimizerConfig;

constexpr int64_t kLocalBatch = 8;
constexpr int64_t kSteps = 20;
constexpr double kTolerance = 1e-5;

struct OptimizerCase {
  std::string name;
  OptimizerConfig::Kind kind;
  double lr;
  bool nesterov;
};

// The sync_equivalence_test job: MLP 16-32-4 on synthetic data, no test set.
JobConfig MakeConfig(const OptimizerCase& opt,
                     pstrain::v1::ConsistencyMode mode, int workers,
                     int64_t local_batch) {
  JobConfig config = DefaultJobConfig();
  config.mutable_job()->set_name("allreduce-equivalence");
  config.mutable_training()->set_mode(mode);
  config.mutable_job()->set_workers(workers);
  config.mutable_job()->set_servers(2);
  config.mutable_training()->set_local_batch(local_batch);
  config.mutable_training()->set_steps(kSteps);
  config.mutable_training()->mutable_optimizer()->set_kind(opt.kind);
  config.mutable_training()->mutable_optimizer()->set_base_lr(opt.lr);
  config.mutable_training()->mutable_optimizer()->set_nesterov(opt.nesterov);
  config.mutable_model()->set_type(ModelConfig::MLP);
  config.mutable_model()->set_input_dim(16);
  SetList(config.mutable_model()->mutable_hidden(), {32});
  config.mutable_model()->set_num_classes(4);
  config.mutable_model()->set_seed(3);
  config.mutable_data()->set_source(DataConfig::SYNTHETIC);
  config.mutable_data()->set_num_features(16);
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

// One all-reduce worker: its own model and data, `reducer` for the ring.
absl::StatusOr<TensorList> TrainAllReduce(const JobConfig& config, int rank,
                                          AllReducer* reducer,
                                          const StepCallback& on_step) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      Model::Create(config.model()));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                      DataSource::Create(config.data()));
  TrainerOptions options;
  options.rank = rank;
  options.config = config;
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<AllReduceTrainer> trainer,
      AllReduceTrainer::Create(options, reducer, model.get(), data.get()));
  PS_RETURN_IF_ERROR(trainer->Run(on_step, nullptr));
  return trainer->params();
}

// All-reduce job over the in-memory transport; final weights by rank.
absl::StatusOr<std::vector<TensorList>> RunAllReduceInMemory(
    const JobConfig& config, RingOptions ring = {}) {
  PS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Transport>> transports,
                      CreateInMemoryRing(config.job().workers()));
  ring.timeout = absl::Seconds(config.allreduce().timeout_s());
  std::vector<TensorList> finals(config.job().workers());
  PS_RETURN_IF_ERROR(
      OnThreads(config.job().workers(), [&](int r) -> absl::Status {
        RingAllReducer reducer(transports[r].get(), ring);
        PS_ASSIGN_OR_RETURN(finals[r],
                            TrainAllReduce(config, r, &reducer, nullptr));
        return absl::OkStatus();
      }));
  return finals;
}

// A gRPC server on an ephemeral loopback port for `service`.
absl::StatusOr<std::unique_ptr<grpc::Server>> Serve(grpc::Service* service,
                                                    std::string* address) {
  PS_ASSIGN_OR_RETURN(
      StartedServer started,
      StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(),
                      {service}));
  *address = absl::StrCat("127.0.0.1:", started.port);
  return std::move(started.server);
}

// Every replica hashes the same as rank 0.
void ExpectReplicasIdentical(const std::vector<TensorList>& finals) {
  ASSERT_FALSE(finals.empty());
  const uint64_t h0 = ParamsFingerprint(finals[0]);
  for (size_t r = 1; r < finals.size(); ++r) {
    EXPECT_EQ(ParamsFingerprint(finals[r]), h0)
        << "rank " << r << "'s weights differ from rank 0's";
  }
}

class AllReduceEquivalenceTest
    : public ::testing::TestWithParam<std::tuple<OptimizerCase, int>> {};

TEST_P(AllReduceEquivalenceTest, MatchesSyncPsAndOneWorkerWithNTimesTheBatch) {
  const auto& [opt, n] = GetParam();
  absl::StatusOr<std::vector<TensorList>> ar = RunAllReduceInMemory(
      MakeConfig(opt, pstrain::v1::MODE_ALLREDUCE, n, kLocalBatch));
  ASSERT_TRUE(ar.ok()) << ar.status();
  ASSERT_EQ(ar->size(), static_cast<size_t>(n));
  ExpectReplicasIdentical(*ar);
  const JobConfig base =
      MakeConfig(opt, pstrain::v1::MODE_SYNC, n, kLocalBatch);
  EXPECT_GT(MaxAbsDiff((*ar)[0], *InitialParams(base.model())), 1e-3)
      << "training did not move the weights";

  absl::StatusOr<std::vector<TensorList>> ps = RunParameterServerJob(base);
  ASSERT_TRUE(ps.ok()) << ps.status();
  absl::StatusOr<std::vector<TensorList>> one = RunParameterServerJob(
      MakeConfig(opt, pstrain::v1::MODE_SYNC, 1, n * kLocalBatch));
  ASSERT_TRUE(one.ok()) << one.status();
  const double vs_ps = MaxAbsDiff((*ar)[0], (*ps)[0]);
  const double vs_one = MaxAbsDiff((*ar)[0], (*one)[0]);
  EXPECT_LE(vs_ps, kTolerance);
  EXPECT_LE(vs_one, kTolerance);
  std::printf(
      "[%s N=%d] allreduce vs sync PS: %.3g, vs 1 worker x %lld: %.3g\n",
      opt.name.c_str(), n, vs_ps, static_cast<long long>(n * kLocalBatch),
      vs_one);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, AllReduceEquivalenceTest,
    ::testing::Combine(
        ::testing::Values(
            OptimizerCase{"sgd", OptimizerConfig::SGD, 0.1, false},
            OptimizerCase{"adam", OptimizerConfig::ADAM, 0.01, false},
            OptimizerCase{"nesterov", OptimizerConfig::MOMENTUM, 0.05, true}),
        ::testing::Values(2, 3, 4, 5)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param).name, "_N",
                          std::get<1>(info.param));
    });

// The real wire path on the real node classes (tests/harness/in_process_job.h:
// CoordinatorNode and WorkerNode as threads): rendezvous,
// gRPC ring streams in segments of allreduce.segment_bytes. The ring adds in
// the same order whatever the segmentation or transport, so the result
// equals the in-memory run bit for bit; the coordinator sums the ring byte
// counters.
TEST(AllReduceOverGrpcTest, CoordinatorRendezvousAndGrpcRing) {
  const OptimizerCase adam{"adam", OptimizerConfig::ADAM, 0.01, false};
  JobConfig config =
      MakeConfig(adam, pstrain::v1::MODE_ALLREDUCE, 3, kLocalBatch);
  SetList(config.mutable_model()->mutable_hidden(),
          {256});  // 5,380 weights: several segments per chunk
  config.mutable_allreduce()->set_segment_bytes(4096);
  absl::StatusOr<InProcessJob> run = RunInProcessJob(config);
  ASSERT_TRUE(run.ok()) << run.status();
  ExpectReplicasIdentical(run->finals);
  absl::StatusOr<std::vector<TensorList>> mem = RunAllReduceInMemory(config);
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ(ParamsFingerprint(run->finals[0]), ParamsFingerprint((*mem)[0]));
  JobConfig sync = config;
  sync.mutable_training()->set_mode(pstrain::v1::MODE_SYNC);
  absl::StatusOr<std::vector<TensorList>> ps = RunParameterServerJob(sync);
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_LE(MaxAbsDiff(run->finals[0], (*ps)[0]), kTolerance);

  EXPECT_FALSE(run->summary.failed) << run->summary.message;
  EXPECT_EQ(run->summary.steps, kSteps);
  EXPECT_EQ(run->summary.samples,
            static_cast<uint64_t>(kSteps * 3 * kLocalBatch));
  // 2(N-1)/N of the weights per step each way, plus framing.
  EXPECT_GT(run->summary.bytes_pushed,
            static_cast<uint64_t>(kSteps * 3 * 2 * 5380 * 4 * 2 / 3));
  EXPECT_EQ(run->summary.bytes_pulled, run->summary.bytes_pushed);
}

// network.wire_dtype: bf16 in mode allreduce (the worker's wiring of the
// ring's bf16 wire): the replicas stay bit-identical, the ring moves half the
// bytes of the fp32 run, and the result is not the fp32 run's (the wire
// really was bf16).
TEST(AllReduceOverGrpcTest, Bf16WireHalvesTheRingBytes) {
  const OptimizerCase sgd{"sgd", OptimizerConfig::SGD, 0.1, false};
  JobConfig config =
      MakeConfig(sgd, pstrain::v1::MODE_ALLREDUCE, 3, kLocalBatch);
  config.mutable_allreduce()->set_segment_bytes(4096);
  absl::StatusOr<InProcessJob> fp32 = RunInProcessJob(config);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  config.mutable_network()->set_wire_dtype(pstrain::v1::DTYPE_BF16);
  absl::StatusOr<InProcessJob> bf16 = RunInProcessJob(config);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_FALSE(bf16->summary.failed) << bf16->summary.message;
  EXPECT_EQ(bf16->summary.steps, kSteps);
  ExpectReplicasIdentical(bf16->finals);
  EXPECT_NE(ParamsFingerprint(bf16->finals[0]),
            ParamsFingerprint(fp32->finals[0]));
  EXPECT_EQ(2 * bf16->summary.bytes_pushed, fp32->summary.bytes_pushed);
  EXPECT_EQ(bf16->summary.bytes_pulled, bf16->summary.bytes_pushed);
}

// The weighted mean is the sync shard's: sum_r n_r g_r / sum_r n_r.
TEST(AllReduceWeightedMeanTest, WeighsBySampleCounts) {
  const int n = 3;
  const std::vector<uint64_t> samples = {1, 2, 5};
  absl::StatusOr<std::vector<std::unique_ptr<Transport>>> ring =
      CreateInMemoryRing(n);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::vector<TensorList> grads(n);
  for (int r = 0; r < n; ++r) {
    grads[r] = {std::vector<float>(7), std::vector<float>(1),
                std::vector<float>(10)};
    for (size_t t = 0; t < grads[r].size(); ++t) {
      for (size_t i = 0; i < grads[r][t].size(); ++i) {
        grads[r][t][i] = std::sin(1.0f + r * 31 + t * 7 + i);
      }
    }
  }
  std::vector<TensorList> want = {grads[0]};
  for (size_t t = 0; t < want[0].size(); ++t) {
    for (size_t i = 0; i < want[0][t].size(); ++i) {
      double acc = 0;  // as server/shard.cc: in double, in rank order
      for (int r = 0; r < n; ++r) acc += samples[r] / 8.0 * grads[r][t][i];
      want[0][t][i] = static_cast<float>(acc);
    }
  }
  ASSERT_TRUE(OnThreads(n, [&](int r) {
                RingOptions options;
                options.segment_elems = 2;
                options.timeout = absl::Seconds(5);
                RingAllReducer reducer((*ring)[r].get(), options);
                std::vector<float> scratch;
                return AllReduceWeightedMean(&reducer, 0, samples[r], &grads[r],
                                             &scratch);
              }).ok());
  ExpectReplicasIdentical(grads);
  EXPECT_LE(MaxAbsDiff(grads[0], want[0]), 1e-6);
}

// A worker that never joins: the others give up with DEADLINE_EXCEEDED
// after allreduce.timeout_s instead of hanging.
TEST(AllReduceTimeoutTest, MissingWorkerEndsTheOthersInDeadlineExceeded) {
  const OptimizerCase sgd{"sgd", OptimizerConfig::SGD, 0.1, false};
  JobConfig config = MakeConfig(sgd, pstrain::v1::MODE_ALLREDUCE, 3, 4);
  absl::StatusOr<std::vector<std::unique_ptr<Transport>>> ring =
      CreateInMemoryRing(3);
  ASSERT_TRUE(ring.ok()) << ring.status();
  RingOptions options;
  options.timeout = absl::Milliseconds(300);
  std::vector<absl::Status> st(2);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {  // rank 2 never starts
    threads.emplace_back([&, r] {
      RingAllReducer reducer((*ring)[r].get(), options);
      st[r] = TrainAllReduce(config, r, &reducer, nullptr).status();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kDeadlineExceeded) << st[r];
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// The coordinator side of a job without servers.
TEST(AllReduceCoordinatorTest, ZeroServersAndRendezvousErrors) {
  const OptimizerCase sgd{"sgd", OptimizerConfig::SGD, 0.1, false};
  JobConfig config = MakeConfig(sgd, pstrain::v1::MODE_ALLREDUCE, 2, 4);
  absl::StatusOr<pstrain::v1::JobSpec> job = MakeJobSpec(config);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->num_servers(), 0u);
  EXPECT_EQ(job->shard_map().tensors_size(), 4);  // 2 layers x weight, bias
  EXPECT_EQ(job->shard_map().chunks_size(), 0);
  EXPECT_EQ(job->shard_map().server_addresses_size(), 0);

  CoordinatorOptions coptions;
  coptions.config = config;
  coptions.progress = false;
  coptions.wait_cap = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<CoordinatorService>> svc =
      CoordinatorService::Create(coptions);
  ASSERT_TRUE(svc.ok()) << svc.status();
  std::string address;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      Serve(svc->get(), &address);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = pstrain::v1::Coordinator::NewStub(MakeChannel(address));
  auto call = [&](auto method, const auto& req, auto* resp) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(5));
    return FromGrpcStatus(((*stub).*method)(&ctx, req, resp));
  };
  pstrain::v1::RegisterWorkerRequest reg;
  pstrain::v1::RegisterWorkerResponse reg_resp;
  reg.set_requested_rank(0);
  EXPECT_EQ(
      call(&pstrain::v1::Coordinator::Stub::RegisterWorker, reg, &reg_resp)
          .code(),
      absl::StatusCode::kInvalidArgument);  // no peer address
  pstrain::v1::GetPeersRequest peers;
  pstrain::v1::GetPeersResponse peers_resp;
  peers.set_rank(0);
  EXPECT_EQ(call(&pstrain::v1::Coordinator::Stub::GetPeers, peers, &peers_resp)
                .code(),
            absl::StatusCode::kNotFound);  // not registered
  // Registration does not wait for servers; GetPeers waits for rank 1.
  reg.set_peer_address("127.0.0.1:1");
  ASSERT_TRUE(
      call(&pstrain::v1::Coordinator::Stub::RegisterWorker, reg, &reg_resp)
          .ok());
  EXPECT_EQ(reg_resp.job().num_servers(), 0u);
  peers.set_session_id(reg_resp.session_id());
  absl::Status waiting =
      call(&pstrain::v1::Coordinator::Stub::GetPeers, peers, &peers_resp);
  EXPECT_EQ(waiting.code(), absl::StatusCode::kDeadlineExceeded) << waiting;
  EXPECT_NE(waiting.message().find("1"), absl::string_view::npos) << waiting;
  reg.set_requested_rank(1);
  reg.set_peer_address("127.0.0.1:2");
  ASSERT_TRUE(
      call(&pstrain::v1::Coordinator::Stub::RegisterWorker, reg, &reg_resp)
          .ok());
  ASSERT_TRUE(
      call(&pstrain::v1::Coordinator::Stub::GetPeers, peers, &peers_resp).ok());
  ASSERT_EQ(peers_resp.peer_addresses_size(), 2);
  EXPECT_EQ(peers_resp.peer_addresses(0), "127.0.0.1:1");
  EXPECT_EQ(peers_resp.peer_addresses(1), "127.0.0.1:2");
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));

  // A PS job has no ring.
  coptions.config = MakeConfig(sgd, pstrain::v1::MODE_SYNC, 2, 4);
  absl::StatusOr<std::unique_ptr<CoordinatorService>> sync =
      CoordinatorService::Create(coptions);
  ASSERT_TRUE(sync.ok()) << sync.status();
  grpc::ServerContext ctx;
  EXPECT_EQ((*sync)->GetPeers(&ctx, &peers, &peers_resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace pstrain
