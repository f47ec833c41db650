// The push path of ParameterServerService on a shard that sums on arrival
// (plain sync), over real gRPC on 127.0.0.1 port 0: a stream that fails
// after some of its messages were summed changes nothing observable, the
// same push afterwards completes the step exactly, and pushes split over
// many messages, from several workers at once, give the shard's own result
// bit for bit, and a stand-in's session-only pull does not wait for the
// half-applied step its push completes.
#include "server/ps_service.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/job_token.h"
#include "common/sync_generic_call.h"
#include "common/tensor_codec.h"
#include "server/shard.h"
#include "server/worker_sessions.h"

namespace pstrain {
namespace {

constexpr int kChunks = 8;
constexpr int kChunkElems = 4;

// Sync SGD (lr 1), two workers, one shard holding tensor "w" of 32 floats
// in 8 chunks of 4.
v1::JobSpec Job() {
  v1::JobSpec job;
  job.mutable_config()->mutable_training()->set_mode(v1::MODE_SYNC);
  job.mutable_config()->mutable_job()->set_workers(2);
  job.set_num_servers(1);
  job.mutable_config()->mutable_training()->mutable_optimizer()->set_kind(
      v1::OptimizerConfig::SGD);
  job.mutable_config()->mutable_training()->mutable_optimizer()->set_base_lr(
      1.0);
  auto* map = job.mutable_shard_map();
  auto* t = map->add_tensors();
  t->set_name("w");
  t->add_shape(kChunks * kChunkElems);
  t->set_dtype(v1::DTYPE_F32);
  t->mutable_init()->set_kind(v1::InitRule::UNIFORM);
  t->mutable_init()->set_scale(1.0f);
  t->mutable_init()->set_seed(5);
  for (int i = 0; i < kChunks; ++i) {
    auto* c = map->add_chunks();
    c->set_tensor("w");
    c->set_index(i);
    c->set_offset(i * kChunkElems);
    c->set_length(kChunkElems);
  }
  return job;
}

uint64_t SessionOf(uint32_t worker) { return 0xabc000 + worker; }

std::shared_ptr<Shard> MakeShard() {
  auto shard = Shard::Create(ShardOptionsFromJob(Job(), 0));
  EXPECT_TRUE(shard.ok()) << shard.status();
  return shard.ok() ? std::shared_ptr<Shard>(std::move(*shard)) : nullptr;
}

// One push as frames: the header with chunk 0, then one chunk per message;
// `session` 0: the worker's first one.
std::vector<std::string> Frames(uint32_t worker, uint64_t clock,
                                const std::vector<float>& g,
                                uint64_t session = 0) {
  std::vector<std::string> frames;
  for (int i = 0; i < kChunks; ++i) {
    v1::PushRequest msg;
    if (i == 0) {
      auto* h = msg.mutable_header();
      h->set_worker(worker);
      h->set_session_id(session != 0 ? session : SessionOf(worker));
      h->set_clock(clock);
      h->set_read_min_clock(clock);
      h->set_num_samples(3 + worker);
    }
    EncodeChunk("w", i, g.data() + i * kChunkElems, kChunkElems,
                msg.add_chunks());
    frames.push_back(msg.SerializeAsString());
  }
  return frames;
}

std::vector<float> RandomGrad(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> g(kChunks * kChunkElems);
  for (float& x : g) x = u(rng) * std::ldexp(1.0f, -static_cast<int>(seed % 7));
  return g;
}

class OnArrivalServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<ParameterServerService>(options_);
    shard_ = MakeShard();
    ASSERT_NE(shard_, nullptr);
    ASSERT_TRUE(shard_->sums_on_arrival());
    // The coordinator's table, which a test may change (a rank registered
    // again by another process).
    auto sessions = std::make_shared<WorkerSessions>(
        2,
        [this](absl::Time) -> absl::StatusOr<std::vector<uint64_t>> {
          absl::MutexLock lock(&ids_mu_);
          return ids_;
        },
        absl::ZeroDuration());
    ASSERT_TRUE(sessions->Refresh(absl::Now() + absl::Seconds(1)).ok());
    service_->SetShard(shard_, sessions);
    auto started = StartGrpcServer(
        "127.0.0.1", 0, grpc::InsecureServerCredentials(), {service_.get()});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    channel_ = MakeChannel(absl::StrCat("127.0.0.1:", started->port));
    stub_ = v1::ParameterServer::NewStub(channel_);
  }

  void TearDown() override {
    if (shard_ != nullptr) shard_->Close();
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    }
  }

  // Writes `frames` (raw messages) on one push stream; `cancel`: cancels
  // instead of half-closing. The stream's status.
  grpc::Status PushFrames(const std::vector<std::string>& frames,
                          bool cancel = false,
                          absl::Notification* cancel_when = nullptr) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    // The stream opens as its first header's session, as workers do.
    v1::PushRequest first;
    if (!frames.empty() && first.ParseFromString(frames[0]) &&
        first.has_header()) {
      AddPushSession(&ctx, first.header().worker(), first.header().session_id(),
                     first.header().generation());
    }
    grpc::CompletionQueue cq;
    auto call = stub.PrepareCall(&ctx, "/pstrain.v1.ParameterServer/Push", &cq);
    void* tag = nullptr;
    bool ok = false;
    intptr_t id = 1;
    auto step = [&]() {
      EXPECT_TRUE(cq.Next(&tag, &ok));
      EXPECT_EQ(tag, reinterpret_cast<void*>(id));
      ++id;
      return ok;
    };
    call->StartCall(reinterpret_cast<void*>(id));
    step();
    for (const std::string& f : frames) {
      grpc::Slice slice(f);
      grpc::ByteBuffer buffer(&slice, 1);
      call->Write(buffer, reinterpret_cast<void*>(id));
      if (!step()) break;
    }
    if (cancel) {
      // Let the frames reach the server (and be summed) first.
      absl::SleepFor(absl::Milliseconds(150));
      if (cancel_when != nullptr) {
        cancel_when->WaitForNotificationWithTimeout(absl::Seconds(20));
      }
      ctx.TryCancel();
    } else {
      call->WritesDone(reinterpret_cast<void*>(id));
      step();
    }
    grpc::ByteBuffer response;
    call->Read(&response, reinterpret_cast<void*>(id));
    step();
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(id));
    step();
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  }

  struct Observed {
    std::vector<float> weights;
    uint64_t version = 0, pushes = 0, clipped = 0;
    std::vector<uint64_t> clocks;
    bool operator==(const Observed& o) const {
      return version == o.version && pushes == o.pushes &&
             clipped == o.clipped && clocks == o.clocks &&
             weights.size() == o.weights.size() &&
             std::memcmp(weights.data(), o.weights.data(),
                         weights.size() * sizeof(float)) == 0;
    }
  };
  static Observed Observe(Shard& shard) {
    Observed o;
    auto pulled = shard.Pull(0, 0, absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(pulled.ok()) << pulled.status();
    if (pulled.ok()) o.weights = pulled->values;
    o.version = shard.Stats().version();
    o.pushes = shard.Stats().pushes();
    o.clipped = shard.clipped_elements();
    auto state = shard.Snapshot();
    if (state.ok()) o.clocks = state->clocks;
    return o;
  }

  // The same pushes straight into `shard` (no gRPC).
  static void DirectPush(Shard& shard, uint32_t worker, uint64_t clock,
                         const std::vector<float>& g) {
    std::vector<v1::PushRequest> msgs;
    for (const std::string& f : Frames(worker, clock, g)) {
      msgs.emplace_back();
      ASSERT_TRUE(msgs.back().ParseFromString(f));
    }
    std::vector<const v1::ChunkData*> chunks;
    for (const auto& m : msgs) chunks.push_back(&m.chunks(0));
    ASSERT_TRUE(shard.Push(msgs[0].header(), chunks).ok());
  }

  // A pull of `worker` at `clock` with `session`, waiting at most
  // `timeout`: its status, and the messages it got in *messages.
  grpc::Status PullCall(uint32_t worker, uint64_t clock, uint64_t session,
                        bool session_only, absl::Duration timeout,
                        int* messages) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::PullRequest req;
    req.set_worker(worker);
    req.set_clock(clock);
    req.set_session_id(session);
    req.set_session_only(session_only);
    auto reader = stub_->Pull(&ctx, req);
    v1::PullResponse msg;
    *messages = 0;
    while (reader->Read(&msg)) ++*messages;
    return reader->Finish();
  }

  // Waits (bounded) until `busy` pulls are on pull threads.
  bool AwaitPullThreadsBusy(int busy) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (service_->pull_threads().busy != busy) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  // Pulls of `worker` at `clock` on threads of their own, each recording
  // its status, its messages and whether `after` was set when it ended.
  struct BlockedPulls {
    std::vector<grpc::Status> status;
    std::vector<int> messages;
    std::vector<char> ended_after;
    std::vector<std::thread> threads;
    std::atomic<int> ended{0};
    void Join() {
      for (std::thread& t : threads) t.join();
      threads.clear();
    }
  };
  void StartPulls(int n, uint32_t worker, uint64_t clock,
                  const std::atomic<bool>* after, BlockedPulls* pulls) {
    pulls->status.resize(n);
    pulls->messages.assign(n, -1);
    pulls->ended_after.assign(n, 0);
    for (int i = 0; i < n; ++i) {
      pulls->threads.emplace_back([this, i, worker, clock, after, pulls] {
        pulls->status[i] = PullCall(worker, clock, SessionOf(worker), false,
                                    absl::Seconds(60), &pulls->messages[i]);
        pulls->ended_after[i] = after->load();
        ++pulls->ended;
      });
    }
  }

  PsServiceOptions options_;  // SetUp's
  absl::Mutex ids_mu_;
  std::vector<uint64_t> ids_ ABSL_GUARDED_BY(ids_mu_) = {SessionOf(0),
                                                         SessionOf(1)};
  std::unique_ptr<ParameterServerService> service_;
  std::shared_ptr<Shard> shard_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
};

// The push tests below run with each way of parsing a push message:
// in place from gRPC's slices (the default) and into a PushRequest
// (PsServiceOptions::parse_pushes_in_place false).
class PushParseServiceTest : public OnArrivalServiceTest,
                             public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    options_.parse_pushes_in_place = GetParam();
    OnArrivalServiceTest::SetUp();
  }
};

INSTANTIATE_TEST_SUITE_P(InPlaceAndCopied, PushParseServiceTest,
                         ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "InPlace" : "Copied";
                         });

// Streams that fail after some messages were summed (an undecodable frame,
// a non-finite chunk, a cancel) change nothing observable; the worker's
// full push afterwards and the other worker's give exactly the shard's
// result without the failures.
TEST_P(PushParseServiceTest, PushFailingAfterSummedMessagesChangesNothing) {
  const std::vector<float> g0 = RandomGrad(1), g1 = RandomGrad(2);
  const std::vector<std::string> frames = Frames(0, 0, g0);
  const Observed before = Observe(*shard_);

  std::vector<std::string> garbage(frames.begin(), frames.begin() + 3);
  garbage.push_back(std::string("\x08\xff\xff\xff", 4));
  grpc::Status s = PushFrames(garbage);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  EXPECT_TRUE(Observe(*shard_) == before);

  std::vector<std::string> nan(frames.begin(), frames.begin() + 5);
  {
    std::vector<float> bad = g0;
    bad[5 * kChunkElems] = std::nanf("");
    nan.push_back(Frames(0, 0, bad)[5]);
  }
  s = PushFrames(nan);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  EXPECT_TRUE(Observe(*shard_) == before);

  s = PushFrames({frames.begin(), frames.begin() + 6}, /*cancel=*/true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  absl::SleepFor(absl::Milliseconds(100));  // the server's side of it
  EXPECT_TRUE(Observe(*shard_) == before);

  // Missing chunks at the half-close: refused, nothing changes.
  s = PushFrames({frames.begin(), frames.begin() + 7});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  EXPECT_TRUE(Observe(*shard_) == before);

  ASSERT_TRUE(PushFrames(frames).ok());
  EXPECT_EQ(shard_->Stats().version(), 0u);  // waits for worker 1
  ASSERT_TRUE(PushFrames(Frames(1, 0, g1)).ok());
  EXPECT_EQ(shard_->Stats().version(), 1u);
  // A retry of an accepted push gets its answer and changes nothing.
  const Observed after = Observe(*shard_);
  ASSERT_TRUE(PushFrames(frames).ok());
  EXPECT_TRUE(Observe(*shard_) == after);

  std::shared_ptr<Shard> reference = MakeShard();
  DirectPush(*reference, 0, 0, g0);
  DirectPush(*reference, 1, 0, g1);
  EXPECT_TRUE(Observe(*shard_) == Observe(*reference));
}

// A sum that fails (a non-finite chunk) while the frames behind it are
// still being read: the call ends once, with the sum's error, whatever the
// read in flight is doing (a regression: the reader that finished parsing
// after the failure became the summer and ended the call a second time,
// which aborts inside gRPC). Nothing changes, and the stream's buffers go
// back to the service only after the last read.
TEST_F(OnArrivalServiceTest, SumFailingWhileReadingEndsTheCallOnce) {
  const std::vector<float> g0 = RandomGrad(7);
  const std::vector<std::string> frames = Frames(0, 0, g0);
  std::vector<float> bad = g0;
  bad[1 * kChunkElems] = std::nanf("");
  std::vector<std::string> stream = {frames[0], Frames(0, 0, bad)[1]};
  // Many valid frames behind the failing one keep a read in flight.
  for (int i = 0; i < 64; ++i) stream.push_back(frames[2 + i % 6]);
  const Observed before = Observe(*shard_);
  for (int round = 0; round < 500; ++round) {
    const grpc::Status s = PushFrames(stream);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << "round " << round << ": " << s.error_message();
  }
  EXPECT_TRUE(Observe(*shard_) == before);
  // The service still takes a whole push after all that.
  ASSERT_TRUE(PushFrames(frames).ok());
}

// Both workers stream their pushes at once, one chunk per message, over
// several steps: the result is the shard's own, bit for bit.
TEST_P(PushParseServiceTest, ConcurrentManyMessagePushesAreExact) {
  std::shared_ptr<Shard> reference = MakeShard();
  for (uint64_t step = 0; step < 10; ++step) {
    std::vector<std::vector<float>> g = {RandomGrad(10 * step + 3),
                                         RandomGrad(10 * step + 4)};
    std::vector<grpc::Status> status(2);
    std::vector<std::thread> threads;
    for (uint32_t w = 0; w < 2; ++w) {
      threads.emplace_back(
          [&, w] { status[w] = PushFrames(Frames(w, step, g[w])); });
    }
    for (auto& t : threads) t.join();
    for (uint32_t w = 0; w < 2; ++w) {
      ASSERT_TRUE(status[w].ok()) << status[w].error_message();
    }
    DirectPush(*reference, 1, step, g[1]);
    DirectPush(*reference, 0, step, g[0]);
    ASSERT_TRUE(Observe(*shard_) == Observe(*reference)) << "step " << step;
  }
}

// A stand-in (elastic sync) for a rank whose dead process half pushed a
// step: worker 0's push is in, worker 1's old session summed chunks 0-3 and
// stopped with its stream open, so those chunks were applied and the step
// is half applied. A pull of the step then waits for the commit, which only
// the stand-in's push of the rank brings; the session-only pull makes the
// new session known without waiting (refreshing the table), refuses the
// old session and an unknown rank, and the stand-in's push of the same
// bytes completes the step exactly while the dead stream is still open.
TEST_F(OnArrivalServiceTest,
       SessionOnlyPullAnnouncesAStandInOfAHalfAppliedStep) {
  const std::vector<float> g0 = RandomGrad(21), g1 = RandomGrad(22);
  ASSERT_TRUE(PushFrames(Frames(0, 0, g0)).ok());
  // The dead process's stream stays open (a stopped process) until the
  // stand-in's push is in.
  const std::vector<std::string> dead = Frames(1, 0, g1);
  absl::Notification stand_in_pushed;
  grpc::Status dead_status;
  std::thread dead_process([&] {
    dead_status = PushFrames({dead.begin(), dead.begin() + 4},
                             /*cancel=*/true, &stand_in_pushed);
  });
  // Ends the dead stream on every way out of the test (a failed ASSERT
  // included).
  auto end_dead_stream = [&] {
    if (!stand_in_pushed.HasBeenNotified()) stand_in_pushed.Notify();
    if (dead_process.joinable()) dead_process.join();
  };
  struct AtExit {
    std::function<void()> fn;
    ~AtExit() { fn(); }
  } at_exit{end_dead_stream};
  absl::SleepFor(absl::Milliseconds(300));  // its chunks summed
  int messages = -1;
  grpc::Status s =
      PullCall(0, 0, SessionOf(0), false, absl::Milliseconds(500), &messages);
  ASSERT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << s.error_message();
  EXPECT_EQ(shard_->Stats().version(), 0u);

  const uint64_t stand_in = 0x5eed01;
  {
    absl::MutexLock lock(&ids_mu_);
    ids_[1] = stand_in;
  }
  const absl::Time start = absl::Now();
  s = PullCall(1, 0, stand_in, true, absl::Seconds(5), &messages);
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_EQ(messages, 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  s = PullCall(1, 0, SessionOf(1), true, absl::Seconds(5), &messages);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << s.error_message();
  s = PullCall(7, 0, stand_in, true, absl::Seconds(5), &messages);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  // What a stand-in's pull of the step (the registration before) got.
  s = PullCall(1, 0, stand_in, false, absl::Milliseconds(500), &messages);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << s.error_message();
  EXPECT_EQ(shard_->Stats().version(), 0u);

  s = PushFrames(Frames(1, 0, g1, stand_in));
  end_dead_stream();
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_EQ(dead_status.error_code(), grpc::StatusCode::CANCELLED)
      << dead_status.error_message();
  EXPECT_EQ(shard_->Stats().version(), 1u);
  std::shared_ptr<Shard> reference = MakeShard();
  DirectPush(*reference, 0, 0, g0);
  DirectPush(*reference, 1, 0, g1);
  EXPECT_TRUE(Observe(*shard_) == Observe(*reference));
}

// Until every worker has completed a step, a barrier also waits for the
// others' start-up (barrier_timeout + startup): a first step whose second
// worker comes later than barrier_timeout is not a failure. After it, a
// straggler is bounded by barrier_timeout alone (the server's own
// DEADLINE_EXCEEDED, naming who is behind, long before the call's deadline).
TEST_F(OnArrivalServiceTest, FirstBarrierAlsoWaitsForStartUp) {
  service_->SetBarrierTimeout(absl::Milliseconds(300), absl::Seconds(60));
  ASSERT_TRUE(PushFrames(Frames(0, 0, RandomGrad(31))).ok());
  grpc::Status first;
  int messages = -1;
  std::thread puller([&] {
    first = PullCall(0, 1, SessionOf(0), false, absl::Seconds(60), &messages);
  });
  absl::SleepFor(absl::Seconds(1));  // past barrier_timeout, in start-up
  ASSERT_TRUE(PushFrames(Frames(1, 0, RandomGrad(32))).ok());
  puller.join();
  ASSERT_TRUE(first.ok()) << first.error_code() << ": "
                          << first.error_message();
  EXPECT_GT(messages, 0);
  EXPECT_EQ(shard_->Stats().version(), 1u);

  ASSERT_TRUE(PushFrames(Frames(0, 1, RandomGrad(33))).ok());
  grpc::Status later =
      PullCall(0, 2, SessionOf(0), false, absl::Seconds(60), &messages);
  EXPECT_EQ(later.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(later.error_message().find("behind (worker@clock): 1@1"),
            std::string::npos)
      << later.error_message();
}

// Pull is a raw method: any client may call it by name with the request's
// bytes (the wire is the generated stub's). The bytes of every message
// sent are counted in bytes_out (pstrain_server_sent_bytes_total); a
// request that is no PullRequest is INVALID_ARGUMENT and sends nothing.
TEST_F(OnArrivalServiceTest, RawPullCountsItsBytesAndRefusesGarbage) {
  using RawPull = SyncGenericCall<grpc::ByteBuffer, grpc::ByteBuffer>;
  grpc::GenericStub stub(channel_);
  auto pull = [&](const std::string& request, int* messages, uint64_t* bytes) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(30));
    RawPull call(&stub, &ctx, "/pstrain.v1.ParameterServer/Pull",
                 RawPull::Open::kWithFirstMessage);
    grpc::Slice slice(request);
    *messages = 0;
    *bytes = 0;
    if (call.WriteLast(grpc::ByteBuffer(&slice, 1))) {
      grpc::ByteBuffer msg;
      while (call.Read(&msg)) {
        ++*messages;
        *bytes += msg.Length();
      }
    }
    return call.Finish();
  };
  v1::PullRequest req;
  req.set_worker(0);
  req.set_clock(0);
  req.set_session_id(SessionOf(0));
  int messages = 0;
  uint64_t bytes = 0;
  const uint64_t before = service_->bytes_out();
  grpc::Status st = pull(req.SerializeAsString(), &messages, &bytes);
  ASSERT_TRUE(st.ok()) << st.error_code() << ": " << st.error_message();
  EXPECT_GE(messages, 1);  // the head with the first chunks
  EXPECT_EQ(service_->bytes_out() - before, bytes);

  const uint64_t sent = service_->bytes_out();
  st = pull(std::string("\x0f\x01\x02"), &messages, &bytes);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("pull without a valid PullRequest"),
            std::string::npos)
      << st.error_message();
  EXPECT_EQ(messages, 0);
  EXPECT_EQ(service_->bytes_out(), sent);
}

// Issue 23, finding 1: Rollback, Checkpoint and Shutdown come from the
// coordinator only (its key, RegisterServerResponse.coordinator_key, in the
// call's metadata), token or not; a rollback names only the job's own
// checkpoints and a generation the job can reach. A refused call changes
// nothing: the shard keeps its weights and version, writes no file, and
// keeps serving.
TEST_F(OnArrivalServiceTest, ControlCallsComeFromTheCoordinatorOnly) {
  const std::string key(64, 'c');
  const std::string root = ::testing::TempDir() + "/control_calls";
  int rollbacks = 0, shutdowns = 0;
  service_->SetCheckpointRoot(root, 1);
  service_->SetRollbackFactory(
      [&rollbacks](const std::string&,
                   uint64_t) -> absl::StatusOr<std::shared_ptr<Shard>> {
        ++rollbacks;
        return MakeShard();
      });
  service_->SetShutdownCallback(
      [&shutdowns](const v1::ShutdownRequest&) { ++shutdowns; });
  ASSERT_TRUE(PushFrames(Frames(0, 0, RandomGrad(1))).ok());
  ASSERT_TRUE(PushFrames(Frames(1, 0, RandomGrad(2))).ok());
  const Observed before = Observe(*shard_);
  ASSERT_EQ(before.version, 1u);

  // `with_key`: "" sends none.
  auto rollback = [&](const std::string& with_key, uint64_t generation,
                      const std::string& checkpoint, uint64_t step) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    AddCoordinatorKey(&ctx, with_key);
    v1::RollbackRequest req;
    req.set_generation(generation);
    req.set_checkpoint(checkpoint);
    req.set_step(step);
    v1::RollbackResponse resp;
    return stub_->Rollback(&ctx, req, &resp);
  };
  auto checkpoint = [&](const std::string& with_key) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    AddCoordinatorKey(&ctx, with_key);
    v1::CheckpointRequest req;
    req.set_step(1);
    v1::CheckpointResponse resp;
    return stub_->Checkpoint(&ctx, req, &resp);
  };
  auto shutdown = [&](const std::string& with_key) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(10));
    AddCoordinatorKey(&ctx, with_key);
    v1::ShutdownResponse resp;
    return stub_->Shutdown(&ctx, v1::ShutdownRequest(), &resp);
  };
  auto expect = [](const grpc::Status& s, grpc::StatusCode code,
                   const std::string& words) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(words), std::string::npos)
        << s.error_message();
  };

  // Before the shard knows its coordinator, and then without or with a
  // wrong key: PERMISSION_DENIED. The finding's call: Rollback(2^64 - 1, "").
  const uint64_t kMax = std::numeric_limits<uint64_t>::max();
  expect(rollback(key, kMax, "", 0), grpc::StatusCode::PERMISSION_DENIED,
         "has not registered");
  service_->SetCoordinator(key, "", /*max_generation=*/3);
  for (const std::string& wrong : {std::string(), std::string(64, 'x')}) {
    SCOPED_TRACE(wrong.empty() ? "no key" : "wrong key");
    expect(rollback(wrong, kMax, "", 0), grpc::StatusCode::PERMISSION_DENIED,
           "only the coordinator may order a rollback");
    expect(rollback(wrong, 1, "/etc", 0), grpc::StatusCode::PERMISSION_DENIED,
           "only the coordinator");
    expect(checkpoint(wrong), grpc::StatusCode::PERMISSION_DENIED,
           "only the coordinator may order a checkpoint");
    expect(shutdown(wrong), grpc::StatusCode::PERMISSION_DENIED,
           "only the coordinator may shut a shard down");
  }
  // With the key, still no impossible generation and no foreign path.
  expect(rollback(key, kMax, "", 0), grpc::StatusCode::INVALID_ARGUMENT,
         "at most generation 3");
  expect(rollback(key, 1, "/etc", 0), grpc::StatusCode::INVALID_ARGUMENT,
         "neither the job's resume point");
  expect(rollback(key, 1, root + "/../etc", 0),
         grpc::StatusCode::INVALID_ARGUMENT, "neither");
  expect(rollback(key, 1, root + "/step-000000000000/..", 0),
         grpc::StatusCode::INVALID_ARGUMENT, "neither");
  EXPECT_EQ(rollbacks, 0);
  EXPECT_EQ(shutdowns, 0);
  EXPECT_FALSE(std::filesystem::exists(root)) << "a checkpoint was written";
  EXPECT_TRUE(Observe(*shard_) == before) << "a refused call changed the shard";
  EXPECT_EQ(service_->generation(), 0u);
  // Still serving: the next step's pushes apply.
  ASSERT_TRUE(PushFrames(Frames(0, 1, RandomGrad(3))).ok());
  ASSERT_TRUE(PushFrames(Frames(1, 1, RandomGrad(4))).ok());
  EXPECT_EQ(shard_->Stats().version(), 2u);

  // The coordinator's own calls pass (so the refusals above are the key's).
  const grpc::Status ok = rollback(key, 1, "", 0);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(rollbacks, 1);
  EXPECT_EQ(service_->generation(), 1u);
  EXPECT_TRUE(shutdown(key).ok());
  EXPECT_EQ(shutdowns, 1);
}

// Issue 22: pulls blocked on the barrier each hold a pull thread, never a
// queue slot. More pulls than a small fixed pool would have threads wait
// for the step at once, and the other worker's own pull of the open step
// (which it needs before it can push) is still served: with a queue behind
// the blocked ones, the step could never complete. All complete, in order,
// once the step does.
TEST_F(OnArrivalServiceTest, ManyBlockedPullsAllCompleteWhenTheStepDoes) {
  constexpr int kBlocked = 12;  // > a pool of a few threads; < the limit
  ASSERT_GE(service_->pull_threads().limit, kBlocked + 1);
  ASSERT_TRUE(PushFrames(Frames(0, 0, RandomGrad(41))).ok());
  std::atomic<bool> pushed{false};
  BlockedPulls blocked;
  StartPulls(kBlocked, 0, 1, &pushed, &blocked);
  ASSERT_TRUE(AwaitPullThreadsBusy(kBlocked));

  // Worker 1 reads the open step while the others wait for its push.
  int messages = 0;
  grpc::Status own =
      PullCall(1, 0, SessionOf(1), false, absl::Seconds(60), &messages);
  ASSERT_TRUE(own.ok()) << own.error_code() << ": " << own.error_message();
  EXPECT_GT(messages, 0);
  EXPECT_EQ(blocked.ended.load(), 0);  // all still waiting

  pushed = true;
  ASSERT_TRUE(PushFrames(Frames(1, 0, RandomGrad(42))).ok());
  blocked.Join();
  for (int i = 0; i < kBlocked; ++i) {
    EXPECT_TRUE(blocked.status[i].ok())
        << i << ": " << blocked.status[i].error_code() << ": "
        << blocked.status[i].error_message();
    EXPECT_GT(blocked.messages[i], 0) << i;
    EXPECT_TRUE(blocked.ended_after[i]) << i << " ended before the push";
  }
  EXPECT_EQ(shard_->Stats().version(), 1u);
  ASSERT_TRUE(AwaitPullThreadsBusy(0));
  EXPECT_LE(service_->pull_threads().threads, kBlocked + 1);
}

// The default limit follows the job: kPullThreadsPerWorker per worker, at
// least kMinPullThreads (this job has 2 workers).
TEST_F(OnArrivalServiceTest, PullLimitComesFromTheJob) {
  EXPECT_EQ(service_->pull_threads().limit,
            std::max(kMinPullThreads, 2 * kPullThreadsPerWorker));
  EXPECT_EQ(service_->pull_threads().threads, 0);  // none before a pull
}

// A pull whose client cancels it while it waits for the step gives its
// pull thread back at once, not at its deadline (an hour here): a client
// that gives up cannot hold the server's threads. The step then completes
// as usual.
TEST_F(OnArrivalServiceTest, CancelledPullGivesItsThreadBack) {
  service_->SetBarrierTimeout(absl::Hours(1));
  ASSERT_TRUE(PushFrames(Frames(0, 0, RandomGrad(71))).ok());
  grpc::ClientContext ctx;
  SetTimeout(&ctx, absl::Hours(1));
  v1::PullRequest req;
  req.set_worker(0);
  req.set_clock(1);
  req.set_session_id(SessionOf(0));
  grpc::Status cancelled;
  std::thread puller([&] {
    auto reader = stub_->Pull(&ctx, req);
    v1::PullResponse msg;
    while (reader->Read(&msg)) {
    }
    cancelled = reader->Finish();
  });
  ASSERT_TRUE(AwaitPullThreadsBusy(1));
  ctx.TryCancel();
  puller.join();
  EXPECT_EQ(cancelled.error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(AwaitPullThreadsBusy(0));  // long before the hour
  EXPECT_EQ(shard_->Stats().version(), 0u);

  ASSERT_TRUE(PushFrames(Frames(1, 0, RandomGrad(72))).ok());
  int messages = 0;
  grpc::Status next =
      PullCall(0, 1, SessionOf(0), false, absl::Seconds(60), &messages);
  ASSERT_TRUE(next.ok()) << next.error_code() << ": " << next.error_message();
  EXPECT_GT(messages, 0);
}

class SmallPullMessageServiceTest : public OnArrivalServiceTest {
 protected:
  void SetUp() override {
    options_.pull_message_bytes = 2 * kChunkElems * sizeof(float);
    OnArrivalServiceTest::SetUp();
  }
};

// A pull's messages hold chunks up to PsServiceOptions::pull_message_bytes
// (two of the fixture's chunks each), in order; the first also carries the
// head (version, min_clock).
TEST_F(SmallPullMessageServiceTest, PullMessagesHoldChunksUpToTheBudget) {
  ASSERT_TRUE(PushFrames(Frames(0, 0, RandomGrad(1))).ok());
  ASSERT_TRUE(PushFrames(Frames(1, 0, RandomGrad(2))).ok());
  using RawPull = SyncGenericCall<grpc::ByteBuffer, grpc::ByteBuffer>;
  grpc::GenericStub stub(channel_);
  grpc::ClientContext ctx;
  SetTimeout(&ctx, absl::Seconds(30));
  RawPull call(&stub, &ctx, "/pstrain.v1.ParameterServer/Pull",
               RawPull::Open::kWithFirstMessage);
  v1::PullRequest req;
  req.set_worker(0);
  req.set_clock(1);
  req.set_session_id(SessionOf(0));
  grpc::Slice request(req.SerializeAsString());
  std::vector<v1::PullResponse> messages;
  if (call.WriteLast(grpc::ByteBuffer(&request, 1))) {
    grpc::ByteBuffer msg;
    while (call.Read(&msg)) {
      std::vector<grpc::Slice> slices;
      ASSERT_TRUE(msg.Dump(&slices).ok());
      std::string bytes;
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      ASSERT_TRUE(messages.emplace_back().ParseFromString(bytes));
    }
  }
  const grpc::Status st = call.Finish();
  ASSERT_TRUE(st.ok()) << st.error_code() << ": " << st.error_message();
  ASSERT_EQ(messages.size(), static_cast<size_t>(kChunks / 2));
  EXPECT_EQ(messages[0].version(), 1u);
  EXPECT_EQ(messages[0].min_clock(), 1u);
  int next = 0;
  for (size_t m = 0; m < messages.size(); ++m) {
    if (m > 0) {
      EXPECT_EQ(messages[m].version(), 0u) << m;  // no head
    }
    ASSERT_EQ(messages[m].chunks_size(), 2) << m;
    for (const v1::ChunkData& c : messages[m].chunks()) {
      EXPECT_EQ(c.index(), static_cast<uint32_t>(next++));
    }
  }
}

// A pull split over parts (PullRequest.part, parts): part p carries the
// chunks at positions p, p + parts, ..., each part with its own head; a
// part beyond parts, or more than kMaxPullParts, is INVALID_ARGUMENT.
TEST_F(SmallPullMessageServiceTest, PullPartsCarryEveryPartsthChunk) {
  ASSERT_TRUE(PushFrames(Frames(0, 0, RandomGrad(1))).ok());
  ASSERT_TRUE(PushFrames(Frames(1, 0, RandomGrad(2))).ok());
  auto pull = [&](uint32_t part, uint32_t parts,
                  std::vector<v1::PullResponse>* messages) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(30));
    v1::PullRequest req;
    req.set_worker(0);
    req.set_clock(1);
    req.set_session_id(SessionOf(0));
    req.set_part(part);
    req.set_parts(parts);
    auto reader = stub_->Pull(&ctx, req);
    v1::PullResponse msg;
    while (reader->Read(&msg)) messages->push_back(msg);
    return reader->Finish();
  };
  constexpr uint32_t kParts = 3;
  std::vector<int> seen(kChunks, 0);
  for (uint32_t part = 0; part < kParts; ++part) {
    std::vector<v1::PullResponse> messages;
    const grpc::Status st = pull(part, kParts, &messages);
    ASSERT_TRUE(st.ok()) << st.error_code() << ": " << st.error_message();
    ASSERT_FALSE(messages.empty()) << part;
    EXPECT_EQ(messages[0].version(), 1u) << part;
    EXPECT_EQ(messages[0].min_clock(), 1u) << part;
    uint32_t next = part;
    for (const v1::PullResponse& m : messages) {
      for (const v1::ChunkData& c : m.chunks()) {
        EXPECT_EQ(c.index(), next) << part;
        next += kParts;
        if (c.index() < static_cast<uint32_t>(kChunks)) ++seen[c.index()];
      }
    }
  }
  EXPECT_EQ(seen, std::vector<int>(kChunks, 1));
  for (auto [part, parts] : std::vector<std::pair<uint32_t, uint32_t>>{
           {2, 2}, {0, kMaxPullParts + 1}, {1, 0}}) {
    std::vector<v1::PullResponse> messages;
    const grpc::Status st = pull(part, parts, &messages);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << part << " of " << parts;
    EXPECT_NE(st.error_message().find("PullRequest.part"), std::string::npos)
        << st.error_message();
    EXPECT_TRUE(messages.empty());
  }
}

class SmallPullPoolServiceTest : public OnArrivalServiceTest {
 protected:
  void SetUp() override {
    options_.max_concurrent_pulls = 2;
    OnArrivalServiceTest::SetUp();
  }
};

// A pull beyond max_concurrent_pulls is refused at once with UNAVAILABLE
// (which clients retry), naming the limit, and takes nothing: the pulls
// already waiting complete with the step, and a later pull is served on a
// thread already started.
TEST_F(SmallPullPoolServiceTest, PullBeyondTheLimitIsRefusedAndRetryable) {
  ASSERT_EQ(service_->pull_threads().limit, 2);
  ASSERT_TRUE(PushFrames(Frames(0, 0, RandomGrad(51))).ok());
  std::atomic<bool> pushed{false};
  BlockedPulls blocked;
  StartPulls(2, 0, 1, &pushed, &blocked);
  ASSERT_TRUE(AwaitPullThreadsBusy(2));

  int messages = -1;
  grpc::Status refused =
      PullCall(1, 0, SessionOf(1), false, absl::Seconds(60), &messages);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(refused.error_message().find("pull threads busy: all 2"),
            std::string::npos)
      << refused.error_message();
  EXPECT_EQ(messages, 0);
  EXPECT_EQ(blocked.ended.load(), 0);
  EXPECT_EQ(shard_->Stats().version(), 0u);

  pushed = true;
  ASSERT_TRUE(PushFrames(Frames(1, 0, RandomGrad(52))).ok());
  blocked.Join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(blocked.status[i].ok())
        << i << ": " << blocked.status[i].error_message();
    EXPECT_TRUE(blocked.ended_after[i]) << i;
  }
  ASSERT_TRUE(AwaitPullThreadsBusy(0));
  // The retry is served, on a thread already started.
  grpc::Status retry =
      PullCall(1, 1, SessionOf(1), false, absl::Seconds(60), &messages);
  ASSERT_TRUE(retry.ok()) << retry.error_code() << ": "
                          << retry.error_message();
  EXPECT_GT(messages, 0);
  EXPECT_EQ(service_->pull_threads().threads, 2);
}

// Shutdown with pulls in flight: CloseShard ends every blocked pull with
// UNAVAILABLE at once (not at its deadline) and refuses later pulls without
// a thread; the server then shuts down and destroying the service joins
// the pull threads (no detached thread outlives it).
TEST_F(OnArrivalServiceTest, ShutdownEndsPullsInFlightAndJoinsTheirThreads) {
  constexpr int kBlocked = 6;
  ASSERT_TRUE(PushFrames(Frames(0, 0, RandomGrad(61))).ok());
  std::atomic<bool> closed{false};
  BlockedPulls blocked;
  StartPulls(kBlocked, 0, 1, &closed, &blocked);
  ASSERT_TRUE(AwaitPullThreadsBusy(kBlocked));

  closed = true;
  service_->CloseShard();
  blocked.Join();
  for (int i = 0; i < kBlocked; ++i) {
    EXPECT_EQ(blocked.status[i].error_code(), grpc::StatusCode::UNAVAILABLE)
        << i << ": " << blocked.status[i].error_message();
    EXPECT_NE(blocked.status[i].error_message().find("shutting down"),
              std::string::npos)
        << blocked.status[i].error_message();
    EXPECT_EQ(blocked.messages[i], 0) << i;
    EXPECT_TRUE(blocked.ended_after[i]) << i;
  }
  int messages = -1;
  grpc::Status late =
      PullCall(1, 0, SessionOf(1), false, absl::Seconds(60), &messages);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(late.error_message(), "server shutting down");
  EXPECT_EQ(messages, 0);
  EXPECT_LE(service_->pull_threads().threads, kBlocked);  // took none

  ShutdownGrpcServer(server_.get(), absl::Seconds(5));
  server_->Wait();
  server_.reset();
  service_.reset();  // joins the pull threads
}

}  // namespace
}  // namespace pstrain
