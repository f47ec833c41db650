// The ring all-reduce over both transports, ranks as threads: exact sums for
// N = 1..5 and sizes not divisible by N, segments smaller than a chunk (so
// rounds pipeline), many all-reduces over one stream, bit-identical results
// on every rank, a missing rank ending in DEADLINE_EXCEEDED rather than a
// hang, and NCCL's FAILED_PRECONDITION without a GPU.
#include "worker/allreduce/ring_allreduce.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/low_precision.h"
#include "gtest/gtest.h"
#include "tests/harness/sanitizer.h"
#include "worker/allreduce/grpc_transport.h"
#include "worker/allreduce/in_memory_transport.h"
#include "worker/allreduce/nccl_allreducer.h"
#include "worker/allreduce/ring_allgather.h"
#include "worker/compute/compute_backend.h"

namespace pstrain {
namespace {

enum class Kind { kInMemory, kGrpc };

// N transports of one ring; with gRPC, the RingPeer services behind real
// servers on loopback ephemeral ports. `missing` >= 0 leaves that rank out:
// no transport, and its address (gRPC) is a port nobody listens on.
class Ring {
 public:
  static absl::StatusOr<std::unique_ptr<Ring>> Start(Kind kind, int n,
                                                     int missing = -1) {
    std::unique_ptr<Ring> ring(new Ring);
    if (kind == Kind::kInMemory) {
      absl::StatusOr<std::vector<std::unique_ptr<Transport>>> t =
          CreateInMemoryRing(n);
      if (!t.ok()) return t.status();
      ring->transports_ = std::move(*t);
      if (missing >= 0) ring->transports_[missing].reset();
      return ring;
    }
    std::vector<std::string> addresses(n);
    for (int r = 0; r < n; ++r) {
      ring->services_.push_back(std::make_unique<RingPeerService>());
      grpc::ServerBuilder builder;
      int port = 0;
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                               &port);
      builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
      for (const auto& [key, value] : RingLinkArgs()) {  // as shipped
        builder.AddChannelArgument(key, value);
      }
      builder.RegisterService(ring->services_[r].get());
      ring->servers_.push_back(builder.BuildAndStart());
      if (ring->servers_[r] == nullptr || port == 0) {
        return absl::UnavailableError("cannot listen on 127.0.0.1");
      }
      addresses[r] = absl::StrCat("127.0.0.1:", port);
    }
    if (missing >= 0) {  // stop it: its port is then closed
      ring->servers_[missing]->Shutdown();
    }
    for (int r = 0; r < n; ++r) {
      if (r == missing) {
        ring->transports_.emplace_back();
        continue;
      }
      // Rank r's session id is 1000 + r here.
      absl::StatusOr<std::unique_ptr<GrpcTransport>> t = GrpcTransport::Create(
          r, n, MakeRingChannel(addresses[(r + 1) % n]),
          ring->services_[r].get(), 1000 + r, 1000 + (r + n - 1) % n);
      if (!t.ok()) return t.status();
      ring->transports_.push_back(std::move(*t));
    }
    return ring;
  }

  ~Ring() {
    transports_.clear();  // cancels streams still open
    for (auto& s : servers_) {
      s->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    }
  }

  int size() const { return static_cast<int>(transports_.size()); }
  Transport* transport(int r) { return transports_[r].get(); }

 private:
  Ring() = default;
  std::vector<std::unique_ptr<RingPeerService>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<std::unique_ptr<Transport>> transports_;
};

// Runs RingAllReduce on every present rank at once (one thread each) on
// inputs[r]; returns each rank's status.
std::vector<absl::Status> AllReduceOnThreads(Ring* ring, uint64_t step,
                                             std::vector<std::vector<float>>* v,
                                             const RingOptions& options) {
  const int n = ring->size();
  std::vector<absl::Status> st(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    if (ring->transport(r) == nullptr) continue;
    threads.emplace_back([&, r] {
      st[r] = RingAllReduce(ring->transport(r), step, absl::MakeSpan((*v)[r]),
                            options);
    });
  }
  for (auto& t : threads) t.join();
  return st;
}

std::string KindName(Kind k) { return k == Kind::kGrpc ? "grpc" : "memory"; }

class RingAllReduceTest
    : public ::testing::TestWithParam<std::tuple<Kind, int>> {};

// Integer-valued inputs, so every float sum is exact whatever the order.
TEST_P(RingAllReduceTest, SumsExactlyForAwkwardSizesAndSegments) {
  const auto [kind, n] = GetParam();
  absl::StatusOr<std::unique_ptr<Ring>> ring = Ring::Start(kind, n);
  ASSERT_TRUE(ring.ok()) << ring.status();
  uint64_t step = 0;
  // Sizes below N (empty chunks), not divisible by N, and larger; segments
  // from one float (every chunk pipelined in many pieces) to whole chunks.
  for (size_t size : {size_t{1}, size_t(n + 1), size_t{13}, size_t{1031}}) {
    for (size_t seg : {size_t{1}, size_t{4}, size_t{256}}) {
      SCOPED_TRACE(absl::StrCat(KindName(kind), " N=", n, " size=", size,
                                " segment=", seg));
      std::vector<std::vector<float>> v(n, std::vector<float>(size));
      std::vector<float> want(size, 0);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < size; ++i) {
          v[r][i] = static_cast<float>((r + 1) * 1000 + i % 97) - 500;
          want[i] += v[r][i];
        }
      }
      RingOptions options;
      options.segment_elems = seg;
      options.timeout = absl::Seconds(10);
      std::vector<absl::Status> st =
          AllReduceOnThreads(ring->get(), step++, &v, options);
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
        ASSERT_EQ(v[r], want) << "rank " << r;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE((*ring)
                    ->transport(r)
                    ->Close(WaitBound(absl::Now() + absl::Seconds(5)))
                    .ok());
  }
}

// Random floats: every rank ends bit-identical and close to the exact sum,
// and each rank moves about 2 (N - 1) / N of the vector each way.
TEST_P(RingAllReduceTest, RanksAgreeBitForBitOnRandomFloats) {
  const auto [kind, n] = GetParam();
  absl::StatusOr<std::unique_ptr<Ring>> ring = Ring::Start(kind, n);
  ASSERT_TRUE(ring.ok()) << ring.status();
  const size_t size = 10007;
  std::mt19937 rng(n);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> v(n, std::vector<float>(size));
  std::vector<double> exact(size, 0);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < size; ++i) {
      v[r][i] = normal(rng);
      exact[i] += v[r][i];
    }
  }
  RingOptions options;
  options.segment_elems = 300;  // about 10 segments per chunk at N = 3
  options.timeout = absl::Seconds(10);
  std::vector<absl::Status> st =
      AllReduceOnThreads(ring->get(), 0, &v, options);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    EXPECT_EQ(v[r], v[0]) << "rank " << r << " differs from rank 0";
  }
  for (size_t i = 0; i < size; ++i) {
    ASSERT_NEAR(v[0][i], exact[i], 1e-5 * n) << "element " << i;
  }
  // Reduce-scatter sends every chunk but r + 1 and receives every chunk but
  // r; all-gather sends every chunk but r + 2 and receives every one but
  // r + 1.
  auto chunk_bytes = [&](int c) {
    return RingChunk(size, n, c % n).size * sizeof(float);
  };
  for (int r = 0; r < n; ++r) {
    Transport* t = (*ring)->transport(r);
    const uint64_t twice = n > 1 ? 2 * size * sizeof(float) : 0;
    const uint64_t sent =
        n > 1 ? twice - chunk_bytes(r + 1) - chunk_bytes(r + 2) : 0;
    const uint64_t received =
        n > 1 ? twice - chunk_bytes(r) - chunk_bytes(r + 1) : 0;
    EXPECT_EQ(t->bytes_sent(), sent) << "rank " << r;
    EXPECT_EQ(t->bytes_received(), received) << "rank " << r;
  }
}

// network.wire_dtype: bf16: half the bytes of fp32 each way, every rank
// bit-identical, every value bf16-representable (the completed sums were
// rounded once more before the all-gather), and within the documented bound
// of the exact sum: N * 2^-7 * sum over ranks of |x_r| (twice the estimate
// in ring_allreduce.h).
TEST_P(RingAllReduceTest, Bf16WireHalvesTheBytesWithBoundedError) {
  const auto [kind, n] = GetParam();
  absl::StatusOr<std::unique_ptr<Ring>> ring = Ring::Start(kind, n);
  ASSERT_TRUE(ring.ok()) << ring.status();
  const size_t size = 5003;
  std::mt19937 rng(100 + n);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<float>> v(n, std::vector<float>(size));
  std::vector<double> exact(size, 0), magnitude(size, 0);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < size; ++i) {
      v[r][i] = normal(rng);
      exact[i] += v[r][i];
      magnitude[i] += std::fabs(v[r][i]);
    }
  }
  std::vector<std::vector<float>> fp32 = v;
  RingOptions options;
  options.segment_elems = 200;
  options.timeout = absl::Seconds(10);
  std::vector<uint64_t> sent_before(n), received_before(n);
  for (int r = 0; r < n; ++r) {
    sent_before[r] = (*ring)->transport(r)->bytes_sent();
    received_before[r] = (*ring)->transport(r)->bytes_received();
  }
  std::vector<absl::Status> st =
      AllReduceOnThreads(ring->get(), 0, &fp32, options);
  std::vector<uint64_t> sent32(n), received32(n);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << "fp32, rank " << r << ": " << st[r];
    sent32[r] = (*ring)->transport(r)->bytes_sent() - sent_before[r];
    received32[r] =
        (*ring)->transport(r)->bytes_received() - received_before[r];
    sent_before[r] = (*ring)->transport(r)->bytes_sent();
    received_before[r] = (*ring)->transport(r)->bytes_received();
  }
  options.wire_dtype = pstrain::v1::DTYPE_BF16;
  st = AllReduceOnThreads(ring->get(), 1, &v, options);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << "bf16, rank " << r << ": " << st[r];
    EXPECT_EQ(v[r], v[0]) << "rank " << r << " differs from rank 0";
    Transport* t = (*ring)->transport(r);
    EXPECT_EQ(2 * (t->bytes_sent() - sent_before[r]), sent32[r]);
    EXPECT_EQ(2 * (t->bytes_received() - received_before[r]), received32[r]);
  }
  if (n == 1) {
    EXPECT_EQ(v[0], fp32[0]);  // nothing travels: nothing is rounded
    return;
  }
  const double bound_factor = n * std::ldexp(1.0, -7);
  size_t differ = 0;
  for (size_t i = 0; i < size; ++i) {
    const float x = v[0][i];
    ASSERT_EQ(Bf16ToFloat(FloatToBf16(x)), x) << "element " << i;
    ASSERT_LE(std::fabs(x - exact[i]), bound_factor * magnitude[i])
        << "element " << i << ": " << x << " vs " << exact[i];
    if (x != fp32[0][i]) ++differ;
  }
  EXPECT_GT(differ, size / 2);  // the wire really was bf16
}

// The all-gather of the all-reduce trainer's rows (ring_allgather.h): blocks
// of different sizes (some empty) reach every rank bit for bit, after a sum
// of the same step (they share the step tag), and each rank sends every
// block but its right neighbour's.
TEST_P(RingAllReduceTest, AllGatherCopiesEveryBlockAfterASumOfTheSameStep) {
  const auto [kind, n] = GetParam();
  absl::StatusOr<std::unique_ptr<Ring>> ring = Ring::Start(kind, n);
  ASSERT_TRUE(ring.ok()) << ring.status();
  uint64_t step = 0;
  for (size_t seg : {size_t{1}, size_t{3}, size_t{256}}) {
    SCOPED_TRACE(absl::StrCat(KindName(kind), " N=", n, " segment=", seg));
    RingOptions options;
    options.segment_elems = seg;
    options.timeout = absl::Seconds(10);
    std::vector<std::vector<float>> sums(n, std::vector<float>(7, 1.0f));
    std::vector<absl::Status> st =
        AllReduceOnThreads(ring->get(), step, &sums, options);
    for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << st[r];
    std::vector<uint64_t> sizes(n);
    uint64_t total = 0;
    for (int r = 0; r < n; ++r) {
      sizes[r] = (r * 7 + seg) % 5 == 0 ? 0 : r * 11 + seg;  // some empty
      total += sizes[r];
    }
    std::vector<float> want(total);
    for (size_t i = 0; i < total; ++i) want[i] = std::sin(0.37f * i + seg);
    std::vector<std::vector<float>> v(n, std::vector<float>(total, 0.0f));
    uint64_t at = 0;
    for (int r = 0; r < n; ++r) {
      std::copy(want.begin() + at, want.begin() + at + sizes[r],
                v[r].begin() + at);
      at += sizes[r];
    }
    std::vector<uint64_t> before(n);
    for (int r = 0; r < n; ++r) before[r] = (*ring)->transport(r)->bytes_sent();
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        st[r] = RingAllGather((*ring)->transport(r), step, sizes,
                              absl::MakeSpan(v[r]), options);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
      EXPECT_EQ(v[r], want) << "rank " << r;
      const uint64_t sent = (*ring)->transport(r)->bytes_sent() - before[r];
      EXPECT_EQ(sent, n == 1 ? 0 : 4 * (total - sizes[(r + 1) % n]))
          << "rank " << r;
    }
    ++step;
  }
  std::vector<uint64_t> wrong(n + 1, 0);
  EXPECT_EQ(RingAllGather((*ring)->transport(0), step, wrong, {}, {}).code(),
            absl::StatusCode::kInvalidArgument);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE((*ring)
                    ->transport(r)
                    ->Close(WaitBound(absl::Now() + absl::Seconds(5)))
                    .ok());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, RingAllReduceTest,
    ::testing::Combine(::testing::Values(Kind::kInMemory, Kind::kGrpc),
                       ::testing::Values(1, 2, 3, 4, 5)),
    [](const ::testing::TestParamInfo<std::tuple<Kind, int>>& info) {
      return absl::StrCat(KindName(std::get<0>(info.param)), "_N",
                          std::get<1>(info.param));
    });

TEST(RingChunkTest, CoversTheVectorWithSizesDifferingByAtMostOne) {
  for (size_t n : {0, 1, 4, 7, 1000}) {
    for (int parts : {1, 2, 3, 5}) {
      size_t next = 0;
      for (int c = 0; c < parts; ++c) {
        ChunkRange r = RingChunk(n, parts, c);
        EXPECT_EQ(r.begin, next);
        EXPECT_LE(r.size, n / parts + 1);
        EXPECT_GE(r.size, n / parts);
        next = r.begin + r.size;
      }
      EXPECT_EQ(next, n);
    }
  }
}

// Megabyte segments of a 12 MB vector: no message is larger than a segment.
TEST(RingAllReduceGrpcTest, LargeVectorInMegabyteSegments) {
  absl::StatusOr<std::unique_ptr<Ring>> ring = Ring::Start(Kind::kGrpc, 3);
  ASSERT_TRUE(ring.ok()) << ring.status();
  const size_t size = 3'000'001;
  std::vector<std::vector<float>> v(3, std::vector<float>(size));
  for (int r = 0; r < 3; ++r) {
    for (size_t i = 0; i < size; ++i) v[r][i] = static_cast<float>(r + i % 5);
  }
  RingOptions options;
  options.segment_elems = (1 << 20) / sizeof(float);
  options.timeout = absl::Seconds(10);
  std::vector<absl::Status> st =
      AllReduceOnThreads(ring->get(), 0, &v, options);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    for (size_t i = 0; i < size; i += 9973) {
      ASSERT_EQ(v[r][i], static_cast<float>(3 + 3 * (i % 5)));
    }
  }
}

// The session id the mailbox tests' senders carry.
constexpr uint64_t kSession = 0x5e55;

// The mailbox refuses a segment that would take it over its byte bound, and
// frees the bound as segments are taken.
TEST(MailboxTest, BoundsTheBytesWaiting) {
  Mailbox mailbox(/*max_bytes=*/16);
  mailbox.ExpectSender(0, kSession);
  SegmentKey a{1, pstrain::v1::REDUCE_SCATTER, 0, 0};
  SegmentKey b{1, pstrain::v1::REDUCE_SCATTER, 0, 4};
  ASSERT_TRUE(mailbox.Put(a, 0, kSession, std::string(12, '\0')).ok());
  absl::Status st = mailbox.Put(b, 0, kSession, std::string(8, '\0'));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(mailbox.size(), 1u);
  EXPECT_EQ(mailbox.bytes(), 12u);
  std::vector<float> out(3);
  ASSERT_TRUE(
      mailbox.Take(a, 0, absl::MakeSpan(out), absl::Now() + absl::Seconds(1))
          .ok());
  EXPECT_EQ(mailbox.bytes(), 0u);
  EXPECT_TRUE(mailbox.Put(b, 0, kSession, std::string(16, '\0')).ok());
}

// Only the left neighbour may send, and only for the step being taken or
// the next; a Take moves the window and drops segments left behind.
TEST(MailboxTest, BoundsStepsAndSenders) {
  Mailbox mailbox;
  mailbox.ExpectSender(2, kSession);
  const auto key = [](uint64_t step, uint64_t offset) {
    return SegmentKey{step, pstrain::v1::REDUCE_SCATTER, 0, offset};
  };
  absl::Status st = mailbox.Put(key(5, 0), 1, kSession, std::string(4, '\0'));
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  ASSERT_TRUE(mailbox.Put(key(5, 0), 2, kSession, std::string(4, '\0')).ok());
  ASSERT_TRUE(mailbox.Put(key(5, 1), 2, kSession, std::string(4, '\0')).ok());
  ASSERT_TRUE(mailbox.Put(key(6, 0), 2, kSession, std::string(4, '\0')).ok());
  st = mailbox.Put(key(7, 0), 2, kSession, std::string(4, '\0'));
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  st = mailbox.Put(key(4, 0), 2, kSession, std::string(4, '\0'));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  std::vector<float> out(1);
  ASSERT_TRUE(mailbox
                  .Take(key(6, 0), 2, absl::MakeSpan(out),
                        absl::Now() + absl::Seconds(1))
                  .ok());
  EXPECT_EQ(mailbox.size(), 0u);  // step 5's leftover was dropped
  EXPECT_EQ(mailbox.bytes(), 0u);
  EXPECT_TRUE(mailbox.Put(key(7, 0), 2, kSession, std::string(4, '\0')).ok());
  st = mailbox.Put(key(5, 2), 2, kSession, std::string(4, '\0'));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
}

// A ring peer service of its own, served on 127.0.0.1 port 0 (stopped with
// a 1 s grace at the end of the test).
struct ServedPeer {
  ServedPeer() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    if (server != nullptr && port != 0) {
      address = absl::StrCat("127.0.0.1:", port);
    }
  }
  ~ServedPeer() {
    if (server != nullptr) {
      server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    }
  }
  RingPeerService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;  // empty when the server did not start
};

// A reduce-scatter segment of `step` from rank 0 with 8 zero bytes.
pstrain::v1::RingSegment Segment(uint64_t step, uint64_t session_id,
                                 uint64_t generation = 0) {
  pstrain::v1::RingSegment segment;
  segment.set_step(step);
  segment.set_phase(pstrain::v1::REDUCE_SCATTER);
  segment.set_from_rank(0);
  segment.set_session_id(session_id);
  segment.set_generation(generation);
  segment.set_data(std::string(8, '\0'));
  return segment;
}

// `segment` alone on one stream to `address`, half-closed: its status.
grpc::Status SendOne(const std::string& address,
                     const pstrain::v1::RingSegment& segment) {
  auto stub = pstrain::v1::RingPeer::NewStub(MakeChannel(address));
  grpc::ClientContext context;
  SetTimeout(&context, absl::Seconds(10));
  pstrain::v1::SendSegmentsResponse response;
  auto writer = stub->SendSegments(&context, &response);
  writer->Write(segment);
  writer->WritesDone();
  return writer->Finish();
}

// A left neighbour's stream that is cancelled rather than closed: the rank
// waiting for its next segment gets DATA_LOSS at once, not a deadline, and
// the segment that did arrive is still taken.
TEST(RingAllReduceGrpcTest, CancelledStreamIsAnErrorNotAnEnd) {
  ServedPeer peer;
  ASSERT_FALSE(peer.address.empty());
  RingPeerService& service = peer.service;
  service.mailbox()->ExpectSender(0, kSession);
  auto stub = pstrain::v1::RingPeer::NewStub(MakeChannel(peer.address));
  {
    grpc::ClientContext context;
    pstrain::v1::SendSegmentsResponse response;
    auto writer = stub->SendSegments(&context, &response);
    ASSERT_TRUE(writer->Write(Segment(1, kSession)));
    const absl::Time until = absl::Now() + absl::Seconds(5);
    while (service.segments_received() < 1 && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_EQ(service.segments_received(), 1u);
    context.TryCancel();
    EXPECT_FALSE(writer->Finish().ok());
  }
  std::vector<float> out(2);
  const absl::Time start = absl::Now();
  EXPECT_TRUE(service.mailbox()
                  ->Take(SegmentKey{1, pstrain::v1::REDUCE_SCATTER, 0, 0}, 0,
                         absl::MakeSpan(out), start + absl::Seconds(10))
                  .ok());
  absl::Status st = service.mailbox()->Take(
      SegmentKey{1, pstrain::v1::REDUCE_SCATTER, 0, 2}, 0, absl::MakeSpan(out),
      start + absl::Seconds(10));
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Issue 11, strangers: a segment must carry its sender's session id; once
// the left neighbour and its id are known, anything else is refused and
// stored nothing.
TEST(MailboxTest, SegmentsWithoutTheSendersSessionIdAreRefused) {
  Mailbox mailbox;
  mailbox.ExpectSender(2, kSession);
  const SegmentKey key{5, pstrain::v1::REDUCE_SCATTER, 0, 0};
  for (uint64_t wrong : {uint64_t{0}, kSession + 1}) {
    absl::Status st = mailbox.Put(key, 2, wrong, std::string(4, '\0'));
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), "from rank 2")) << st;
    EXPECT_FALSE(absl::StrContains(st.message(), absl::StrCat(kSession))) << st;
  }
  EXPECT_EQ(mailbox.size(), 0u);
  EXPECT_EQ(mailbox.bytes(), 0u);
  EXPECT_TRUE(mailbox.Put(key, 2, kSession, std::string(4, '\0')).ok());
}

// Segments may come before the rank knows its neighbour; those with the
// wrong sender or id are dropped then, and cannot move the step window.
TEST(MailboxTest, EarlySegmentsWithTheWrongIdAreDroppedWhenTheSenderIsKnown) {
  Mailbox mailbox;
  const auto key = [](uint64_t step, uint64_t offset) {
    return SegmentKey{step, pstrain::v1::REDUCE_SCATTER, 0, offset};
  };
  ASSERT_TRUE(mailbox.Put(key(1000, 0), 2, 99, std::string(4, '\0')).ok());
  ASSERT_TRUE(
      mailbox.Put(key(1000, 1), 1, kSession, std::string(4, '\0')).ok());
  ASSERT_EQ(mailbox.size(), 2u);
  mailbox.ExpectSender(2, kSession);
  EXPECT_EQ(mailbox.size(), 0u);
  EXPECT_EQ(mailbox.bytes(), 0u);
  // The stranger's step 1000 did not stick: the neighbour's step 0 is taken.
  ASSERT_TRUE(mailbox.Put(key(0, 0), 2, kSession, std::string(4, '\0')).ok());
  std::vector<float> out(1);
  EXPECT_TRUE(mailbox
                  .Take(key(0, 0), 2, absl::MakeSpan(out),
                        absl::Now() + absl::Seconds(1))
                  .ok());
}

// Before the rank knows its neighbour, a stranger's segments (a made-up id)
// are held by key and id: the neighbour's segment with the same key is not
// ALREADY_EXISTS, and the stranger's step far ahead does not push the
// neighbour's step out of the window. Once the neighbour is known, only its
// own are taken. Segments without an id are refused at once.
TEST(MailboxTest, StrangersEarlySegmentsTakeNoKeyAndMoveNoWindow) {
  Mailbox mailbox;
  const auto key = [](uint64_t step) {
    return SegmentKey{step, pstrain::v1::REDUCE_SCATTER, 0, 0};
  };
  const auto bytes = [](float v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  ASSERT_TRUE(mailbox.Put(key(1000), 2, 99, bytes(2)).ok());
  ASSERT_TRUE(mailbox.Put(key(0), 2, 99, bytes(2)).ok());
  EXPECT_TRUE(mailbox.Put(key(0), 2, kSession, bytes(1)).ok());
  EXPECT_TRUE(mailbox.Put(key(1), 2, kSession, bytes(3)).ok());
  absl::Status st = mailbox.Put(key(0), 2, 0, bytes(4));
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  mailbox.ExpectSender(2, kSession);
  EXPECT_EQ(mailbox.size(), 2u);
  std::vector<float> out(1);
  ASSERT_TRUE(
      mailbox
          .Take(key(0), 2, absl::MakeSpan(out), absl::Now() + absl::Seconds(1))
          .ok());
  EXPECT_EQ(out[0], 1.0f);
  ASSERT_TRUE(
      mailbox
          .Take(key(1), 2, absl::MakeSpan(out), absl::Now() + absl::Seconds(1))
          .ok());
  EXPECT_EQ(out[0], 3.0f);
}

// A broken stream (Fail) fails the rank's Takes at once only if its first
// segment carried the id and generation the rank expects from that rank:
// not a stranger's (made-up id, no id, another rank), before or after the
// rank knows its neighbour; the neighbour's own, even from before the rank
// knew it, does. At most kMaxHeldFailures are held before they can be
// checked: strangers can crowd out the neighbour's early break, which then
// costs only the fast path (Takes wait for their deadline).
TEST(MailboxTest, OnlyTheExpectedSendersBrokenStreamFailsTakes) {
  const SegmentKey key{0, pstrain::v1::REDUCE_SCATTER, 0, 0};
  std::vector<float> out(1);
  const auto take = [&](Mailbox& mailbox, absl::Duration wait) {
    return mailbox.Take(key, 2, absl::MakeSpan(out), absl::Now() + wait);
  };
  const auto broke = [](const char* whose) {
    return absl::DataLossError(absl::StrCat(whose, "'s stream broke"));
  };
  {
    Mailbox mailbox;
    mailbox.Fail(2, 99, broke("a stranger"));
    mailbox.Fail(2, 0, broke("an anonymous stranger"));
    mailbox.Fail(2, 99, broke("a stranger of the next generation"), 1);
    mailbox.ExpectSender(2, kSession);
    EXPECT_EQ(take(mailbox, absl::Milliseconds(50)).code(),
              absl::StatusCode::kDeadlineExceeded);
    mailbox.Fail(2, 99, broke("a stranger"));
    mailbox.Fail(1, kSession, broke("another rank"));
    mailbox.ExpectSender(2, kSession, 1);  // the next generation
    EXPECT_EQ(take(mailbox, absl::Milliseconds(50)).code(),
              absl::StatusCode::kDeadlineExceeded);
    mailbox.Fail(2, kSession, broke("the neighbour"), 1);
    const absl::Status st = take(mailbox, absl::Seconds(60));
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), "the neighbour's stream"))
        << st;
  }
  {
    Mailbox mailbox;
    mailbox.Fail(2, kSession, broke("the neighbour"));
    mailbox.ExpectSender(2, kSession);
    EXPECT_EQ(take(mailbox, absl::Seconds(60)).code(),
              absl::StatusCode::kDataLoss);
  }
  {
    Mailbox mailbox;
    for (uint64_t id = 1; id <= Mailbox::kMaxHeldFailures; ++id) {
      mailbox.Fail(2, 100 + id, broke("a stranger"));
    }
    mailbox.Fail(2, kSession, broke("the neighbour"));
    mailbox.ExpectSender(2, kSession);
    EXPECT_EQ(take(mailbox, absl::Milliseconds(50)).code(),
              absl::StatusCode::kDeadlineExceeded);
  }
}

// Over gRPC: a stream whose segments carry a wrong id ends PERMISSION_DENIED
// and the rank's all-reduce never sees them.
TEST(RingAllReduceGrpcTest, StrangersSegmentsAreRefused) {
  ServedPeer peer;
  ASSERT_FALSE(peer.address.empty());
  // Rank 1 of 2: its left neighbour is rank 0 with id 1000.
  absl::StatusOr<std::unique_ptr<GrpcTransport>> t = GrpcTransport::Create(
      1, 2, MakeChannel(peer.address), &peer.service, 1001, 1000);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(GrpcTransport::Create(1, 2, MakeChannel(peer.address),
                                  &peer.service, 0, 1000)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  for (uint64_t wrong : {uint64_t{0}, uint64_t{1001}}) {
    const grpc::Status st = SendOne(peer.address, Segment(0, wrong));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << st.error_message();
  }
  EXPECT_EQ(peer.service.mailbox()->size(), 0u);
}

// Over gRPC, after a rollback (the transport of generation 2): a live left
// neighbour's late segment of generation 1, with its right session id, ends
// its stream ABORTED and stores nothing; the same segment of generation 2
// is kept.
TEST(RingAllReduceGrpcTest, OlderGenerationsSegmentsAreAborted) {
  ServedPeer peer;
  ASSERT_FALSE(peer.address.empty());
  absl::StatusOr<std::unique_ptr<GrpcTransport>> t =
      GrpcTransport::Create(1, 2, MakeChannel(peer.address), &peer.service,
                            1001, 1000, /*generation=*/2);
  ASSERT_TRUE(t.ok()) << t.status();
  for (uint64_t generation : {uint64_t{1}, uint64_t{2}}) {
    const grpc::Status st = SendOne(peer.address, Segment(4, 1000, generation));
    if (generation == 1) {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED)
          << st.error_message();
      EXPECT_EQ(peer.service.mailbox()->size(), 0u);
    } else {
      EXPECT_TRUE(st.ok()) << st.error_message();
      EXPECT_EQ(peer.service.mailbox()->size(), 1u);
    }
  }
}

// The in-memory transport never waits (a send lands in the neighbour's
// mailbox), so its flush and close are OK even with the cancel flag already
// up: there was nothing left to wait for (Transport::Flush). The close
// still ends the link.
TEST(InMemoryTransportTest, FlushAndCloseHaveNothingToCancel) {
  absl::StatusOr<std::vector<std::unique_ptr<Transport>>> ring =
      CreateInMemoryRing(2);
  ASSERT_TRUE(ring.ok()) << ring.status();
  Transport* t = (*ring)[0].get();
  const SegmentKey key{0, pstrain::v1::REDUCE_SCATTER, 0, 0};
  const std::vector<float> sent = {1, 2, 3};
  ASSERT_TRUE(
      t->Send(key, sent, pstrain::v1::DTYPE_F32, absl::Now() + absl::Seconds(1))
          .ok());
  const WaitBound cancelled(absl::Now() + absl::Seconds(60),
                            [] { return true; });
  EXPECT_TRUE(t->Flush(cancelled).ok());
  EXPECT_TRUE(t->Close(cancelled).ok());
  std::vector<float> got(3);
  ASSERT_TRUE((*ring)[1]
                  ->Recv(key, Combine::kCopy, absl::MakeSpan(got),
                         absl::Now() + absl::Seconds(1))
                  .ok());
  EXPECT_EQ(got, sent);
  EXPECT_EQ(
      t->Send(key, sent, pstrain::v1::DTYPE_F32, absl::Now() + absl::Seconds(1))
          .code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST(RingAllReduceOptionsTest, Fp16WireIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<Ring>> ring = Ring::Start(Kind::kInMemory, 2);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::vector<float> v(10, 1.0f);
  RingOptions options;
  options.wire_dtype = pstrain::v1::DTYPE_F16;
  absl::Status st =
      RingAllReduce((*ring)->transport(0), 0, absl::MakeSpan(v), options);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "DTYPE_F16")) << st;
  EXPECT_EQ(v, std::vector<float>(10, 1.0f));
}

class MissingRankTest : public ::testing::TestWithParam<Kind> {};

// Rank 2 of 3 never shows up: the others fail with DEADLINE_EXCEEDED within
// a few timeouts instead of hanging.
TEST_P(MissingRankTest, OthersTimeOut) {
  absl::StatusOr<std::unique_ptr<Ring>> ring =
      Ring::Start(GetParam(), 3, /*missing=*/2);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::vector<std::vector<float>> v(3, std::vector<float>(100, 1.0f));
  RingOptions options;
  options.segment_elems = 16;
  options.timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  std::vector<absl::Status> st =
      AllReduceOnThreads(ring->get(), 0, &v, options);
  const absl::Duration took = absl::Now() - start;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << r << ": " << st[r];
    EXPECT_TRUE(absl::StrContains(st[r].message(), "rank")) << st[r];
  }
  // The 300 ms time-out ends the wait, not 5 s (5 s x the slowdown under a
  // sanitizer, which a loaded CI machine can need).
  EXPECT_LT(took, absl::Seconds(5) * kSanitizerSlowdown);
  std::printf("[%s] missing rank: %s | %s (%.2fs)\n",
              KindName(GetParam()).c_str(), st[0].ToString().c_str(),
              st[1].ToString().c_str(), absl::ToDoubleSeconds(took));
}

INSTANTIATE_TEST_SUITE_P(Transports, MissingRankTest,
                         ::testing::Values(Kind::kInMemory, Kind::kGrpc),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return KindName(info.param);
                         });

// Rank 2 of 3 never shows up and the ring timeout is a minute: setting
// RingOptions::cancelled (SIGTERM, a rollback) ends the others' waits with
// CANCELLED within the poll interval, not the timeout.
TEST_P(MissingRankTest, CancelEndsTheWaitsWithinThePoll) {
  absl::StatusOr<std::unique_ptr<Ring>> ring =
      Ring::Start(GetParam(), 3, /*missing=*/2);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::vector<std::vector<float>> v(3, std::vector<float>(100, 1.0f));
  std::atomic<bool> cancel{false};
  RingOptions options;
  options.segment_elems = 16;
  options.timeout = absl::Seconds(60);
  options.cancelled = [&cancel] { return cancel.load(); };
  absl::Time cancelled_at = absl::InfiniteFuture();
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(300));
    cancelled_at = absl::Now();
    cancel.store(true);
  });
  std::vector<absl::Status> st =
      AllReduceOnThreads(ring->get(), 0, &v, options);
  const absl::Time done = absl::Now();
  canceller.join();
  const absl::Duration after = done - cancelled_at;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kCancelled)
        << "rank " << r << ": " << st[r];
    EXPECT_TRUE(absl::StrContains(st[r].message(), "cancelled")) << st[r];
  }
  // Poll 50 ms; a second for a loaded machine, still far below the timeout.
  EXPECT_LT(after, absl::Seconds(1));
  std::printf("[%s] cancelled %.3fs after the flag: %s\n",
              KindName(GetParam()).c_str(), absl::ToDoubleSeconds(after),
              st[0].ToString().c_str());
}

// training.on_failure: restart: after a rollback the rank expects
// generation 1. A late segment of generation 0 is ABORTED and stored
// nothing. Segments of generation 2 (a neighbour that re-formed first, with
// a new session id) are held apart: the rank's generation-1 all-reduce
// still takes its segments, a stranger's generation-2 segment (wrong id)
// neither evicts nor blocks the neighbour's one with the same key, and once
// the rank expects generation 2 only the neighbour's is taken. A broken
// stream of an older generation fails no Take.
TEST(MailboxTest, GenerationsRefuseOldSegmentsAndHoldNewOnes) {
  Mailbox mailbox;
  mailbox.ExpectSender(2, kSession, 1);
  const auto key = [](uint64_t step, uint64_t offset) {
    return SegmentKey{step, pstrain::v1::REDUCE_SCATTER, 0, offset};
  };
  const uint64_t kNew = kSession + 1;  // the re-formed neighbour's id
  absl::Status st =
      mailbox.Put(key(9, 0), 2, kSession, std::string(4, '\0'), 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "generation 0")) << st;
  EXPECT_EQ(mailbox.size(), 0u);
  ASSERT_TRUE(
      mailbox.Put(key(9, 1), 2, kSession, std::string(4, '\0'), 1).ok());
  ASSERT_TRUE(mailbox.Put(key(4, 0), 2, 77, std::string(4, '\0'), 2).ok());
  ASSERT_TRUE(mailbox.Put(key(4, 0), 2, kNew, std::string(4, '\0'), 2).ok());
  st = mailbox.Put(key(4, 0), 1, kNew, std::string(4, '\0'), 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_EQ(mailbox.size(), 3u);
  std::vector<float> out(1);
  EXPECT_TRUE(mailbox
                  .Take(key(9, 1), 2, absl::MakeSpan(out),
                        absl::Now() + absl::Seconds(1))
                  .ok());
  st = mailbox.Take(key(4, 0), 2, absl::MakeSpan(out),
                    absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  mailbox.Fail(2, kSession, absl::DataLossError("old stream cancelled"), 1);
  mailbox.ExpectSender(2, kNew, 2);
  mailbox.Fail(2, kSession, absl::DataLossError("old stream cancelled"), 1);
  EXPECT_EQ(mailbox.size(), 1u);  // the stranger's is gone
  EXPECT_EQ(mailbox.bytes(), 4u);
  EXPECT_TRUE(mailbox
                  .Take(key(4, 0), 2, absl::MakeSpan(out),
                        absl::Now() + absl::Seconds(1))
                  .ok());
  st = mailbox.Take(key(4, 1), 2, absl::MakeSpan(out),
                    absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  st = mailbox.Put(key(4, 1), 2, kSession, std::string(4, '\0'), 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_EQ(mailbox.bytes(), 0u);
}

TEST(NcclTest, FailedPreconditionWithoutGpu) {
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend =
      CreateComputeBackend("auto");
  ASSERT_TRUE(backend.ok()) << backend.status();
  if (absl::StartsWith((*backend)->name(), "cuda")) {
    GTEST_SKIP() << "a CUDA device is visible: " << (*backend)->name();
  }
  absl::Status usable = NcclUsable(**backend);
  EXPECT_EQ(usable.code(), absl::StatusCode::kFailedPrecondition) << usable;
  EXPECT_TRUE(absl::StrContains(usable.message(), "allreduce.backend nccl"))
      << usable;
  EXPECT_EQ(NewNcclUniqueId().status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::unique_ptr<AllReducer>> nccl = CreateNcclAllReducer(
      std::move(*backend), 0, 2, std::string(128, '\0'), absl::Seconds(1));
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kFailedPrecondition);
  if (!BuiltWithNccl()) {
    // The stub says why NCCL is missing (the build's note: no toolkit, or
    // no nccl.h where cuda_configure.bzl looked, or disabled).
    EXPECT_TRUE(absl::StrContains(nccl.status().message(), "without NCCL"))
        << nccl.status();
  }
  std::printf("without a GPU: %s\n", nccl.status().ToString().c_str());
}

}  // namespace
}  // namespace pstrain
