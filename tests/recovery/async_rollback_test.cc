// training.on_failure: restart in mode async
// (docs/failures-and-recovery.md), in one process: a real CoordinatorNode and
// two ServerNodes on threads, the two workers played by the test through
// PsClient so that every clock is placed by hand. Cut 4 is checkpointed; worker
// 0 runs ahead to clock 8, where the shards hold its read for cut 8 (in
// flight); then a replacement registers for worker 1. Checked: the held read is
// released by the generation change (not left to the barrier timeout); the job
// rolls back to cut 4 (JobSpec start_step 4: every worker resumes at clock 4);
// every shard is at the cut (the weights read at clock 4 before the loss,
// bit for bit, version 8, every worker clock 4); a push of the old
// generation is ABORTED and changes nothing; and the next cut (8) is taken
// in the new generation with every worker clock at 8.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "common/grpc_util.h"
#include "common/job_config.h"
#include "coordinator/coordinator_node.h"
#include "proto/pstrain.grpc.pb.h"
#include "server/server_node.h"
#include "worker/ps/ps_client.h"

namespace pstrain {
namespace {

constexpr int kWorkers = 2;
constexpr int kServers = 2;

class AsyncRollbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/async_rollback");
    config_ = DefaultJobConfig();
    config_.mutable_job()->set_workers(kWorkers);
    config_.mutable_job()->set_servers(kServers);
    config_.mutable_training()->set_mode(v1::MODE_ASYNC);
    config_.mutable_training()->set_staleness(2);
    config_.mutable_training()->set_steps(12);
    config_.mutable_training()->set_on_failure(v1::TrainingConfig::RESTART);
    config_.mutable_checkpoint()->set_every_steps(4);
    // The test's workers do not heartbeat: no lease may run out; a held
    // read must end long before its barrier timeout.
    config_.mutable_network()->set_lease_s(120);
    config_.mutable_network()->set_barrier_timeout_s(60);
    FinalizeJobConfig(&config_);

    CoordinatorNodeOptions co;
    co.config = config_;
    co.out = out_;
    co.progress = false;
    co.wait_cap = absl::Seconds(10);
    auto coordinator = CoordinatorNode::Create(co);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = std::move(*coordinator);
    NodeOptions node;
    node.file_config = config_;
    node.coordinator = absl::StrCat("127.0.0.1:", coordinator_->port());
    node.rpc_timeout = absl::Seconds(10);
    node.startup_timeout = absl::Seconds(30);
    for (int k = 0; k < kServers; ++k) {
      ServerNodeOptions so;
      so.node = node;
      so.requested_shard = k;
      so.set_log_role = false;
      auto s = ServerNode::Create(so);
      ASSERT_TRUE(s.ok()) << s.status();
      servers_.push_back(std::move(*s));
    }
    auto stopped = [this] { return stop_.load(); };
    threads_.emplace_back(
        [this, stopped] { coordinator_status_ = coordinator_->Run(stopped); });
    server_status_.resize(servers_.size());
    for (size_t k = 0; k < servers_.size(); ++k) {
      threads_.emplace_back([this, k, stopped] {
        server_status_[k] = servers_[k]->Run(stopped);
      });
    }
    coord_ = v1::Coordinator::NewStub(MakeChannel(node.coordinator));
  }

  void TearDown() override {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    // A stop is a clean end for a shard; the coordinator fails the job it
    // did not finish, naming the stop.
    for (size_t k = 0; k < server_status_.size(); ++k) {
      EXPECT_TRUE(server_status_[k].ok())
          << "shard " << k << ": " << server_status_[k];
    }
    if (!threads_.empty()) {
      EXPECT_EQ(coordinator_status_.code(), absl::StatusCode::kAborted)
          << coordinator_status_;
      EXPECT_NE(coordinator_status_.message().find("stopped"),
                std::string::npos)
          << coordinator_status_;
    }
  }

  // Registers `rank` (a first worker or a replacement); its session id.
  uint64_t Register(int rank) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    v1::RegisterWorkerRequest req;
    req.set_requested_rank(rank);
    v1::RegisterWorkerResponse resp;
    const grpc::Status st = coord_->RegisterWorker(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.session_id();
  }

  // The job once every shard is in (generation 0) or once the rollback of
  // `generation` is done.
  v1::JobSpec Job(uint64_t generation) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(15));
    v1::GetJobRequest req;
    req.set_wait_for_servers(true);
    req.set_wait_for_generation(generation);
    v1::JobSpec job;
    const grpc::Status st = coord_->GetJob(&ctx, req, &job);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return job;
  }

  std::unique_ptr<PsClient> Client(const v1::JobSpec& job, uint64_t session) {
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (const std::string& a : job.shard_map().server_addresses()) {
      channels.push_back(MakeChannel(a));
    }
    PsClientOptions o;
    o.rpc_timeout = absl::Seconds(10);
    o.barrier_timeout = absl::Seconds(60);
    o.session_id = session;
    o.generation = job.generation();
    o.max_attempts = 1;
    auto c = PsClient::Create(job.shard_map(), std::move(channels), o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // One clock of `worker`: read, then push a gradient of 0.01 + clock/100
  // per element.
  absl::Status Step(PsClient* client, uint32_t worker, uint64_t clock,
                    TensorList* read = nullptr) {
    TensorList params;
    std::unique_ptr<PsOp> pull = client->StartPull(worker, clock, &params);
    absl::Status st = pull->Wait();
    if (!st.ok()) return st;
    if (read != nullptr) *read = params;
    TensorList grads = params;
    for (auto& t : grads) {
      for (float& g : t) g = 0.01f + clock / 100.0f;
    }
    std::unique_ptr<PsOp> push =
        client->StartPush(worker, clock, 16, grads, pull->reads());
    return push->Wait();
  }

  std::vector<uint64_t> Versions(const v1::JobSpec& job) {
    std::vector<uint64_t> v;
    for (const std::string& a : job.shard_map().server_addresses()) {
      auto stub = v1::ParameterServer::NewStub(MakeChannel(a));
      grpc::ClientContext ctx;
      SetTimeout(&ctx, absl::Seconds(10));
      v1::ShardStats stats;
      EXPECT_TRUE(stub->GetStats(&ctx, {}, &stats).ok());
      v.push_back(stats.version());
    }
    return v;
  }

  // The complete checkpoint of `step`, waited for (bounded).
  std::unique_ptr<CheckpointReader> AwaitCheckpoint(uint64_t step) {
    const std::string dir =
        absl::StrFormat("%s/ckpt/step-%012d", out_, static_cast<long>(step));
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      auto reader = CheckpointReader::Open(CheckpointEnv::Default(), dir);
      if (reader.ok()) return std::move(*reader);
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "no complete checkpoint at " << dir;
    return nullptr;
  }

  std::string out_;
  JobConfig config_;
  std::unique_ptr<CoordinatorNode> coordinator_;
  std::vector<std::unique_ptr<ServerNode>> servers_;
  std::unique_ptr<v1::Coordinator::Stub> coord_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  // What each node's Run returned (written by its thread, read after join).
  absl::Status coordinator_status_;
  std::vector<absl::Status> server_status_;
};

TEST_F(AsyncRollbackTest, EveryShardGoesBackToTheCutAndEveryWorkerToItsClock) {
  const uint64_t session0 = Register(0);
  const uint64_t session1 = Register(1);
  const v1::JobSpec job0 = Job(0);
  ASSERT_EQ(job0.shard_map().server_addresses_size(), kServers);
  std::unique_ptr<PsClient> w0 = Client(job0, session0);
  std::unique_ptr<PsClient> w1 = Client(job0, session1);
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);

  // Generation 0: clocks 0..3 of both workers, so cut 4 is saved.
  for (uint64_t t = 0; t < 4; ++t) {
    ASSERT_TRUE(Step(w0.get(), 0, t).ok());
    ASSERT_TRUE(Step(w1.get(), 1, t).ok());
  }
  ASSERT_NE(AwaitCheckpoint(4), nullptr);
  // Worker 0's read at clock 4 is the state at the cut (no push of clock 4
  // yet).
  TensorList at_cut;
  ASSERT_TRUE(Step(w0.get(), 0, 4, &at_cut).ok());
  ASSERT_TRUE(Step(w1.get(), 1, 4).ok());
  ASSERT_TRUE(Step(w1.get(), 1, 5).ok());
  for (uint64_t t = 5; t < 8; ++t) ASSERT_TRUE(Step(w0.get(), 0, t).ok());
  // Worker 0 at clock 8, worker 1 at 6: staleness 2 would let worker 0
  // read, but cut 8 holds it until every worker reached 8.
  TensorList held_params;
  std::unique_ptr<PsOp> held = w0->StartPull(0, 8, &held_params);
  std::atomic<bool> held_done{false};
  absl::Status released;
  std::thread waiter([&] {
    released = held->Wait();
    held_done = true;
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(held_done.load()) << "the read at clock 8 was not held";

  // A replacement registers for worker 1: generation 1 and the rollback.
  const absl::Time loss = absl::Now();
  const uint64_t replacement = Register(1);
  waiter.join();
  EXPECT_FALSE(released.ok()) << "the held read of generation 0 succeeded";
  EXPECT_LT(absl::Now() - loss, absl::Seconds(10))
      << "the held read waited for its barrier timeout: " << released;
  std::cerr << "the held read ended " << absl::Now() - loss
            << " after the loss: " << released << "\n";
  const v1::JobSpec job1 = Job(1);
  EXPECT_EQ(job1.generation(), 1u);
  EXPECT_EQ(job1.start_step(), 4u);  // every worker resumes at clock 4
  EXPECT_NE(job1.resume_from().find("step-000000000004"), std::string::npos)
      << job1.resume_from();

  // Every shard at the cut: the version after 2 x 4 pushes ...
  const std::vector<uint64_t> versions = Versions(job1);
  EXPECT_EQ(versions, std::vector<uint64_t>(kServers, 8));
  // ... and a push of generation 0 is refused and changes nothing.
  {
    TensorList grads = at_cut;
    for (auto& t : grads) std::fill(t.begin(), t.end(), 1.0f);
    std::vector<ShardRead> reads(kServers);
    for (ShardRead& r : reads) r.min_clock = 4;
    const absl::Status stale = w0->StartPush(0, 4, 16, grads, reads)->Wait();
    EXPECT_EQ(stale.code(), absl::StatusCode::kAborted) << stale;
    EXPECT_NE(stale.message().find("generation 0"), std::string::npos) << stale;
    EXPECT_EQ(Versions(job1), versions);
  }

  // Generation 1: the survivor (same session) and the replacement read the
  // state at cut 4, bit for bit, with every worker clock at 4.
  std::unique_ptr<PsClient> v0 = Client(job1, session0);
  std::unique_ptr<PsClient> v1c = Client(job1, replacement);
  ASSERT_NE(v0, nullptr);
  ASSERT_NE(v1c, nullptr);
  TensorList again;
  std::unique_ptr<PsOp> pull = v0->StartPull(0, 4, &again);
  ASSERT_TRUE(pull->Wait().ok());
  EXPECT_TRUE(again == at_cut) << "the weights at cut 4 differ after the "
                                  "rollback";
  for (const ShardRead& r : pull->reads()) EXPECT_EQ(r.min_clock, 4u);
  // Cut 8 in the new generation: clocks 4..7 of both.
  for (uint64_t t = 4; t < 8; ++t) {
    ASSERT_TRUE(Step(v0.get(), 0, t).ok());
    ASSERT_TRUE(Step(v1c.get(), 1, t).ok());
  }
  std::unique_ptr<CheckpointReader> cut8 = AwaitCheckpoint(8);
  ASSERT_NE(cut8, nullptr);
  ASSERT_EQ(cut8->shard_headers().size(), static_cast<size_t>(kServers));
  for (const CheckpointReader::ShardHeader& h : cut8->shard_headers()) {
    EXPECT_EQ(h.cut, 8u);
    EXPECT_EQ(h.version, 8u + 8u);  // 8 at cut 4, then 2 x 4 pushes
    EXPECT_EQ(h.clocks, std::vector<uint64_t>(kWorkers, 8));
  }
}

}  // namespace
}  // namespace pstrain
