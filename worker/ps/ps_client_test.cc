// PsClient against a fake shard: pulls are decoded straight from gRPC's
// buffers (and refused when the server's chunks do not fit the map), pushes
// go out as messages any protobuf parser reads back exactly.
#include "worker/ps/ps_client.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/sharding.h"
#include "common/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/ps/tensor_gate.h"

namespace pstrain {
namespace {

using pstrain::v1::ChunkData;
using pstrain::v1::PullResponse;
using pstrain::v1::PushRequest;

constexpr uint64_t kElems = 3000;  // three chunks of 1024, 1024, 952

// One shard that answers pulls with `pull_messages` and records pushes.
class FakeShard final : public pstrain::v1::ParameterServer::Service {
 public:
  grpc::Status Pull(grpc::ServerContext*,
                    const pstrain::v1::PullRequest* request,
                    grpc::ServerWriter<PullResponse>* writer) override {
    {
      absl::MutexLock lock(&mu);
      pull_requests.push_back(*request);
    }
    // Shared: the handler may still be waking from the wait when the test
    // that notified it has returned.
    const std::shared_ptr<absl::Notification> hold = hold_pull;
    for (size_t i = 0; i < pull_messages.size(); ++i) {
      if (i == hold_pull_at && hold != nullptr) {
        hold->WaitForNotificationWithTimeout(absl::Seconds(10));
      }
      if (request->parts() <= 1) {
        writer->Write(pull_messages[i]);
        continue;
      }
      // A part: the chunks at its positions (one tensor: a chunk's index is
      // its position), and its head's version from split_versions.
      PullResponse m = pull_messages[i];
      m.clear_chunks();
      for (const ChunkData& c : pull_messages[i].chunks()) {
        if (c.index() % request->parts() == request->part()) {
          *m.add_chunks() = c;
        }
      }
      if (i == 0 && request->part() < split_versions.size()) {
        m.set_version(split_versions[request->part()]);
      }
      writer->Write(m);
    }
    return grpc::Status::OK;
  }
  grpc::Status Push(grpc::ServerContext*,
                    grpc::ServerReader<PushRequest>* reader,
                    pstrain::v1::PushResponse* response) override {
    PushRequest m;
    std::vector<PushRequest> stream;
    while (reader->Read(&m)) {
      stream.push_back(m);
      absl::MutexLock lock(&mu);
      for (const ChunkData& c : m.chunks()) arrived.push_back(c.index());
    }
    absl::MutexLock lock(&mu);
    pushed = stream;
    streams.push_back(std::move(stream));
    response->set_version(1);
    response->set_pending(answer_pending);
    if (answer_pending) response->set_missing_chunks(1);
    return grpc::Status::OK;
  }
  std::vector<PullResponse> pull_messages;
  // Pulls split over parts: part p's head says version split_versions[p]
  // (where given).
  std::vector<uint64_t> split_versions;
  // Set: message hold_pull_at is sent only once notified.
  std::shared_ptr<absl::Notification> hold_pull;
  size_t hold_pull_at = 0;
  absl::Mutex mu;
  std::vector<uint32_t> arrived ABSL_GUARDED_BY(mu);    // pushed chunks, so far
  std::vector<PushRequest> pushed ABSL_GUARDED_BY(mu);  // the last stream
  std::vector<std::vector<PushRequest>> streams ABSL_GUARDED_BY(mu);
  bool answer_pending ABSL_GUARDED_BY(mu) = false;
  std::vector<pstrain::v1::PullRequest> pull_requests ABSL_GUARDED_BY(mu);
};

class PsClientTest : public ::testing::TestWithParam<pstrain::v1::DType> {
 protected:
  void SetUp() override {
    auto started = StartGrpcServer("127.0.0.1", 0,
                                   grpc::InsecureServerCredentials(), {&fake_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    pstrain::v1::TensorSpec t;
    t.set_name("w");
    t.add_shape(kElems);
    t.set_dtype(pstrain::v1::DTYPE_F32);
    auto map = BuildShardMap({t}, 1, 1024);
    ASSERT_TRUE(map.ok()) << map.status();
    map_ = *map;
    PsClientOptions options;
    options.max_attempts = 1;
    options.wire_dtype = GetParam();
    address_ = absl::StrCat("127.0.0.1:", started->port);
    auto client = PsClient::Create(map_, {MakeChannel(address_)}, options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    for (uint64_t i = 0; i < kElems; ++i) values_.push_back(0.25f * i - 100);
  }
  void TearDown() override { server_->Shutdown(); }

  // The pull the real service sends: a head, then the chunks.
  void ServeValues() {
    PullResponse head;
    head.set_version(7);
    head.set_min_clock(5);
    fake_.pull_messages = {head, PullResponse()};
    for (const auto& c : map_.chunks()) {
      EncodeChunk(c.tensor(), c.index(), values_.data() + c.offset(),
                  c.length(), fake_.pull_messages[1].add_chunks(), GetParam());
    }
  }

  absl::Status Pull(TensorList* params, std::vector<ShardRead>* reads) {
    auto op = client_->StartPull(0, 0, params);
    absl::Status s = op->Wait();
    if (s.ok()) *reads = op->reads();
    return s;
  }

  FakeShard fake_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  pstrain::v1::ShardMap map_;
  std::unique_ptr<PsClient> client_;
  std::vector<float> values_;
};

TEST_P(PsClientTest, PullDecodesEveryChunk) {
  ServeValues();
  TensorList params;
  std::vector<ShardRead> reads;
  ASSERT_TRUE(Pull(&params, &reads).ok());
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].version, 7u);
  EXPECT_EQ(reads[0].min_clock, 5u);
  std::vector<float> want = values_;
  RoundToWire(GetParam(), want.data(), want.size());
  EXPECT_EQ(params[0], want);
  EXPECT_EQ(client_->bytes_pulled(), fake_.pull_messages[0].ByteSizeLong() +
                                         fake_.pull_messages[1].ByteSizeLong());
}

// Every shard task of an operation runs on a thread the client keeps: one
// pull and push after another reuse the same one, and a pull and a push at
// once take two, kept for the next steps (no thread is started per step).
TEST_P(PsClientTest, OperationsRunOnThreadsTheClientReuses) {
  ServeValues();
  EXPECT_EQ(client_->op_threads().threads, 0);
  TensorList params;
  TensorList grads = {values_};
  for (uint64_t clock = 0; clock < 5; ++clock) {
    std::vector<ShardRead> reads;
    ASSERT_TRUE(Pull(&params, &reads).ok());
    auto push = client_->StartPush(0, clock, 1, grads, reads);
    ASSERT_TRUE(push->Wait().ok());
    EXPECT_EQ(client_->op_threads().threads, 1) << "clock " << clock;
  }
  TensorList params2;
  for (int i = 0; i < 3; ++i) {
    auto pull = client_->StartPull(0, 0, &params2);
    auto push = client_->StartPush(0, 5, 1, grads, {ShardRead{}});
    ASSERT_TRUE(pull->Wait().ok());
    ASSERT_TRUE(push->Wait().ok());
    EXPECT_LE(client_->op_threads().threads, 2);
  }
  EXPECT_EQ(client_->op_threads().busy, 0);
}

// Without reuse_op_threads every operation's shard tasks run on threads
// started for it: the client keeps none, and the pull reads the same values.
TEST_P(PsClientTest, WithoutReusedThreadsOperationsKeepNone) {
  ServeValues();
  PsClientOptions options;
  options.max_attempts = 1;
  options.wire_dtype = GetParam();
  options.reuse_op_threads = false;
  auto client = PsClient::Create(map_, {MakeChannel(address_)}, options);
  ASSERT_TRUE(client.ok()) << client.status();
  TensorList grads = {values_};
  for (uint64_t clock = 0; clock < 3; ++clock) {
    TensorList params;
    auto pull = (*client)->StartPull(0, clock, &params);
    ASSERT_TRUE(pull->Wait().ok());
    std::vector<float> want = values_;
    RoundToWire(GetParam(), want.data(), want.size());
    EXPECT_EQ(params[0], want);
    auto push = (*client)->StartPush(0, clock, 1, grads, pull->reads());
    ASSERT_TRUE(push->Wait().ok());
    EXPECT_EQ((*client)->op_threads().threads, 0) << "clock " << clock;
  }
}

// A stand-in's announcement is a pull with session_only, answered with no
// message; a shard that sends weights instead (one that ignores the field)
// is an error, not a silent read.
TEST_P(PsClientTest, AnnounceSessionSendsASessionOnlyPull) {
  ASSERT_TRUE(client_->AnnounceSession(1).ok());
  {
    absl::MutexLock lock(&fake_.mu);
    ASSERT_EQ(fake_.pull_requests.size(), 1u);
    EXPECT_TRUE(fake_.pull_requests[0].session_only());
    EXPECT_EQ(fake_.pull_requests[0].worker(), 1u);
  }
  ServeValues();
  const absl::Status st = client_->AnnounceSession(1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_THAT(std::string(st.message()),
              ::testing::HasSubstr("shard 0: a session-only pull was answered "
                                   "with 2 messages"));
}

TEST_P(PsClientTest, PullRefusesChunksThatDoNotFitTheMap) {
  TensorList params;
  std::vector<ShardRead> reads;
  ServeValues();
  fake_.pull_messages[1].mutable_chunks(1)->set_index(9);
  absl::Status s = Pull(&params, &reads);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("unexpected chunk 9 of 'w'"), std::string::npos)
      << s;

  ServeValues();
  fake_.pull_messages[1].mutable_chunks(0)->mutable_data()->resize(8);
  s = Pull(&params, &reads);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("8 bytes for 1024 elements"), std::string::npos)
      << s;

  ServeValues();
  fake_.pull_messages[1].mutable_chunks(2)->set_shape(0, 5);
  s = Pull(&params, &reads);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("shape"), std::string::npos) << s;

  ServeValues();
  fake_.pull_messages[1].mutable_chunks()->RemoveLast();
  s = Pull(&params, &reads);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("pull returned 2 of 3 chunks"), std::string::npos)
      << s;
}

TEST_P(PsClientTest, PushSendsTheGradientsAsProtobufReadsThem) {
  TensorList grads = {values_};
  auto op = client_->StartPush(0, 3, 16, grads, {ShardRead{2, 1}});
  ASSERT_TRUE(op->Wait().ok());
  absl::MutexLock lock(&fake_.mu);
  ASSERT_FALSE(fake_.pushed.empty());
  const pstrain::v1::PushHeader& h = fake_.pushed[0].header();
  EXPECT_EQ(h.clock(), 3u);
  EXPECT_EQ(h.num_samples(), 16u);
  EXPECT_EQ(h.read_version(), 2u);
  EXPECT_EQ(h.read_min_clock(), 1u);
  std::vector<float> got(kElems, -1);
  size_t chunks = 0;
  for (const PushRequest& m : fake_.pushed) {
    for (const ChunkData& c : m.chunks()) {
      const pstrain::v1::ChunkInfo* info_ptr = nullptr;
      for (const auto& i : map_.chunks()) {
        if (i.index() == c.index()) info_ptr = &i;
      }
      ASSERT_NE(info_ptr, nullptr);
      const pstrain::v1::ChunkInfo& info = *info_ptr;
      ASSERT_TRUE(DecodeChunk(c, info.length(), true,
                              got.data() + info.offset(), GetParam())
                      .ok());
      ++chunks;
    }
  }
  EXPECT_EQ(chunks, 3u);
  std::vector<float> want = values_;
  RoundToWire(GetParam(), want.data(), want.size());
  EXPECT_EQ(got, want);
}

// PsClientOptions.push_message_bytes: chunks share a message up to the
// budget (a chunk larger than it goes alone), so the 4 KiB chunks here go
// two to a message at 8 KiB, one at 4 KiB, all three at 4 MiB; a budget
// outside [1 KiB, 4 MiB] is refused.
TEST_P(PsClientTest, PushMessagesHoldChunksUpToTheBudget) {
  for (const auto& [budget, messages] :
       std::vector<std::pair<uint64_t, size_t>>{
           {8 << 10, 2}, {4 << 10, 3}, {4 << 20, 1}, {1 << 10, 3}}) {
    PsClientOptions options;
    options.max_attempts = 1;
    options.wire_dtype = pstrain::v1::DTYPE_F32;
    options.push_message_bytes = budget;
    auto client = PsClient::Create(map_, {MakeChannel(address_)}, options);
    ASSERT_TRUE(client.ok()) << client.status();
    TensorList grads = {values_};
    auto op = (*client)->StartPush(0, 3, 16, grads, {ShardRead{2, 1}});
    ASSERT_TRUE(op->Wait().ok());
    ASSERT_EQ(op->reads().size(), 1u);
    EXPECT_EQ(op->reads()[0].version, 1u);  // the fake's answer
    absl::MutexLock lock(&fake_.mu);
    EXPECT_EQ(fake_.pushed.size(), messages) << budget;
    size_t chunks = 0;
    for (const PushRequest& m : fake_.pushed) chunks += m.chunks_size();
    EXPECT_EQ(chunks, 3u) << budget;
  }
  for (uint64_t bad : {uint64_t{1023}, uint64_t{(4 << 20) + 1}}) {
    PsClientOptions options;
    options.push_message_bytes = bad;
    auto client = PsClient::Create(map_, {MakeChannel(address_)}, options);
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(client.status().message().find("push_message_bytes"),
              std::string::npos);
  }
}

// worker.overlap's units are the shard map's chunks: a pull with a gate
// opens each chunk as soon as it is decoded, while the rest of the same
// tensor is still on its way.
TEST_P(PsClientTest, PullWithAGateOpensEachChunkAsItArrives) {
  PullResponse head;
  head.set_version(7);
  fake_.pull_messages = {head};
  for (const auto& c : map_.chunks()) {
    EncodeChunk(c.tensor(), c.index(), values_.data() + c.offset(), c.length(),
                fake_.pull_messages.emplace_back().add_chunks(), GetParam());
  }
  auto rest = std::make_shared<absl::Notification>();
  fake_.hold_pull = rest;
  fake_.hold_pull_at = 2;  // the head and chunk 0 first
  TensorList params = {std::vector<float>(kElems)};
  TensorGate arrived(map_.chunks_size());
  auto op = client_->StartPull(
      0, 0, MutableTensorViews(params.begin(), params.end()), &arrived);
  EXPECT_TRUE(arrived.Wait(0, absl::Now() + absl::Seconds(10)).ok());
  EXPECT_FALSE(arrived.IsOpen(1));
  EXPECT_FALSE(arrived.IsOpen(2));
  rest->Notify();
  ASSERT_TRUE(op->Wait().ok());
  for (int i = 0; i < map_.chunks_size(); ++i) EXPECT_TRUE(arrived.IsOpen(i));
  std::vector<float> want = values_;
  RoundToWire(GetParam(), want.data(), want.size());
  EXPECT_EQ(params[0], want);

  // A gate sized like the tensors, not the chunks, is refused.
  TensorGate by_tensor(1);
  const absl::Status s =
      client_
          ->StartPull(0, 0, MutableTensorViews(params.begin(), params.end()),
                      &by_tensor)
          ->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// Cancel ends a pull that is in the middle of its stream (the server
// holds the rest) with CANCELLED, and every later call too.
TEST_P(PsClientTest, CancelEndsAPullInFlight) {
  ServeValues();
  auto rest = std::make_shared<absl::Notification>();
  fake_.hold_pull = rest;
  fake_.hold_pull_at = 1;  // the head first, then nothing until notified
  TensorList params = {std::vector<float>(kElems)};
  TensorGate arrived(map_.chunks_size());
  auto op = client_->StartPull(
      0, 0, MutableTensorViews(params.begin(), params.end()), &arrived);
  // The head has been sent once the fake holds; wait for the request.
  for (int i = 0; i < 1000; ++i) {
    {
      absl::MutexLock lock(&fake_.mu);
      if (!fake_.pull_requests.empty()) break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  client_->Cancel();
  const absl::Status s = op->Wait();
  rest->Notify();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_FALSE(arrived.IsOpen(0));  // no chunk was decoded
  const absl::Status later =
      client_->StartPull(0, 0, MutableTensorViews(params.begin(), params.end()))
          ->Wait();
  EXPECT_EQ(later.code(), absl::StatusCode::kCancelled) << later;
}

// A push with a gate sends each chunk only once it is open, in
// tensor_chunks order, and the shard reads what is open while the rest is
// still being computed.
TEST_P(PsClientTest, PushWithAGateSendsEachChunkOnceOpen) {
  EXPECT_EQ(client_->tensor_chunks(0), (std::vector<int>{0, 1, 2}));
  TensorList grads = {values_};
  TensorGate ready(map_.chunks_size());
  auto op =
      client_->StartPush(0, 3, 16, TensorViews(grads.begin(), grads.end()),
                         {ShardRead{2, 1}}, &ready);
  ready.Open(0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  auto arrived = [&] {
    absl::MutexLock lock(&fake_.mu);
    return fake_.arrived;
  };
  while (arrived().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(arrived(), std::vector<uint32_t>{0});
  ready.Open(1);
  ready.Open(2);
  ASSERT_TRUE(op->Wait().ok());
  EXPECT_EQ(arrived(), (std::vector<uint32_t>{0, 1, 2}));

  // A chunk that never opens fails the push once network.rpc_timeout_s
  // passes; here the gate is aborted instead.
  TensorGate stuck(map_.chunks_size());
  stuck.Abort(absl::CancelledError("backward failed"));
  const absl::Status s =
      client_
          ->StartPush(0, 4, 16, TensorViews(grads.begin(), grads.end()),
                      {ShardRead{2, 1}}, &stuck)
          ->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("tensor 'w' chunk 0"), std::string::npos) << s;
}

// push_streams 3: three streams at once (on connections of their own),
// each with the header (parts = 3) and every third chunk of the shard;
// together every chunk once, with the gradient's values.
TEST_P(PsClientTest, PushSplitsTheShardsChunksOverStreams) {
  PsClientOptions options;
  options.max_attempts = 1;
  options.wire_dtype = GetParam();
  options.push_streams = 3;
  auto split = PsClient::Create(
      map_, {MakeChannel(address_)}, options,
      {{MakeChannel(address_, nullptr, 1), MakeChannel(address_, nullptr, 2)}});
  ASSERT_TRUE(split.ok()) << split.status();
  TensorList grads = {values_};
  const absl::Status pushed =
      (*split)->StartPush(0, 3, 16, grads, {ShardRead{2, 1}})->Wait();
  ASSERT_TRUE(pushed.ok()) << pushed;
  absl::MutexLock lock(&fake_.mu);
  ASSERT_EQ(fake_.streams.size(), 3u);
  std::vector<int> seen(map_.chunks_size(), 0);
  std::vector<float> got(kElems, -1);
  for (const std::vector<PushRequest>& stream : fake_.streams) {
    ASSERT_FALSE(stream.empty());
    EXPECT_EQ(stream[0].header().parts(), 3u);
    EXPECT_EQ(stream[0].header().clock(), 3u);
    size_t chunks = 0;
    for (const PushRequest& m : stream) {
      for (const ChunkData& c : m.chunks()) {
        ASSERT_LT(c.index(), seen.size());
        ++seen[c.index()];
        const pstrain::v1::ChunkInfo& info = map_.chunks(c.index());
        ASSERT_TRUE(DecodeChunk(c, info.length(), true,
                                got.data() + info.offset(), GetParam())
                        .ok());
        ++chunks;
      }
    }
    EXPECT_EQ(chunks, 1u);  // three chunks over three streams
  }
  EXPECT_EQ(seen, std::vector<int>(map_.chunks_size(), 1));
  std::vector<float> want = values_;
  RoundToWire(GetParam(), want.data(), want.size());
  EXPECT_EQ(got, want);
}

// pull_streams 3: three pulls at once, part p on part connection p (the
// larger of push_streams and pull_streams sets how many), each asking for its
// part (PullRequest.part, parts) and every chunk decoded once; parts that read
// different versions are pulled again as one stream, whose read is the one
// reported.
TEST_P(PsClientTest, PullSplitsOverStreamsAndRereadsATornOne) {
  ServeValues();
  for (bool torn : {false, true}) {
    {
      absl::MutexLock lock(&fake_.mu);
      fake_.pull_requests.clear();
    }
    fake_.split_versions =
        torn ? std::vector<uint64_t>{7, 8, 7} : std::vector<uint64_t>{};
    PsClientOptions options;
    options.max_attempts = 1;
    options.wire_dtype = GetParam();
    options.push_streams = 2;
    options.pull_streams = 3;
    auto client = PsClient::Create(map_, {MakeChannel(address_)}, options,
                                   {{MakeChannel(address_, nullptr, 1),
                                     MakeChannel(address_, nullptr, 2)}});
    ASSERT_TRUE(client.ok()) << client.status();
    TensorList params;
    auto op = (*client)->StartPull(0, 4, &params);
    ASSERT_TRUE(op->Wait().ok()) << op->Wait();
    std::vector<float> want = values_;
    RoundToWire(GetParam(), want.data(), want.size());
    EXPECT_EQ(params[0], want) << "torn " << torn;
    EXPECT_EQ(op->reads()[0].version, 7u);
    EXPECT_EQ(op->reads()[0].min_clock, 5u);
    absl::MutexLock lock(&fake_.mu);
    std::vector<int> parts_seen(3, 0);
    int whole = 0;
    for (const pstrain::v1::PullRequest& r : fake_.pull_requests) {
      EXPECT_EQ(r.clock(), 4u);
      if (r.parts() == 0) {
        ++whole;
        continue;
      }
      ASSERT_EQ(r.parts(), 3u);
      ASSERT_LT(r.part(), 3u);
      ++parts_seen[r.part()];
    }
    EXPECT_EQ(parts_seen, std::vector<int>(3, 1)) << "torn " << torn;
    EXPECT_EQ(whole, torn ? 1 : 0);
  }
}

// split_min_bytes: a shard's push of fewer bytes on the wire goes as one
// stream (no parts in its header); at that many bytes it is split.
TEST_P(PsClientTest, PushBelowTheSplitMinimumGoesAsOneStream) {
  const uint64_t bytes = kElems * WireElementBytes(GetParam());
  for (uint64_t min : {bytes + 1, bytes}) {
    {
      absl::MutexLock lock(&fake_.mu);
      fake_.streams.clear();
    }
    PsClientOptions options;
    options.max_attempts = 1;
    options.wire_dtype = GetParam();
    options.push_streams = 3;
    options.split_min_bytes = min;
    auto client = PsClient::Create(map_, {MakeChannel(address_)}, options,
                                   {{MakeChannel(address_, nullptr, 1),
                                     MakeChannel(address_, nullptr, 2)}});
    ASSERT_TRUE(client.ok()) << client.status();
    TensorList grads = {values_};
    const absl::Status pushed =
        (*client)->StartPush(0, 3, 16, grads, {ShardRead{2, 1}})->Wait();
    ASSERT_TRUE(pushed.ok()) << pushed;
    absl::MutexLock lock(&fake_.mu);
    const size_t want_streams = min > bytes ? 1 : 3;
    ASSERT_EQ(fake_.streams.size(), want_streams) << "min " << min;
    size_t chunks = 0;
    for (const std::vector<PushRequest>& stream : fake_.streams) {
      ASSERT_FALSE(stream.empty());
      EXPECT_EQ(stream[0].header().parts(),
                want_streams == 1 ? 0u : want_streams);
      for (const PushRequest& m : stream) chunks += m.chunks_size();
    }
    EXPECT_EQ(chunks, static_cast<size_t>(map_.chunks_size()));
  }
}

// Every part answered "pending" (the shard never saw the push complete):
// the push fails with UNAVAILABLE saying so.
TEST_P(PsClientTest, PushWhosePartsAllPendFails) {
  {
    absl::MutexLock lock(&fake_.mu);
    fake_.answer_pending = true;
  }
  PsClientOptions options;
  options.max_attempts = 1;
  options.wire_dtype = GetParam();
  options.push_streams = 2;
  auto split = PsClient::Create(map_, {MakeChannel(address_)}, options);
  ASSERT_TRUE(split.ok()) << split.status();
  TensorList grads = {values_};
  const absl::Status s =
      (*split)->StartPush(0, 3, 16, grads, {ShardRead{2, 1}})->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("none committed it"), std::string::npos) << s;
}

// push_streams outside [1, 8] and extra channels that do not match it are
// refused.
TEST_P(PsClientTest, CreateChecksPushStreams) {
  for (int streams : {0, kMaxPushStreams + 1}) {
    PsClientOptions options;
    options.push_streams = streams;
    auto c = PsClient::Create(map_, {MakeChannel(address_)}, options);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("push_streams"), std::string::npos);
    PsClientOptions pulls;
    pulls.pull_streams = streams;
    c = PsClient::Create(map_, {MakeChannel(address_)}, pulls);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("pull_streams"), std::string::npos);
  }
  PsClientOptions options;
  options.push_streams = 3;
  auto c = PsClient::Create(map_, {MakeChannel(address_)}, options,
                            {{MakeChannel(address_, nullptr, 1)}});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("want 2 per shard"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PsClientTest,
                         ::testing::Values(pstrain::v1::DTYPE_F32,
                                           pstrain::v1::DTYPE_BF16));

}  // namespace
}  // namespace pstrain
