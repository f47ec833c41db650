// GrpcTransport's waits on a hung right neighbour: a RingPeer on 127.0.0.1
// that takes the stream and never reads it, so the sender's HTTP/2 window
// fills (as when the neighbour's process is stopped). Flush and Close end
// DEADLINE_EXCEEDED at their deadline, or CANCELLED promptly after
// WaitBound::cancelled turns true (SIGTERM in a worker), and the rank's
// buffer may be freed as soon as they return (run under ASan too: bazel test
// --config=asan). The ring's final flush and RingAllReducer::Close end the
// same way with RingOptions::cancelled.
//
// Strangers at a rank's RingPeer (a process holding the job token but not
// the left neighbour's session id): a stream whose first segment claims the
// left neighbour's rank with a made-up id, then sends garbage or is
// cancelled, fails nothing, before the rank knows its neighbour or after;
// its segments take no key and move no window; a stream that sends nothing
// is ended. The real ring then completes with the right sums.
#include "worker/allreduce/grpc_transport.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/sync_generic_call.h"
#include "gtest/gtest.h"
#include "tests/harness/sanitizer.h"
#include "worker/allreduce/mailbox.h"
#include "worker/allreduce/ring_allreduce.h"
#include "worker/allreduce/segment_wire.h"
#include "worker/allreduce/transport.h"

namespace pstrain {
namespace {

// How soon after its flag a cancelled wait must end. The waits poll the flag
// every few tens of milliseconds, so on a quiet machine it is well under a
// second; the bound is generous for a loaded machine and scaled under
// sanitizers (a TSan run measured 1.9 s), and still far below the tests' 60 s
// deadlines, so only the cancel can meet it (and the status says CANCELLED).
// "Ended by the cancel, not by the 60 s deadline": a bound far below the
// deadline and far above any delay of a loaded machine or a sanitizer (3 s,
// the bound before, measured 3.04 s on a loaded 2-core machine); the
// printed figure is the actual promptness.
const absl::Duration kPromptly =
    absl::Seconds(kSanitizerSlowdown == 1 ? 10 : 45);

// Segments of 1 MiB, 48 of them: three times the link's 16 MiB window.
constexpr size_t kSegmentElems = (1 << 20) / sizeof(float);
constexpr size_t kFillElems = 48 * kSegmentElems;
constexpr uint64_t kSession = 1000, kLeftSession = 1001;

// A RingPeer that takes every SendSegments stream and never reads from it,
// nor ends it until it is cancelled: a neighbour whose process hangs.
class HungPeer final
    : public pstrain::v1::RingPeer::WithRawCallbackMethod_SendSegments<
          pstrain::v1::RingPeer::Service> {
 public:
  grpc::ServerReadReactor<grpc::ByteBuffer>* SendSegments(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override {
    return new Stream;
  }

 private:
  class Stream : public grpc::ServerReadReactor<grpc::ByteBuffer> {
    void OnCancel() override { Finish(grpc::Status::CANCELLED); }
    void OnDone() override { delete this; }
  };
};

// Rank 0 of 2 whose right neighbour is a HungPeer behind a real server (the
// ring's link settings, as shipped); its own inbox is not served (tests
// fill it by hand).
class HungLink {
 public:
  HungLink() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    for (const auto& [key, value] : RingLinkArgs()) {
      builder.AddChannelArgument(key, value);
    }
    builder.RegisterService(&peer_);
    server_ = builder.BuildAndStart();
  }
  ~HungLink() {
    transport_.reset();  // cancels a stream still open
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    }
  }

  // The transport, or why there is none.
  absl::StatusOr<GrpcTransport*> Start() {
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError("cannot listen on 127.0.0.1");
    }
    absl::StatusOr<std::unique_ptr<GrpcTransport>> t = GrpcTransport::Create(
        0, 2, MakeRingChannel(absl::StrCat("127.0.0.1:", port_)), &inbox_,
        kSession, kLeftSession);
    if (!t.ok()) return t.status();
    transport_ = *std::move(t);
    return transport_.get();
  }
  RingPeerService* inbox() { return &inbox_; }
  void DestroyTransport() { transport_.reset(); }

 private:
  HungPeer peer_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  RingPeerService inbox_;
  std::unique_ptr<GrpcTransport> transport_;
};

// Sends data[0, n) as step 0's segments of kSegmentElems.
absl::Status SendAll(Transport* t, const std::vector<float>& data, size_t n) {
  for (size_t off = 0; off < n; off += kSegmentElems) {
    const SegmentKey key{0, pstrain::v1::REDUCE_SCATTER, 0, off};
    const size_t len = std::min(kSegmentElems, n - off);
    absl::Status st =
        t->Send(key, absl::MakeConstSpan(data.data() + off, len),
                pstrain::v1::DTYPE_F32, absl::Now() + absl::Seconds(10));
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

// Turns its predicate true `after` from construction or, given `ready`,
// `after` from when ready() is first true (30 s at most); Join() says when.
class Canceller {
 public:
  explicit Canceller(absl::Duration after, std::function<bool()> ready = {})
      : thread_([this, after, ready] {
          const absl::Time until = absl::Now() + absl::Seconds(30);
          while (ready && !ready() && absl::Now() < until) {
            absl::SleepFor(absl::Milliseconds(5));
          }
          absl::SleepFor(after);
          at_ = absl::Now();
          flag_.store(true);
        }) {}
  ~Canceller() {
    if (thread_.joinable()) thread_.join();
  }

  std::function<bool()> predicate() {
    return [this] { return flag_.load(); };
  }
  absl::Time Join() {
    thread_.join();
    return at_;
  }

 private:
  std::atomic<bool> flag_{false};
  absl::Time at_ = absl::InfiniteFuture();  // written before flag_, read
                                            // after the join
  std::thread thread_;
};

// Which wait of the sender is tested: its flush with the window full, its
// close with the window full, and its close with every segment written but
// never confirmed (the neighbour never reads the half-close).
enum class Wait { kFlush, kCloseFull, kCloseUnconfirmed };

std::string WaitName(Wait w) {
  switch (w) {
    case Wait::kFlush:
      return "Flush";
    case Wait::kCloseFull:
      return "CloseFull";
    case Wait::kCloseUnconfirmed:
      return "CloseUnconfirmed";
  }
  return "?";
}

class HungNeighbourTest : public ::testing::TestWithParam<Wait> {
 protected:
  // Sends what GetParam() needs from a heap buffer and runs the wait.
  absl::Status SendAndWait(GrpcTransport* t, const WaitBound& bound) {
    data_ = std::make_unique<std::vector<float>>(kFillElems, 1.5f);
    const size_t n =
        GetParam() == Wait::kCloseUnconfirmed ? kSegmentElems : kFillElems;
    if (absl::Status st = SendAll(t, *data_, n); !st.ok()) return st;
    if (GetParam() == Wait::kCloseUnconfirmed) {
      // One segment fits the window: the flush ends, the close waits.
      if (absl::Status st =
              t->Flush(WaitBound(absl::Now() + absl::Seconds(10)));
          !st.ok()) {
        return st;
      }
    }
    return GetParam() == Wait::kFlush ? t->Flush(bound) : t->Close(bound);
  }
  // The contract: once the wait returned, the transport reads no `data`.
  void FreeData() { data_.reset(); }

 private:
  std::unique_ptr<std::vector<float>> data_;
};

// SIGTERM's case: the deadline is a minute away, the flag turns true after
// 200 ms, and the wait ends CANCELLED promptly after it (kPromptly).
TEST_P(HungNeighbourTest, CancelEndsTheWaitPromptly) {
  HungLink link;
  absl::StatusOr<GrpcTransport*> t = link.Start();
  ASSERT_TRUE(t.ok()) << t.status();
  Canceller canceller(absl::Milliseconds(200));
  const absl::Status st = SendAndWait(
      *t, WaitBound(absl::Now() + absl::Seconds(60), canceller.predicate()));
  const absl::Time returned = absl::Now();
  FreeData();
  const absl::Time cancelled_at = canceller.Join();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "rank 0")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "cancelled while waiting for"))
      << st;
  EXPECT_GE(returned, cancelled_at) << "ended before the flag: " << st;
  EXPECT_LT(returned - cancelled_at, kPromptly) << st;
  // The link is cancelled: nothing more goes out.
  const std::vector<float> more(4, 1.0f);
  EXPECT_FALSE((*t)->Send(SegmentKey{1, pstrain::v1::REDUCE_SCATTER, 0, 0},
                          more, pstrain::v1::DTYPE_F32,
                          absl::Now() + absl::Seconds(1))
                   .ok());
  const absl::Time destroying = absl::Now();
  link.DestroyTransport();
  EXPECT_LT(absl::Now() - destroying, kPromptly);
  std::printf(
      "[%s] cancelled %.3fs after the flag: %s\n", WaitName(GetParam()).c_str(),
      absl::ToDoubleSeconds(returned - cancelled_at), st.ToString().c_str());
}

// Without a cancel the same wait ends DEADLINE_EXCEEDED at its deadline (so
// it really waits: the window is full, or the close unconfirmed).
TEST_P(HungNeighbourTest, DeadlineEndsTheWait) {
  HungLink link;
  absl::StatusOr<GrpcTransport*> t = link.Start();
  ASSERT_TRUE(t.ok()) << t.status();
  const absl::Time start = absl::Now();
  const absl::Status st =
      SendAndWait(*t, WaitBound(start + absl::Milliseconds(300)));
  const absl::Duration took = absl::Now() - start;
  FreeData();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_GE(took, absl::Milliseconds(300)) << st;
  EXPECT_LT(took, kPromptly) << st;  // ended at the deadline, did not hang
}

INSTANTIATE_TEST_SUITE_P(Waits, HungNeighbourTest,
                         ::testing::Values(Wait::kFlush, Wait::kCloseFull,
                                           Wait::kCloseUnconfirmed),
                         [](const ::testing::TestParamInfo<Wait>& info) {
                           return WaitName(info.param);
                         });

// The ring's final flush: rank 0 of 2 gets every segment it waits for (put
// into its inbox by hand, as from rank 1), so its rounds end and it waits in
// the flush of the 48 MiB it sent to the hung neighbour. RingOptions::
// cancelled, turned true once the rounds are over, ends it with CANCELLED
// promptly instead of at options.timeout.
TEST(RingFlushTest, CancelEndsTheFinalFlushPromptly) {
  HungLink link;
  absl::StatusOr<GrpcTransport*> t = link.Start();
  ASSERT_TRUE(t.ok()) << t.status();
  const size_t n = kFillElems;  // each chunk a full window and more
  // With 2 ranks rank 0 receives chunk 1's partial sums, then chunk 0's sum.
  Mailbox* inbox = link.inbox()->mailbox();
  for (auto [phase, chunk] : {std::pair{pstrain::v1::REDUCE_SCATTER, 1u},
                              std::pair{pstrain::v1::ALL_GATHER, 0u}}) {
    const ChunkRange range = RingChunk(n, 2, chunk);
    for (size_t off = 0; off < range.size; off += kSegmentElems) {
      const size_t len = std::min(kSegmentElems, range.size - off);
      ASSERT_TRUE(inbox
                      ->Put(SegmentKey{0, phase, chunk, range.begin + off}, 1,
                            kLeftSession,
                            std::string(len * sizeof(float), '\0'))
                      .ok());
    }
  }
  auto data = std::make_unique<std::vector<float>>(n, 2.0f);
  Canceller canceller(absl::Milliseconds(200),
                      [inbox] { return inbox->size() == 0; });
  RingOptions options;
  options.segment_elems = kSegmentElems;
  options.timeout = absl::Seconds(60);
  options.cancelled = canceller.predicate();
  const absl::Status st = RingAllReduce(*t, 0, absl::MakeSpan(*data), options);
  const absl::Time returned = absl::Now();
  data.reset();  // RingAllReduce's contract: `data` is the caller's again
  const absl::Time cancelled_at = canceller.Join();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "take the segments")) << st;
  EXPECT_GE(returned, cancelled_at) << st;
  EXPECT_LT(returned - cancelled_at, kPromptly) << st;
}

// RingAllReducer::Close (the trainer's last call) passes RingOptions::
// cancelled on to the transport's close.
TEST(RingFlushTest, CancelEndsTheReducersClosePromptly) {
  HungLink link;
  absl::StatusOr<GrpcTransport*> t = link.Start();
  ASSERT_TRUE(t.ok()) << t.status();
  auto data = std::make_unique<std::vector<float>>(kFillElems, 3.0f);
  ASSERT_TRUE(SendAll(*t, *data, kFillElems).ok());
  Canceller canceller(absl::Milliseconds(200));
  RingOptions options;
  options.timeout = absl::Seconds(60);
  options.cancelled = canceller.predicate();
  RingAllReducer reducer(*t, options);
  const absl::Status st = reducer.Close();
  const absl::Time returned = absl::Now();
  data.reset();
  const absl::Time cancelled_at = canceller.Join();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_GE(returned, cancelled_at) << st;
  EXPECT_LT(returned - cancelled_at, kPromptly) << st;
}

// N ranks' RingPeer services behind real servers on 127.0.0.1 (the ring's
// link settings, as shipped). Rank r's session id is kRingSession + r. A
// rank learns its left neighbour (Mailbox::ExpectSender) only when its
// transport is made (Connect), as a worker does after GetPeers; until then
// its inbox already serves, as a worker's does once its address is
// registered.
constexpr uint64_t kRingSession = 5000;
constexpr uint64_t kMadeUpSession = 0xbad5e55;
constexpr size_t kRingSegmentElems = 64;  // several segments a chunk

class ServedRing {
 public:
  explicit ServedRing(int n, absl::Duration first_segment_timeout =
                                 RingPeerService::kDefaultFirstSegmentTimeout)
      : transports_(n) {
    for (int r = 0; r < n; ++r) {
      services_.push_back(
          std::make_unique<RingPeerService>(first_segment_timeout));
      grpc::ServerBuilder builder;
      int port = 0;
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                               &port);
      for (const auto& [key, value] : RingLinkArgs()) {
        builder.AddChannelArgument(key, value);
      }
      builder.RegisterService(services_[r].get());
      servers_.push_back(builder.BuildAndStart());
      addresses_.push_back(servers_[r] == nullptr || port == 0
                               ? std::string()
                               : absl::StrCat("127.0.0.1:", port));
    }
  }
  ~ServedRing() {
    transports_.clear();  // cancels streams still open
    for (auto& s : servers_) {
      if (s != nullptr) {
        s->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
      }
    }
  }

  bool serving() const {
    for (const std::string& a : addresses_) {
      if (a.empty()) return false;
    }
    return true;
  }
  int size() const { return static_cast<int>(services_.size()); }
  const std::string& address(int r) const { return addresses_[r]; }
  RingPeerService* service(int r) { return services_[r].get(); }
  Transport* transport(int r) { return transports_[r].get(); }

  // Makes rank r's transport: from now on it knows its left neighbour.
  absl::Status Connect(int r) {
    const int n = size();
    absl::StatusOr<std::unique_ptr<GrpcTransport>> t = GrpcTransport::Create(
        r, n, MakeRingChannel(addresses_[(r + 1) % n]), services_[r].get(),
        kRingSession + r, kRingSession + (r + n - 1) % n);
    if (!t.ok()) return t.status();
    transports_[r] = *std::move(t);
    return absl::OkStatus();
  }
  absl::Status ConnectAll() {
    for (int r = 0; r < size(); ++r) {
      if (absl::Status st = Connect(r); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<RingPeerService>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<Transport>> transports_;
};

// Rank r's input for the ring tests, and the sum over n ranks.
float Input(int r, size_t i) { return static_cast<float>(r + 1 + i % 7); }
float Sum(int n, size_t i) {
  float sum = 0;
  for (int r = 0; r < n; ++r) sum += Input(r, i);
  return sum;
}

// Runs step `step`'s all-reduce of `elems` values on the ranks in `ranks`
// (one thread each; the others' all-reduces run elsewhere) into (*v)[r].
std::vector<std::thread> StartAllReduce(ServedRing* ring,
                                        const std::vector<int>& ranks,
                                        uint64_t step,
                                        std::vector<std::vector<float>>* v,
                                        std::vector<absl::Status>* st) {
  RingOptions options;
  options.segment_elems = kRingSegmentElems;
  options.timeout = absl::Seconds(20);
  std::vector<std::thread> threads;
  for (int r : ranks) {
    threads.emplace_back([ring, r, step, v, st, options] {
      (*st)[r] = RingAllReduce(ring->transport(r), step,
                               absl::MakeSpan((*v)[r]), options);
    });
  }
  return threads;
}

// Every rank's all-reduce of step `step` is OK and holds the exact sums.
void ExpectRingSums(ServedRing* ring, uint64_t step, size_t elems) {
  const int n = ring->size();
  std::vector<std::vector<float>> v(n, std::vector<float>(elems));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < elems; ++i) v[r][i] = Input(r, i);
  }
  std::vector<absl::Status> st(n);
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  std::vector<std::thread> threads = StartAllReduce(ring, all, step, &v, &st);
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    for (size_t i = 0; i < elems; ++i) {
      ASSERT_EQ(v[r][i], Sum(n, i)) << "rank " << r << " element " << i;
    }
  }
}

// A SendSegments stream of raw messages to `address` (the stranger's own
// client; a deadline of 30 s, never reached by these tests).
class RawStream {
 public:
  explicit RawStream(const std::string& address)
      : stub_(MakeRingChannel(address)) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    call_ =
        std::make_unique<SyncGenericCall<grpc::ByteBuffer, grpc::ByteBuffer>>(
            &stub_, &context_, "/pstrain.v1.RingPeer/SendSegments",
            SyncGenericCall<grpc::ByteBuffer, grpc::ByteBuffer>::Open::kNow);
  }

  bool Write(const grpc::ByteBuffer& message) { return call_->Write(message); }
  bool WritesDone() { return call_->WritesDone(); }
  void Cancel() { context_.TryCancel(); }
  grpc::Status Finish() { return call_->FinishWithResponse(&response_); }

 private:
  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::ByteBuffer response_;
  std::unique_ptr<SyncGenericCall<grpc::ByteBuffer, grpc::ByteBuffer>> call_;
};

// Bytes no RingSegment parses from (field 1 with wire type 7).
grpc::ByteBuffer Garbage() {
  grpc::Slice slice(std::string("\x0f\x01\x02"));
  return grpc::ByteBuffer(&slice, 1);
}

// Polls `done` until it holds or 10 s pass (then false).
bool Eventually(const std::function<bool()>& done) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() >= until) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

constexpr int kRanks = 3;
constexpr size_t kElems = 1000;  // chunks of 334, 333 and 333 elements

// A stranger's segment: `key` claiming to come from rank 2, rank 0's left
// neighbour, with a made-up session id.
grpc::ByteBuffer StrangersSegment(const SegmentKey& key) {
  const std::vector<float> junk(kRingSegmentElems, 1e30f);
  return EncodeSegment(key, /*from_rank=*/2, kMadeUpSession, junk);
}

// The key of the first segment rank 0 receives in step `step` from its left
// neighbour, rank 2 (the start of that rank's own chunk).
SegmentKey FirstKeyAtRank0(uint64_t step) {
  return SegmentKey{step, pstrain::v1::REDUCE_SCATTER, 2,
                    RingChunk(kElems, kRanks, 2).begin};
}

// Rank 0 does not take a stranger's broken stream for its neighbour's: with
// nothing from rank 2 yet, a Recv waits for its deadline instead of failing
// at once with DATA_LOSS "the stream from rank 2 broke".
void ExpectRank0Waits(ServedRing* ring) {
  std::vector<float> out(kRingSegmentElems);
  const absl::Status recv = ring->transport(0)->Recv(
      FirstKeyAtRank0(0), Combine::kCopy, absl::MakeSpan(out),
      absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(recv.code(), absl::StatusCode::kDeadlineExceeded) << recv;
}

// How the stranger's stream ends after its first segment.
enum class Ending { kGarbage, kCancel };

class StrangerBeforePeersKnownTest : public ::testing::TestWithParam<Ending> {};

// While rank 0 waits for its peers (its inbox serves, it does not know its
// left neighbour's id yet), a stranger's stream claims rank 2 with a
// made-up id, sends a segment (held: nobody can check it yet), then
// garbage or a cancel. Once rank 0 knows its neighbour, the stranger's
// segment is gone, its break fails nothing, and the ring's all-reduces
// complete with the right sums.
TEST_P(StrangerBeforePeersKnownTest, BrokenStreamFailsNothing) {
  ServedRing ring(kRanks);
  ASSERT_TRUE(ring.serving());
  RingPeerService* inbox = ring.service(0);
  {
    RawStream stranger(ring.address(0));
    ASSERT_TRUE(stranger.Write(StrangersSegment(FirstKeyAtRank0(0))));
    ASSERT_TRUE(Eventually([&] { return inbox->segments_received() == 1; }));
    grpc::Status st;
    if (GetParam() == Ending::kGarbage) {
      EXPECT_TRUE(stranger.Write(Garbage()));
      st = stranger.Finish();
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << st.error_message();
    } else {
      stranger.Cancel();
      st = stranger.Finish();
      EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED)
          << st.error_message();
    }
  }
  // The server has seen the stream end (and told the mailbox).
  ASSERT_TRUE(Eventually([&] { return inbox->open_streams() == 0; }));
  ASSERT_TRUE(ring.ConnectAll().ok());
  EXPECT_EQ(inbox->mailbox()->size(), 0u);
  ExpectRank0Waits(&ring);
  ExpectRingSums(&ring, 0, kElems);
  ExpectRingSums(&ring, 1, kElems);
}

INSTANTIATE_TEST_SUITE_P(Endings, StrangerBeforePeersKnownTest,
                         ::testing::Values(Ending::kGarbage, Ending::kCancel),
                         [](const ::testing::TestParamInfo<Ending>& info) {
                           return info.param == Ending::kGarbage ? "Garbage"
                                                                 : "Cancel";
                         });

// Once rank 0 knows its neighbour, the stranger's stream is refused at its
// first segment (PERMISSION_DENIED), whatever it sends next, and fails
// nothing.
TEST(StrangerTest, RefusedAtItsFirstSegmentOncePeersKnown) {
  ServedRing ring(kRanks);
  ASSERT_TRUE(ring.serving());
  ASSERT_TRUE(ring.ConnectAll().ok());
  {
    RawStream stranger(ring.address(0));
    stranger.Write(StrangersSegment(FirstKeyAtRank0(0)));
    stranger.Write(Garbage());  // may fail: the stream may be over already
    const grpc::Status st = stranger.Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << st.error_message();
  }
  EXPECT_TRUE(Eventually([&] { return ring.service(0)->open_streams() == 0; }));
  EXPECT_EQ(ring.service(0)->mailbox()->size(), 0u);
  ExpectRank0Waits(&ring);
  ExpectRingSums(&ring, 0, kElems);
}

// The left neighbour starts first: its segments reach rank 0 before rank 0
// knows whom to expect, after a stranger's segments with the same key and
// with a step far ahead. The stranger's segments neither take the key nor
// move the step window (the neighbour's stream is not refused with
// ALREADY_EXISTS or FAILED_PRECONDITION); once rank 0 knows its neighbour,
// the neighbour's are taken and the all-reduce is right.
TEST(StrangerTest, SegmentsBeforePeersKnownTakeNoKeyAndMoveNoWindow) {
  ServedRing ring(kRanks);
  ASSERT_TRUE(ring.serving());
  RingPeerService* inbox = ring.service(0);
  for (const SegmentKey& key :
       {FirstKeyAtRank0(0),
        SegmentKey{1000, pstrain::v1::REDUCE_SCATTER, 2, 0}}) {
    RawStream stranger(ring.address(0));
    ASSERT_TRUE(stranger.Write(StrangersSegment(key)));
    stranger.WritesDone();
    const grpc::Status st = stranger.Finish();
    EXPECT_TRUE(st.ok()) << key.ToString() << ": " << st.error_message();
  }
  const uint64_t from_strangers = inbox->segments_received();
  // Ranks 1 and 2 start their all-reduce; rank 2 streams its first
  // segments to rank 0, which does not know its neighbour yet.
  ASSERT_TRUE(ring.Connect(1).ok());
  ASSERT_TRUE(ring.Connect(2).ok());
  std::vector<std::vector<float>> v(kRanks, std::vector<float>(kElems));
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < kElems; ++i) v[r][i] = Input(r, i);
  }
  std::vector<absl::Status> st(kRanks);
  std::vector<std::thread> threads = StartAllReduce(&ring, {1, 2}, 0, &v, &st);
  const bool neighbour_first =
      Eventually([&] { return inbox->segments_received() > from_strangers; });
  ASSERT_TRUE(ring.Connect(0).ok());
  std::vector<std::thread> rank0 = StartAllReduce(&ring, {0}, 0, &v, &st);
  rank0[0].join();
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(neighbour_first);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    for (size_t i = 0; i < kElems; ++i) {
      ASSERT_EQ(v[r][i], Sum(kRanks, i)) << "rank " << r << " element " << i;
    }
  }
}

// A stream that opens and sends nothing is ended DEADLINE_EXCEEDED by the
// server (not by the client's own deadline, 30 s away) and fails
// nothing; the ring then completes. (The ring's own streams send their
// first segment as they open; 2 s is far more than that takes.)
TEST(StrangerTest, SilentStreamIsEnded) {
  ServedRing ring(kRanks, /*first_segment_timeout=*/absl::Seconds(2));
  ASSERT_TRUE(ring.serving());
  ASSERT_TRUE(ring.ConnectAll().ok());
  {
    RawStream silent(ring.address(0));
    const grpc::Status st = silent.Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << st.error_message();
    EXPECT_TRUE(absl::StrContains(st.error_message(), "no segment within"))
        << st.error_message();
  }
  EXPECT_TRUE(Eventually([&] { return ring.service(0)->open_streams() == 0; }));
  ExpectRank0Waits(&ring);
  ExpectRingSums(&ring, 0, kElems);
}

}  // namespace
}  // namespace pstrain
