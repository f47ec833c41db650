// Push admission and the push timeout on an async shard (whole pushes
// buffered: PsServiceOptions.max_concurrent_buffered_pushes): at most k push
// streams are read at once, the others wait without being read, a stalled
// stream loses its slot after push_timeout, and a stream is authenticated
// (its session, from its metadata) before it is admitted.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/job_token.h"
#include "common/tensor_codec.h"
#include "server/ps_service.h"
#include "server/shard.h"

namespace pstrain {
namespace {

// Async SGD, two workers, one shard holding tensor "w" of 4 floats.
v1::JobSpec Job() {
  v1::JobSpec job;
  job.mutable_config()->mutable_training()->set_mode(v1::MODE_ASYNC);
  job.mutable_config()->mutable_training()->set_staleness(-1);
  job.mutable_config()->mutable_job()->set_workers(2);
  job.set_num_servers(1);
  job.mutable_config()->mutable_training()->mutable_optimizer()->set_kind(
      v1::OptimizerConfig::SGD);
  job.mutable_config()->mutable_training()->mutable_optimizer()->set_base_lr(
      1.0);
  auto* map = job.mutable_shard_map();
  auto* t = map->add_tensors();
  t->set_name("w");
  t->add_shape(4);
  t->set_dtype(v1::DTYPE_F32);
  auto* c = map->add_chunks();
  c->set_tensor("w");
  c->set_length(4);
  return job;
}

// The session id the shard accepts from `worker` (a fixed table here).
uint64_t SessionOf(uint32_t worker) { return 0x5e55100000000000u + worker; }

v1::PushRequest ValidPush(uint32_t worker) {
  v1::PushRequest msg;
  msg.mutable_header()->set_worker(worker);
  msg.mutable_header()->set_session_id(SessionOf(worker));
  msg.mutable_header()->set_num_samples(1);
  const std::vector<float> g(4, 0.5f);
  EncodeChunk("w", 0, g.data(), g.size(), msg.add_chunks());
  return msg;
}

class PushAdmissionTest : public ::testing::Test {
 protected:
  void Start(PsServiceOptions options) {
    service_ = std::make_unique<ParameterServerService>(options);
    auto shard = Shard::Create(ShardOptionsFromJob(Job(), 0));
    ASSERT_TRUE(shard.ok()) << shard.status();
    shard_ = std::shared_ptr<Shard>(std::move(*shard));
    std::vector<uint64_t> sessions;
    for (uint32_t w = 0; w < shard_->num_workers(); ++w) {
      sessions.push_back(SessionOf(w));
    }
    service_->SetShard(shard_, WorkerSessions::Fixed(std::move(sessions)));
    auto started = StartGrpcServer(
        "127.0.0.1", 0, grpc::InsecureServerCredentials(), {service_.get()});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    stub_ = v1::ParameterServer::NewStub(
        MakeChannel(absl::StrCat("127.0.0.1:", started->port)));
  }

  void TearDown() override {
    if (shard_ != nullptr) shard_->Close();
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    }
  }

  // Waits (at most 10 s) until `active` push streams hold a slot and
  // `waiting` wait for one; false on timeout. Write() returning says only
  // that the client sent a message, not that the server saw the stream.
  bool AwaitAdmission(int active, int waiting) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      const auto a = service_->push_admission();
      if (a.active == active && a.waiting == waiting) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  grpc::Status Push(uint32_t worker) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    v1::PushResponse resp;
    AddPushSession(&ctx, worker, SessionOf(worker), 0);
    auto writer = stub_->Push(&ctx, &resp);
    writer->Write(ValidPush(worker));
    writer->WritesDone();
    return writer->Finish();
  }

  std::unique_ptr<ParameterServerService> service_;
  std::shared_ptr<Shard> shard_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
};

TEST_F(PushAdmissionTest, SecondPushWaitsForTheFirstToEnd) {
  PsServiceOptions options;
  options.max_concurrent_buffered_pushes = 1;
  Start(options);
  grpc::ClientContext ctx;
  SetTimeout(&ctx, absl::Seconds(10));
  v1::PushResponse resp;
  AddPushSession(&ctx, 0, SessionOf(0), 0);
  auto first = stub_->Push(&ctx, &resp);
  ASSERT_TRUE(first->Write(ValidPush(0)));  // complete, not half-closed
  ASSERT_TRUE(AwaitAdmission(1, 0)) << "the first push was never admitted";

  grpc::Status second;
  std::thread t([&] { second = Push(1); });
  ASSERT_TRUE(AwaitAdmission(1, 1)) << "the second push did not queue";
  absl::SleepFor(absl::Milliseconds(300));  // time to run, were it not held
  EXPECT_EQ(shard_->Stats().pushes(), 0u)
      << "the second push ran while the first held the only slot";
  first->WritesDone();
  const grpc::Status s = first->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  t.join();
  EXPECT_TRUE(second.ok()) << second.error_message();
  EXPECT_EQ(shard_->Stats().pushes(), 2u);
}

TEST_F(PushAdmissionTest, StalledStreamLosesItsSlotAfterPushTimeout) {
  PsServiceOptions options;
  options.max_concurrent_buffered_pushes = 1;
  options.push_timeout = absl::Seconds(1);
  Start(options);
  grpc::ClientContext ctx;  // no deadline: only the server's timeout ends it
  v1::PushResponse resp;
  AddPushSession(&ctx, 0, SessionOf(0), 0);
  auto stalled = stub_->Push(&ctx, &resp);
  ASSERT_TRUE(stalled->Write(ValidPush(0)));
  ASSERT_TRUE(AwaitAdmission(1, 0)) << "the stalled push was never admitted";

  // The waiting push's own timeout runs too (from its start): start it
  // half-way, so it is admitted when the stalled one is cancelled (at 1 s)
  // with half a second to spare.
  absl::SleepFor(absl::Milliseconds(500));
  const grpc::Status other = Push(1);
  EXPECT_TRUE(other.ok()) << other.error_message();
  const grpc::Status s = stalled->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  const v1::ShardStats stats = shard_->Stats();
  EXPECT_EQ(stats.pushes(), 1u) << "the stalled push was applied";
  EXPECT_EQ(stats.version(), 1u);
}

// Issue 23, finding 2: a push stream is authenticated before it is admitted.
// Strangers' streams (no session, a made-up one, an old generation) are
// refused at once and never take the only slot: a real push goes through
// while they are open, and none of them changes the shard.
TEST_F(PushAdmissionTest, StrangerStreamsTakeNoSlot) {
  PsServiceOptions options;
  options.max_concurrent_buffered_pushes = 1;
  Start(options);
  struct Stranger {
    const char* what;
    std::function<void(grpc::ClientContext*)> open;
    grpc::StatusCode want;
  };
  const std::vector<Stranger> strangers = {
      {"no session", [](grpc::ClientContext*) {},
       grpc::StatusCode::UNAUTHENTICATED},
      {"malformed session",
       [](grpc::ClientContext* c) {
         c->AddMetadata(kPushSessionMetadataKey, "junk");
       },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"made-up session",
       [](grpc::ClientContext* c) { AddPushSession(c, 0, 12345, 0); },
       grpc::StatusCode::PERMISSION_DENIED},
      {"session 0", [](grpc::ClientContext* c) { AddPushSession(c, 1, 0, 0); },
       grpc::StatusCode::PERMISSION_DENIED},
      {"another generation",
       [](grpc::ClientContext* c) { AddPushSession(c, 0, SessionOf(0), 7); },
       grpc::StatusCode::ABORTED},
  };
  // Each stranger opens a stream and sends nothing: on today's main such a
  // stream held the only slot until the server's push timeout.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientWriter<v1::PushRequest>>> writers;
  std::vector<v1::PushResponse> responses(strangers.size());
  for (size_t i = 0; i < strangers.size(); ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    SetTimeout(contexts.back().get(), absl::Seconds(30));
    strangers[i].open(contexts.back().get());
    writers.push_back(stub_->Push(contexts.back().get(), &responses[i]));
  }
  for (size_t i = 0; i < strangers.size(); ++i) {
    SCOPED_TRACE(strangers[i].what);
    const grpc::Status s = writers[i]->Finish();
    EXPECT_EQ(s.error_code(), strangers[i].want) << s.error_message();
    EXPECT_NE(s.error_message().find("nothing applied"), std::string::npos)
        << s.error_message();
  }
  const auto admission = service_->push_admission();
  EXPECT_EQ(admission.active, 0);
  EXPECT_EQ(admission.waiting, 0);
  const grpc::Status real = Push(0);
  EXPECT_TRUE(real.ok()) << real.error_message();
  EXPECT_EQ(shard_->Stats().pushes(), 1u);
}

// The first header must be the session the stream opened with: a stream
// opened as worker 0 cannot push as worker 1.
TEST_F(PushAdmissionTest, FirstHeaderMustMatchTheStreamsSession) {
  Start(PsServiceOptions{});
  grpc::ClientContext ctx;
  SetTimeout(&ctx, absl::Seconds(10));
  AddPushSession(&ctx, 0, SessionOf(0), 0);
  v1::PushResponse resp;
  auto writer = stub_->Push(&ctx, &resp);
  writer->Write(ValidPush(1));
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  EXPECT_EQ(shard_->Stats().pushes(), 0u);
}

// An admitted stream that sends nothing loses its slot after
// first_message_timeout (not after the much longer push_timeout), and the
// push waiting behind it is then admitted and applied.
TEST_F(PushAdmissionTest, SilentAdmittedStreamLosesItsSlot) {
  PsServiceOptions options;
  options.max_concurrent_buffered_pushes = 1;
  options.first_message_timeout = absl::Milliseconds(300);
  options.push_timeout = absl::Minutes(10);
  Start(options);
  grpc::ClientContext ctx;  // no deadline: only the server can end it
  AddPushSession(&ctx, 0, SessionOf(0), 0);
  v1::PushResponse resp;
  auto silent = stub_->Push(&ctx, &resp);
  ASSERT_TRUE(AwaitAdmission(1, 0)) << "the silent stream was never admitted";
  const grpc::Status other = Push(1);  // waits behind it, then runs
  EXPECT_TRUE(other.ok()) << other.error_message();
  const grpc::Status s = silent->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  EXPECT_EQ(shard_->Stats().pushes(), 1u);
}

// A worker may have at most kMaxPushStreamsPerWorker streams open on a
// shard; one more is RESOURCE_EXHAUSTED, and the others are unaffected.
TEST_F(PushAdmissionTest, StreamsPerWorkerAreBounded) {
  PsServiceOptions options;
  options.max_concurrent_buffered_pushes = 1;
  options.first_message_timeout = absl::Minutes(10);
  Start(options);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientWriter<v1::PushRequest>>> writers;
  std::vector<v1::PushResponse> responses(kMaxPushStreamsPerWorker);
  for (int i = 0; i < kMaxPushStreamsPerWorker; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    AddPushSession(contexts.back().get(), 0, SessionOf(0), 0);
    writers.push_back(stub_->Push(contexts.back().get(), &responses[i]));
  }
  ASSERT_TRUE(AwaitAdmission(1, kMaxPushStreamsPerWorker - 1));
  grpc::ClientContext ctx;
  SetTimeout(&ctx, absl::Seconds(10));
  AddPushSession(&ctx, 0, SessionOf(0), 0);
  v1::PushResponse resp;
  auto one_more = stub_->Push(&ctx, &resp);
  const grpc::Status s = one_more->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  for (auto& c : contexts) c->TryCancel();
  for (auto& w : writers) w->Finish();
  ASSERT_TRUE(AwaitAdmission(0, 0));
  const grpc::Status real = Push(0);  // the count went back down
  EXPECT_TRUE(real.ok()) << real.error_message();
}

}  // namespace
}  // namespace pstrain
