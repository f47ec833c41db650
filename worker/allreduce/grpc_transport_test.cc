// GrpcTransport's waits on a hung right neighbour: a RingPeer on 127.0.0.1
// that takes the stream and never reads it, so the sender's HTTP/2 window
// fills (as when the neighbour's process is stopped). Flush and Close end
// DEADLINE_EXCEEDED at their deadline, or CANCELLED within a second of
// WaitBound::cancelled turning true (SIGTERM in a worker), and the rank's
// buffer may be freed as soon as they return (run under ASan too: bazel test
// --config=asan). The ring's final flush and RingAllReducer::Close end the
// same way with RingOptions::cancelled.
#include "worker/allreduce/grpc_transport.h"

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
#include "gtest/gtest.h"
#include "worker/allreduce/mailbox.h"
#include "worker/allreduce/ring_allreduce.h"
#include "worker/allreduce/transport.h"

namespace pstrain {
namespace {

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
// 200 ms, and the wait ends CANCELLED within a second of it.
TEST_P(HungNeighbourTest, CancelEndsTheWaitWithinASecond) {
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
  EXPECT_LT(returned - cancelled_at, absl::Seconds(1)) << st;
  // The link is cancelled: nothing more goes out.
  const std::vector<float> more(4, 1.0f);
  EXPECT_FALSE((*t)->Send(SegmentKey{1, pstrain::v1::REDUCE_SCATTER, 0, 0},
                          more, pstrain::v1::DTYPE_F32,
                          absl::Now() + absl::Seconds(1))
                   .ok());
  const absl::Time destroying = absl::Now();
  link.DestroyTransport();
  EXPECT_LT(absl::Now() - destroying, absl::Seconds(1));
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
  EXPECT_LT(took, absl::Seconds(5)) << st;  // generous: a loaded machine
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
// within a second instead of at options.timeout.
TEST(RingFlushTest, CancelEndsTheFinalFlushWithinASecond) {
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
  EXPECT_LT(returned - cancelled_at, absl::Seconds(1)) << st;
}

// RingAllReducer::Close (the trainer's last call) passes RingOptions::
// cancelled on to the transport's close.
TEST(RingFlushTest, CancelEndsTheReducersCloseWithinASecond) {
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
  EXPECT_LT(returned - cancelled_at, absl::Seconds(1)) << st;
}

}  // namespace
}  // namespace pstrain
