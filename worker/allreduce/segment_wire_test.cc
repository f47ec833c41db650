// The ring's wire format without protobuf copies: what EncodeSegment writes
// is a RingSegment protobuf, what protobuf writes DecodeSegment reads even
// when the message arrives in slices cut anywhere (inside varints, inside
// floats), the payload folds into a vector exactly as the floats would, and
// malformed messages are INVALID_ARGUMENT.
#include "worker/allreduce/segment_wire.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/low_precision.h"
#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"

namespace pstrain {
namespace {

// `bytes` as a message of slices of at most `cut` bytes each.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t cut) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += cut) {
    slices.emplace_back(bytes.data() + at, std::min(cut, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flat(const grpc::ByteBuffer& message) {
  grpc::Slice one;
  EXPECT_TRUE(message.DumpToSingleSlice(&one).ok());
  return std::string(reinterpret_cast<const char*>(one.begin()), one.size());
}

std::vector<float> Values(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (0.37f * i - 11.0f);
  return v;
}

TEST(SegmentWireTest, EncodedSegmentIsARingSegmentProtobuf) {
  const std::vector<float> data = Values(1000, 1.5f);
  const SegmentKey key{1ull << 40, pstrain::v1::ALL_GATHER, 3, 123456};
  pstrain::v1::RingSegment parsed;
  ASSERT_TRUE(parsed.ParseFromString(
      Flat(EncodeSegment(key, 2, 0xfeedfacecafebeefull, data))));
  EXPECT_EQ(parsed.step(), key.step);
  EXPECT_EQ(parsed.phase(), key.phase);
  EXPECT_EQ(parsed.chunk(), key.chunk);
  EXPECT_EQ(parsed.offset(), key.offset);
  EXPECT_EQ(parsed.from_rank(), 2u);
  EXPECT_EQ(parsed.session_id(), 0xfeedfacecafebeefull);
  ASSERT_EQ(parsed.data().size(), data.size() * sizeof(float));
  EXPECT_EQ(
      std::memcmp(parsed.data().data(), data.data(), parsed.data().size()), 0);
}

// training.on_failure: restart: the generation travels both ways (unset
// at 0, as before the field existed), even in a bf16 segment.
TEST(SegmentWireTest, GenerationRoundTrips) {
  const std::vector<float> data = Values(10, 1.0f);
  const SegmentKey key{7, pstrain::v1::REDUCE_SCATTER, 1, 20};
  for (uint64_t generation : {uint64_t{0}, uint64_t{3}, uint64_t{1} << 40}) {
    SCOPED_TRACE(generation);
    const grpc::ByteBuffer message =
        EncodeSegment(key, 1, 42, data, pstrain::v1::DTYPE_BF16, generation);
    pstrain::v1::RingSegment parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flat(message)));
    EXPECT_EQ(parsed.generation(), generation);
    EXPECT_EQ(parsed.dtype(), pstrain::v1::DTYPE_BF16);
    absl::StatusOr<DecodedSegment> d = DecodeSegment(Sliced(Flat(message), 3));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->generation, generation);
    EXPECT_EQ(d->key, key);
    EXPECT_EQ(d->session_id, 42u);
  }
}

// A protobuf-written segment cut into slices of 1, 3, 7 and 4096 bytes:
// the same fields, and the payload adds and copies bit for bit as the
// floats themselves.
TEST(SegmentWireTest, DecodesProtobufSegmentsCutAnywhere) {
  const std::vector<float> theirs = Values(777, 0.25f);
  pstrain::v1::RingSegment segment;
  segment.set_step(9);
  segment.set_phase(pstrain::v1::REDUCE_SCATTER);
  segment.set_chunk(1);
  segment.set_offset(4242);
  segment.set_from_rank(4);
  segment.set_session_id(77);
  segment.set_data(std::string(reinterpret_cast<const char*>(theirs.data()),
                               theirs.size() * sizeof(float)));
  const std::string bytes = segment.SerializeAsString();
  const std::vector<float> mine = Values(777, -3.0f);
  std::vector<float> sum(777);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = theirs[i] + mine[i];
  for (size_t cut : {size_t{1}, size_t{3}, size_t{7}, size_t{4096}}) {
    SCOPED_TRACE(cut);
    absl::StatusOr<DecodedSegment> d = DecodeSegment(Sliced(bytes, cut));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->key, (SegmentKey{9, pstrain::v1::REDUCE_SCATTER, 1, 4242}));
    EXPECT_EQ(d->from_rank, 4u);
    EXPECT_EQ(d->session_id, 77u);
    ASSERT_EQ(d->payload.size(), theirs.size() * sizeof(float));
    if (cut < sizeof(float)) {
      EXPECT_GT(d->payload.pieces.size(), 100u);
    }
    std::vector<float> added = mine, copied(777, 0.0f);
    CombineInto(d->payload, Combine::kAdd, absl::MakeSpan(added));
    CombineInto(d->payload, Combine::kCopy, absl::MakeSpan(copied));
    EXPECT_EQ(std::memcmp(added.data(), sum.data(), 777 * 4), 0);
    EXPECT_EQ(std::memcmp(copied.data(), theirs.data(), 777 * 4), 0);
  }
}

// A bf16 segment: protobuf sees dtype DTYPE_BF16 and 2 bytes per value
// (each the value rounded to nearest even); decoded from slices cut
// anywhere (inside a value too), it adds and copies as the rounded values.
TEST(SegmentWireTest, Bf16SegmentsCarryTheirDtypeAndHalfTheBytes) {
  const std::vector<float> data = Values(301, 0.013f);
  std::vector<float> rounded(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    rounded[i] = Bf16ToFloat(FloatToBf16(data[i]));
  }
  const std::string bytes =
      Flat(EncodeSegment({4, pstrain::v1::REDUCE_SCATTER, 1, 8}, 3, 9, data,
                         pstrain::v1::DTYPE_BF16));
  pstrain::v1::RingSegment parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.dtype(), pstrain::v1::DTYPE_BF16);
  ASSERT_EQ(parsed.data().size(), data.size() * 2);
  for (size_t i = 0; i < data.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, parsed.data().data() + 2 * i, 2);
    ASSERT_EQ(h, FloatToBf16(data[i])) << i;
  }
  const std::vector<float> mine = Values(301, -2.0f);
  for (size_t cut : {size_t{1}, size_t{3}, size_t{4096}}) {
    SCOPED_TRACE(cut);
    absl::StatusOr<DecodedSegment> d = DecodeSegment(Sliced(bytes, cut));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->payload.dtype, pstrain::v1::DTYPE_BF16);
    std::vector<float> added = mine, copied(301, 0.0f);
    CombineInto(d->payload, Combine::kAdd, absl::MakeSpan(added));
    CombineInto(d->payload, Combine::kCopy, absl::MakeSpan(copied));
    for (size_t i = 0; i < data.size(); ++i) {
      ASSERT_EQ(added[i], rounded[i] + mine[i]) << i;
      ASSERT_EQ(copied[i], rounded[i]) << i;
    }
  }
  // fp32 leaves the field unset: the bytes are those of before the field.
  pstrain::v1::RingSegment f32;
  ASSERT_TRUE(f32.ParseFromString(
      Flat(EncodeSegment({4, pstrain::v1::REDUCE_SCATTER, 1, 8}, 3, 9, data))));
  EXPECT_EQ(f32.dtype(), pstrain::v1::DTYPE_UNSPECIFIED);
}

TEST(SegmentWireTest, SkipsUnknownFields) {
  pstrain::v1::RingSegment segment;
  segment.set_step(5);
  segment.set_data(std::string(8, '\x01'));
  // Field 15 as varint, 16 as fixed32, 17 as bytes: unknown to this build.
  std::string bytes = segment.SerializeAsString() +
                      std::string(
                          "\x78\x05\x85\x01\x01\x02\x03\x04\x8a\x01\x02"
                          "ab",
                          13);
  absl::StatusOr<DecodedSegment> d = DecodeSegment(Sliced(bytes, 5));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->key.step, 5u);
  EXPECT_EQ(d->payload.size(), 8u);
}

TEST(SegmentWireTest, MalformedSegmentsAreInvalidArgument) {
  const std::vector<float> data = Values(16, 1.0f);
  const std::string good =
      Flat(EncodeSegment({1, pstrain::v1::ALL_GATHER, 0, 0}, 0, 1, data));
  const std::string cases[] = {
      good.substr(0, good.size() - 1),  // data shorter than its length
      good.substr(0, 1),                // a tag without its value
      std::string("\x08\x80", 2),       // a truncated varint
      std::string("\x09", 1) + std::string(8, '\0'),  // step as fixed64
      std::string("\x0b", 1),                         // wire type 3
      good + good.substr(good.size() - 64 - 2),       // two data fields
      std::string("\xc8\x06\x03", 3),                 // dtype (105) DTYPE_F16
      std::string("\xc8\x06\x07", 3),                 // dtype (105) unknown
  };
  for (const std::string& bad : cases) {
    absl::StatusOr<DecodedSegment> d = DecodeSegment(Sliced(bad, 2));
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument)
        << d.status();
    EXPECT_TRUE(absl::StrContains(d.status().message(), "malformed"))
        << d.status();
  }
}

}  // namespace
}  // namespace pstrain
