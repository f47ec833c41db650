#include "server/push_frame.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"

namespace pstrain {
namespace {

std::string Join(const std::vector<absl::string_view>& pieces) {
  std::string s;
  for (absl::string_view p : pieces) s.append(p.data(), p.size());
  return s;
}

// `frame` parsed by ParsePushFrame over `pieces` matches protobuf's parse
// of the same bytes: both refuse it, or both give the same fields.
void ExpectSameAsProtobuf(const std::string& frame,
                          const std::vector<absl::string_view>& pieces) {
  v1::PushRequest want;
  const bool want_ok = want.ParseFromString(frame);
  PushFrameView got;
  const absl::Status st = ParsePushFrame(pieces, &got);
  ASSERT_EQ(st.ok(), want_ok) << st;
  if (!want_ok) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    return;
  }
  EXPECT_EQ(got.has_header, want.has_header());
  EXPECT_EQ(got.header.SerializeAsString(), want.header().SerializeAsString());
  ASSERT_EQ(got.chunks.size(), static_cast<size_t>(want.chunks_size()));
  for (int i = 0; i < want.chunks_size(); ++i) {
    const v1::ChunkData& w = want.chunks(i);
    const ChunkView& g = got.chunks[i];
    EXPECT_EQ(g.tensor, w.tensor());
    EXPECT_EQ(g.index, w.index());
    EXPECT_EQ(g.dtype, static_cast<int>(w.dtype()));
    EXPECT_EQ(g.shape,
              std::vector<int64_t>(w.shape().begin(), w.shape().end()));
    EXPECT_EQ(Join(g.data), w.data());
    EXPECT_EQ(g.data_size, w.data().size());
  }
}

v1::PushRequest SampleRequest() {
  v1::PushRequest r;
  v1::PushHeader* h = r.mutable_header();
  h->set_worker(3);
  h->set_clock(41);
  h->set_session_id(0x1234567890abcdefULL);
  h->set_generation(2);
  for (int k = 0; k < 3; ++k) {
    v1::ChunkData* c = r.add_chunks();
    c->set_tensor(k == 1 ? "layer.bias" : "layer.weight");
    c->set_index(k);
    c->set_dtype(static_cast<v1::DType>(k % 2));
    c->add_shape(5 + k);
    std::string data;
    for (int i = 0; i < 4 * (5 + k); ++i)
      data.push_back(static_cast<char>(i * 7 + k));
    c->set_data(data);
  }
  return r;
}

TEST(PushFrameTest, PayloadSplitAtEveryOffset) {
  const std::string frame = SampleRequest().SerializeAsString();
  const absl::string_view all(frame);
  for (size_t i = 0; i <= frame.size(); ++i) {
    ExpectSameAsProtobuf(frame, {all.substr(0, i), all.substr(i)});
  }
}

TEST(PushFrameTest, PayloadPointsIntoTheInput) {
  const std::string frame = SampleRequest().SerializeAsString();
  const absl::string_view all(frame);
  PushFrameView got;
  ASSERT_TRUE(ParsePushFrame({all}, &got).ok());
  for (const ChunkView& c : got.chunks) {
    ASSERT_EQ(c.data.size(), 1u);
    EXPECT_GE(c.data[0].data(), frame.data());
    EXPECT_LE(c.data[0].data() + c.data[0].size(), frame.data() + frame.size());
  }
}

TEST(PushFrameTest, OneBytePieces) {
  const std::string frame = SampleRequest().SerializeAsString();
  std::vector<absl::string_view> pieces;
  for (size_t i = 0; i < frame.size(); ++i) {
    pieces.push_back(absl::string_view(frame).substr(i, 1));
    if (i % 5 == 0) pieces.push_back(absl::string_view());  // empty slices
  }
  ExpectSameAsProtobuf(frame, pieces);
}

TEST(PushFrameTest, EveryTruncationRefusedLikeProtobuf) {
  const std::string frame = SampleRequest().SerializeAsString();
  for (size_t n = 0; n < frame.size(); ++n) {
    const std::string cut = frame.substr(0, n);
    const absl::string_view v(cut);
    ExpectSameAsProtobuf(cut, {v.substr(0, n / 2), v.substr(n / 2)});
  }
}

TEST(PushFrameTest, UnknownFieldsSkipped) {
  v1::PushRequest r = SampleRequest();
  std::string frame = r.SerializeAsString();
  // Field 9 varint, field 10 fixed64, field 11 bytes, field 12 fixed32,
  // field 13 group holding a varint: all unknown at the top level.
  const std::string unknown = std::string("\x48\x07", 2) +
                              std::string("\x51", 1) + std::string(8, 'x') +
                              std::string(
                                  "\x5a\x03"
                                  "abc",
                                  5) +
                              std::string("\x65", 1) + std::string(4, 'y') +
                              std::string("\x6b\x08\x01\x6c", 4);
  frame = unknown + frame + unknown;
  ExpectSameAsProtobuf(frame, {frame});
  // Inside a chunk too (a chunk with unknown fields and a second data).
  v1::ChunkData c;
  c.set_tensor("t");
  c.set_data("abcd");
  std::string chunk = c.SerializeAsString() + unknown + "\x2a\x02zz";
  std::string frame2 =
      std::string("\x12", 1) + static_cast<char>(chunk.size()) + chunk;
  ExpectSameAsProtobuf(frame2, {frame2});
  PushFrameView got;
  ASSERT_TRUE(ParsePushFrame({frame2}, &got).ok());
  EXPECT_EQ(Join(got.chunks[0].data), "zz");  // the last occurrence wins
}

TEST(PushFrameTest, MalformedRefusedLikeProtobuf) {
  const std::vector<std::string> frames = {
      std::string("\x00\x01", 2),      // field number 0
      std::string("\x4c", 1),          // stray end-group
      std::string("\x4e", 1),          // wire type 6
      std::string("\x6b\x08\x01", 3),  // group never ended
      std::string("\x6b\x74", 2),      // group ended by another
      std::string("\x48") + std::string(10, '\xff') + "\x01",  // long varint
      std::string("\x12\x05\x0a\x02\xc3\x28", 6) + std::string(1, '\x00'),
      std::string("\x12\x03\x0a\x05zz", 5),  // string past its chunk
      std::string("\x0a\x02\x08", 3),        // header past the frame
      // A 5-byte tag whose bits past 32 protobuf drops (fuzzer finding):
      // field 0x5fffffd, fixed32, accepted.
      std::string("\xed\xff\xff\xff\x12", 5) + "abcd",
      std::string("\xed\xff\xff\xff\x92\x01", 6) + "abcd",  // 6-byte tag
      std::string("\x5a\x80\x80\x80\x80\x00", 6),           // 6-byte length
      std::string("\x5a\x80\x80\x80\x80\x08", 6),           // length of 2 GiB
      std::string("\x5a\x83\x80\x80\x80\x00", 6) + "abc",
      std::string("\x5a\x83\x80\x80\x00", 5) + "abc",  // 5 bytes: fine
      // Two headers, the second with an explicit 0 (fuzzer finding): it
      // overwrites the first's read_version, as protobuf parses.
      std::string("\x0a\x02\x18\x16\x0a\x02\x18\x00", 8),
  };
  for (const std::string& f : frames) ExpectSameAsProtobuf(f, {f});
}

// Random mutations of a valid frame, split at random: ParsePushFrame
// accepts and refuses exactly what protobuf does, with the same fields.
TEST(PushFrameTest, MutationsMatchProtobuf) {
  const std::string frame = SampleRequest().SerializeAsString();
  std::mt19937 rng(26);
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string m = frame;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % m.size();
      switch (rng() % 3) {
        case 0:
          m[at] = static_cast<char>(rng());
          break;
        case 1:
          m.erase(at, 1 + rng() % 3);
          break;
        default:
          m.insert(at, 1, static_cast<char>(rng()));
          break;
      }
      if (m.empty()) m = "x";
    }
    const size_t cut = rng() % (m.size() + 1);
    const absl::string_view v(m);
    ExpectSameAsProtobuf(m, {v.substr(0, cut), v.substr(cut)});
    v1::PushRequest parsed;
    if (parsed.ParseFromString(m)) ++accepted;
    if (HasFatalFailure()) {
      ADD_FAILURE() << "round " << round;
      return;
    }
  }
  // Both outcomes are exercised, not only one.
  EXPECT_GT(accepted, 1000);
  EXPECT_LT(accepted, 19000);
}

}  // namespace
}  // namespace pstrain
