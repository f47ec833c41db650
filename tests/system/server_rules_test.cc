// The optional server rules over real gRPC: worker threads with their own
// PsClients train a real model against a two-shard in-process cluster.
//  * Sync with one backup worker (Chen et al. 2016): one straggler thread
//    sleeps before every push; the other workers never wait for it, every
//    step is applied exactly once, and the straggler's late pushes come back
//    OK with dropped = true.
//  * Async with the staleness-aware learning rate and DC-ASGD together: the
//    job runs to completion and every push is applied.
// The exact math of each rule is tested on Shard directly (server/shard_test).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/job_config.h"
#include "common/job_token.h"
#include "common/status_macros.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"
#include "proto/pstrain.grpc.pb.h"
#include "proto/pstrain.pb.h"
#include "tests/harness/test_cluster.h"
#include "tests/harness/training_harness.h"
#include "worker/data/data.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"

namespace pstrain {
namespace {

constexpr int kWorkers = 4;
constexpr uint64_t kSteps = 20;
constexpr int64_t kLocalBatch = 8;

// SmallSoftmaxJob: async with staleness inf, else staleness 0.
JobConfig RulesConfig(pstrain::v1::ConsistencyMode mode) {
  return SmallSoftmaxJob(mode, mode == pstrain::v1::MODE_ASYNC ? -1 : 0,
                         kWorkers, kLocalBatch, kSteps);
}

PsClientOptions ClientOptions() {
  PsClientOptions options;
  options.rpc_timeout = absl::Seconds(10);
  options.barrier_timeout = absl::Seconds(20);
  return options;
}

// A push of `grads` to one shard over a raw stub, so the test sees the
// PushResponse (PsClient only reports the status).
absl::StatusOr<pstrain::v1::PushResponse> RawPush(
    pstrain::v1::ParameterServer::Stub& stub, const pstrain::v1::ShardMap& map,
    uint32_t shard, uint32_t worker, uint64_t session_id, uint64_t clock,
    const TensorList& grads, const ShardRead& read) {
  absl::flat_hash_map<std::string, int> tensor_index;
  for (int t = 0; t < map.tensors_size(); ++t) {
    tensor_index[map.tensors(t).name()] = t;
  }
  pstrain::v1::PushRequest request;
  pstrain::v1::PushHeader* h = request.mutable_header();
  h->set_worker(worker);
  h->set_session_id(session_id);
  h->set_clock(clock);
  h->set_read_version(read.version);
  h->set_read_min_clock(read.min_clock);
  h->set_num_samples(kLocalBatch);
  for (const pstrain::v1::ChunkInfo& c : map.chunks()) {
    if (c.shard() != shard) continue;
    EncodeChunk(c.tensor(), c.index(),
                grads[tensor_index[c.tensor()]].data() + c.offset(), c.length(),
                request.add_chunks());
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  AddPushSession(&context, worker, session_id, 0);
  pstrain::v1::PushResponse response;
  std::unique_ptr<grpc::ClientWriter<pstrain::v1::PushRequest>> writer =
      stub.Push(&context, &response);
  if (writer->Write(request)) writer->WritesDone();
  PS_RETURN_IF_ERROR(FromGrpcStatus(writer->Finish()));
  return response;
}

struct WorkerResult {
  absl::Status status;
  uint64_t steps_done = 0;
  // Straggler only: per (push, shard) responses.
  uint64_t dropped = 0;
  uint64_t applied = 0;
  uint64_t inconsistent = 0;  // dropped and applied both set
};

TEST(BackupWorkersGrpcTest, StepsCompleteWhileTheStragglerIsDropped) {
  JobConfig config = RulesConfig(pstrain::v1::MODE_SYNC);
  config.mutable_training()->set_backup_workers(1);
  absl::StatusOr<std::unique_ptr<TestCluster>> cluster =
      TestCluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  TestCluster& c = **cluster;
  ASSERT_EQ(c.num_shards(), 2);
  ASSERT_EQ(c.job().config().training().backup_workers(), 1u);

  constexpr int kStraggler = kWorkers - 1;
  std::vector<WorkerResult> results(kWorkers);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorkers; ++rank) {
    threads.emplace_back([&, rank] {
      WorkerResult& out = results[rank];
      absl::StatusOr<std::unique_ptr<PsClient>> client =
          c.NewClient(ClientOptions(), rank);
      absl::StatusOr<Learner> learner = Learner::Create(config);
      if (!client.ok() || !learner.ok()) {
        out.status = client.ok() ? learner.status() : client.status();
        return;
      }
      std::vector<std::unique_ptr<pstrain::v1::ParameterServer::Stub>> stubs;
      for (int s = 0; s < c.num_shards(); ++s) stubs.push_back(c.Stub(s));
      TensorList params, grads;
      for (uint64_t step = 0; step < kSteps; ++step) {
        std::unique_ptr<PsOp> pull = (*client)->StartPull(rank, step, &params);
        out.status = pull->Wait();
        if (out.status.ok()) {
          out.status = learner->Gradient(params, step, rank, kWorkers,
                                         kLocalBatch, &grads);
        }
        if (!out.status.ok()) return;
        if (rank != kStraggler) {
          out.status =
              (*client)
                  ->StartPush(rank, step, kLocalBatch, grads, pull->reads())
                  ->Wait();
          if (!out.status.ok()) return;
          ++out.steps_done;
          continue;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        for (int s = 0; s < c.num_shards(); ++s) {
          absl::StatusOr<pstrain::v1::PushResponse> r =
              RawPush(*stubs[s], c.job().shard_map(), s, rank,
                      c.session_id(rank), step, grads, pull->reads()[s]);
          if (!r.ok()) {
            out.status =
                absl::Status(r.status().code(),
                             absl::StrCat("straggler push ", step, " shard ", s,
                                          ": ", r.status().message()));
            return;
          }
          out.dropped += r->dropped();
          out.applied += r->applied();
          out.inconsistent += r->dropped() && r->applied();
        }
        ++out.steps_done;
      }
    });
  }
  for (std::thread& t : threads) t.join();

  for (int rank = 0; rank < kWorkers; ++rank) {
    SCOPED_TRACE(absl::StrCat("worker ", rank));
    EXPECT_TRUE(results[rank].status.ok()) << results[rank].status;
    EXPECT_EQ(results[rank].steps_done, kSteps);
  }
  const WorkerResult& straggler = results[kStraggler];
  const uint64_t straggler_pushes = kSteps * c.num_shards();
  EXPECT_GE(straggler.dropped, straggler_pushes / 2)
      << "the straggler's pushes were mostly used, not dropped";
  EXPECT_EQ(straggler.inconsistent, 0u);

  // Every step got all four pushes: three made it, one was dropped.
  uint64_t dropped_total = 0;
  for (int i = 0; i < c.num_shards(); ++i) {
    const pstrain::v1::ShardStats stats = c.shard(i)->Stats();
    SCOPED_TRACE(absl::StrCat("shard ", i, ": ", stats.ShortDebugString()));
    EXPECT_EQ(stats.version(), kSteps);
    EXPECT_EQ(stats.pushes(), kWorkers * kSteps);
    EXPECT_EQ(stats.dropped_pushes(), kSteps);
    EXPECT_EQ(stats.staleness_max(), 0u);
    dropped_total += stats.dropped_pushes();
  }
  EXPECT_LE(straggler.dropped, dropped_total);
}

TEST(AsyncRulesGrpcTest, StalenessAwareLrWithDelayCompensationTrains) {
  JobConfig config = RulesConfig(pstrain::v1::MODE_ASYNC);
  config.mutable_training()->set_staleness_aware_lr(true);
  config.mutable_training()->set_dc_lambda(0.1);
  absl::StatusOr<std::unique_ptr<TestCluster>> cluster =
      TestCluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  TestCluster& c = **cluster;
  ASSERT_TRUE(c.job().config().training().staleness_aware_lr());
  ASSERT_EQ(c.job().config().training().dc_lambda(), 0.1);

  std::vector<WorkerResult> results(kWorkers);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorkers; ++rank) {
    threads.emplace_back([&, rank] {
      WorkerResult& out = results[rank];
      absl::StatusOr<std::unique_ptr<PsClient>> client =
          c.NewClient(ClientOptions(), rank);
      absl::StatusOr<Learner> learner = Learner::Create(config);
      if (!client.ok() || !learner.ok()) {
        out.status = client.ok() ? learner.status() : client.status();
        return;
      }
      TensorList params, grads;
      for (uint64_t step = 0; step < kSteps; ++step) {
        std::unique_ptr<PsOp> pull = (*client)->StartPull(rank, step, &params);
        out.status = pull->Wait();
        if (out.status.ok()) {
          out.status = learner->Gradient(params, step, rank, kWorkers,
                                         kLocalBatch, &grads);
        }
        if (out.status.ok()) {
          out.status =
              (*client)
                  ->StartPush(rank, step, kLocalBatch, grads, pull->reads())
                  ->Wait();
        }
        if (!out.status.ok()) return;
        ++out.steps_done;
        // Uneven pace, so some pushes are stale and some weights moved
        // between a worker's read and its push.
        std::this_thread::sleep_for(std::chrono::milliseconds(rank));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < kWorkers; ++rank) {
    SCOPED_TRACE(absl::StrCat("worker ", rank));
    EXPECT_TRUE(results[rank].status.ok()) << results[rank].status;
    EXPECT_EQ(results[rank].steps_done, kSteps);
  }
  for (int i = 0; i < c.num_shards(); ++i) {
    const pstrain::v1::ShardStats stats = c.shard(i)->Stats();
    EXPECT_EQ(stats.version(), kWorkers * kSteps) << "shard " << i;
    EXPECT_EQ(stats.dropped_pushes(), 0u) << "shard " << i;
  }
  absl::StatusOr<std::unique_ptr<PsClient>> reader =
      c.NewClient(ClientOptions());
  ASSERT_TRUE(reader.ok()) << reader.status();
  TensorList final_params;
  ASSERT_TRUE((*reader)->StartPull(0, kSteps, &final_params)->Wait().ok());
  for (const std::vector<float>& t : final_params) {
    for (float x : t) ASSERT_TRUE(std::isfinite(x));
  }
}

}  // namespace
}  // namespace pstrain
