#include "common/chunk_frames.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/low_precision.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {
namespace {

using pstrain::v1::ChunkData;
using pstrain::v1::DType;
using pstrain::v1::PullResponse;
using pstrain::v1::PushRequest;

template <typename M>
M Parse(grpc::ByteBuffer* buffer) {
  M m;
  EXPECT_TRUE(grpc::SerializationTraits<M>::Deserialize(buffer, &m).ok());
  return m;
}

class ChunkFramesTest : public ::testing::TestWithParam<DType> {};

// The frame parses as exactly the message protobuf would have built.
TEST_P(ChunkFramesTest, ParsesAsTheProtobufMessage) {
  const DType dtype = GetParam();
  std::vector<float> a(1000), b(3);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * i - 7.25f;
  b = {1.0f, -2.5f, 3e-3f};
  Keepalive keepalive;
  PushRequest expected;
  auto* h = expected.mutable_header();
  h->set_worker(3);
  h->set_clock(7);
  h->set_num_samples(32);
  EncodeChunk("weights/a", 2, a.data(), a.size(), expected.add_chunks(), dtype);
  EncodeChunk("b", 0, b.data(), b.size(), expected.add_chunks(), dtype);
  {
    ChunkFrame frame(/*chunk_field=*/2);
    PushRequest fields;
    *fields.mutable_header() = expected.header();
    frame.AddFields(fields);
    frame.AddChunk("weights/a", 2, a.data(), a.size(), dtype, &keepalive);
    frame.AddChunk("b", 0, b.data(), b.size(), dtype, &keepalive);
    EXPECT_EQ(frame.payload_bytes(), 1003 * WireElementBytes(dtype));
    grpc::ByteBuffer buffer = frame.Release();
    EXPECT_EQ(buffer.Length(), expected.ByteSizeLong());
    PushRequest got = Parse<PushRequest>(&buffer);
    EXPECT_EQ(got.SerializeAsString(), expected.SerializeAsString());
  }
  EXPECT_EQ(keepalive.in_use(), 0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ChunkFramesTest,
                         ::testing::Values(pstrain::v1::DTYPE_F32,
                                           pstrain::v1::DTYPE_BF16,
                                           pstrain::v1::DTYPE_F16));

// An fp16 payload beyond fp16's range (a weight of -131008 pulled) is sent
// as +-65504, never +-inf, and counted, as EncodeChunk does.
TEST(ChunkFrameTest, Fp16BeyondItsRangeSaturatesAndIsCounted) {
  const std::vector<float> weights = {-131008.0f, 2.0f, 70000.0f};
  const uint64_t before = F16SaturationCount();
  ChunkFrame frame(/*chunk_field=*/3);
  frame.AddChunk("w", 0, weights.data(), weights.size(), pstrain::v1::DTYPE_F16,
                 /*keepalive=*/nullptr);
  EXPECT_EQ(F16SaturationCount(), before + 2);
  grpc::ByteBuffer buffer = frame.Release();
  PullResponse got = Parse<PullResponse>(&buffer);
  ASSERT_EQ(got.chunks_size(), 1);
  std::vector<float> pulled(weights.size());
  ASSERT_TRUE(DecodeChunk(got.chunks(0), weights.size(),
                          /*require_finite=*/true, pulled.data(),
                          pstrain::v1::DTYPE_F16)
                  .ok());
  EXPECT_EQ(pulled, (std::vector<float>{-65504.0f, 2.0f, 65504.0f}));
}

// fp32 payloads are borrowed: the keepalive counts them until the last copy
// of the buffer is gone, and the owner lives as long.
TEST(ChunkFrameTest, Fp32PayloadIsBorrowedUntilTheBufferIsGone) {
  auto owner = std::make_shared<std::vector<float>>(4096, 1.5f);
  std::weak_ptr<std::vector<float>> weak = owner;
  Keepalive keepalive;
  ChunkFrame frame(/*chunk_field=*/3);
  PullResponse head;
  head.set_version(9);
  frame.AddFields(head);
  frame.AddChunk("w", 0, owner->data(), owner->size(), pstrain::v1::DTYPE_F32,
                 &keepalive, owner);
  owner.reset();
  auto buffer = std::make_unique<grpc::ByteBuffer>(frame.Release());
  grpc::ByteBuffer copy = *buffer;  // shares the slices
  EXPECT_EQ(keepalive.in_use(), 1);
  buffer.reset();
  EXPECT_FALSE(keepalive.WaitUnused(absl::Now() + absl::Milliseconds(10)));
  ASSERT_FALSE(weak.expired());
  PullResponse got = Parse<PullResponse>(&copy);
  EXPECT_EQ(got.version(), 9u);
  ASSERT_EQ(got.chunks_size(), 1);
  std::vector<float> values(4096);
  ASSERT_TRUE(DecodeChunk(got.chunks(0), 4096, true, values.data()).ok());
  EXPECT_EQ(values[4095], 1.5f);
  copy.Clear();
  EXPECT_TRUE(keepalive.WaitUnused(absl::Now() + absl::Seconds(1)));
  EXPECT_TRUE(weak.expired());
}

TEST(ChunkFrameTest, EmptyChunkHasNoPayloadSlice) {
  Keepalive keepalive;
  ChunkFrame frame(/*chunk_field=*/3);
  frame.AddChunk("w", 1, nullptr, 0, pstrain::v1::DTYPE_F32, &keepalive);
  grpc::ByteBuffer buffer = frame.Release();
  EXPECT_EQ(keepalive.in_use(), 0);
  PullResponse got = Parse<PullResponse>(&buffer);
  ASSERT_EQ(got.chunks_size(), 1);
  EXPECT_EQ(got.chunks(0).index(), 1u);
  EXPECT_TRUE(got.chunks(0).data().empty());
}

}  // namespace
}  // namespace pstrain
