#include "worker/allreduce/segment_wire.h"

#include <grpc/slice.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// RingSegment's field numbers (proto/pstrain.proto).
enum Field : uint32_t {
  kStep = 1,
  kPhase = 2,
  kChunk = 3,
  kOffset = 4,
  kFromRank = 5,
  kData = 6,
  kSessionId = 7,
  kDtype = 105,
  kGeneration = 120,
};
enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kFixed32 = 5,
};

char* PutVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

char* PutTag(char* p, uint32_t field, uint32_t type) {
  return PutVarint(p, (field << 3) | type);
}

// Reads bytes across the slices of a received message.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : s_(slices) {}

  bool AtEnd() {
    Settle();
    return i_ == s_.size();
  }
  bool Byte(uint8_t* b) {
    if (AtEnd()) return false;
    *b = s_[i_].begin()[pos_++];
    return true;
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }
  bool Fixed(int bytes, uint64_t* v) {
    *v = 0;
    for (int k = 0; k < bytes; ++k) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= uint64_t{b} << (8 * k);
    }
    return true;
  }
  // The next `n` bytes, as pieces of the slices (or skipped when `pieces`
  // is null).
  bool Take(uint64_t n, absl::InlinedVector<absl::string_view, 4>* pieces) {
    while (n > 0) {
      if (AtEnd()) return false;
      const size_t avail = s_[i_].size() - pos_;
      const size_t take = n < avail ? static_cast<size_t>(n) : avail;
      if (pieces != nullptr) {
        pieces->emplace_back(
            reinterpret_cast<const char*>(s_[i_].begin()) + pos_, take);
      }
      pos_ += take;
      n -= take;
    }
    return true;
  }

 private:
  void Settle() {
    while (i_ < s_.size() && pos_ == s_[i_].size()) ++i_, pos_ = 0;
  }
  const std::vector<grpc::Slice>& s_;
  size_t i_ = 0, pos_ = 0;
};

// Keeps the received message's slices alive for the payload.
struct Received {
  grpc::ByteBuffer message;
  std::vector<grpc::Slice> slices;
};

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ring segment: ", what));
}

}  // namespace

grpc::ByteBuffer EncodeSegment(const SegmentKey& key, uint32_t from_rank,
                               uint64_t session_id,
                               absl::Span<const float> data,
                               pstrain::v1::DType dtype, uint64_t generation) {
  const size_t bytes = RingWireBytes(dtype, data.size());
  // Seven tags and varints (at most 12 bytes each), a fixed64, the data
  // tag and its length.
  char header[128];
  char* p = header;
  p = PutVarint(PutTag(p, kStep, kVarint), key.step);
  p = PutVarint(PutTag(p, kPhase, kVarint), static_cast<uint32_t>(key.phase));
  p = PutVarint(PutTag(p, kChunk, kVarint), key.chunk);
  p = PutVarint(PutTag(p, kOffset, kVarint), key.offset);
  p = PutVarint(PutTag(p, kFromRank, kVarint), from_rank);
  p = PutTag(p, kSessionId, kFixed64);
  for (int k = 0; k < 8; ++k) *p++ = static_cast<char>(session_id >> (8 * k));
  if (dtype != pstrain::v1::DTYPE_F32) {  // fp32: unset, as before the field
    p = PutVarint(PutTag(p, kDtype, kVarint), static_cast<uint32_t>(dtype));
  }
  if (generation != 0) {  // unset before any rollback, as before the field
    p = PutVarint(PutTag(p, kGeneration, kVarint), generation);
  }
  p = PutVarint(PutTag(p, kData, kLengthDelimited), bytes);
  grpc_slice payload = grpc_slice_malloc(bytes);
  EncodeRingWire(data, dtype,
                 reinterpret_cast<char*>(GRPC_SLICE_START_PTR(payload)));
  grpc::Slice slices[2] = {grpc::Slice(header, p - header),
                           grpc::Slice(payload, grpc::Slice::STEAL_REF)};
  return grpc::ByteBuffer(slices, bytes > 0 ? 2 : 1);
}

absl::StatusOr<DecodedSegment> DecodeSegment(grpc::ByteBuffer message) {
  auto received = std::make_shared<Received>();
  received->message.Swap(&message);
  if (!received->message.Dump(&received->slices).ok()) {
    return Malformed("unreadable message");
  }
  DecodedSegment d;
  Cursor in(received->slices);
  bool have_data = false;
  while (!in.AtEnd()) {
    uint64_t tag, v;
    if (!in.Varint(&tag)) return Malformed("truncated tag");
    const uint64_t field = tag >> 3;
    const uint32_t type = tag & 7;
    const bool known = (field >= kStep && field <= kSessionId) ||
                       field == kDtype || field == kGeneration;
    const uint32_t want = field == kData        ? kLengthDelimited
                          : field == kSessionId ? kFixed64
                                                : kVarint;
    if (known && type != want) {
      return Malformed(absl::StrCat("field ", field, " has wire type ", type));
    }
    switch (type) {
      case kVarint:
        if (!in.Varint(&v)) return Malformed("truncated varint");
        break;
      case kFixed64:
        if (!in.Fixed(8, &v)) return Malformed("truncated fixed64");
        break;
      case kFixed32:
        if (!in.Fixed(4, &v)) return Malformed("truncated fixed32");
        break;
      case kLengthDelimited:
        if (!in.Varint(&v)) return Malformed("truncated length");
        if (field == kData) {
          if (have_data) return Malformed("two data fields");
          have_data = true;
          if (!in.Take(v, &d.payload.pieces)) {
            return Malformed(
                absl::StrCat("data shorter than its ", v, "-byte length"));
          }
        } else if (!in.Take(v, nullptr)) {
          return Malformed("truncated field");
        }
        continue;
      default:
        return Malformed(absl::StrCat("wire type ", type));
    }
    switch (field) {
      case kStep:
        d.key.step = v;
        break;
      case kPhase:
        d.key.phase = static_cast<pstrain::v1::RingPhase>(v);
        break;
      case kChunk:
        d.key.chunk = static_cast<uint32_t>(v);
        break;
      case kOffset:
        d.key.offset = v;
        break;
      case kFromRank:
        d.from_rank = static_cast<uint32_t>(v);
        break;
      case kSessionId:
        d.session_id = v;
        break;
      case kDtype:
        d.payload.dtype = v == pstrain::v1::DTYPE_UNSPECIFIED
                              ? pstrain::v1::DTYPE_F32
                              : static_cast<pstrain::v1::DType>(v);
        if (v > 0xff || !IsRingWireDtype(d.payload.dtype)) {
          return Malformed(absl::StrCat("dtype ", v, " on the ring"));
        }
        break;
      case kGeneration:
        d.generation = v;
        break;
      default:
        break;  // unknown: skipped
    }
  }
  d.payload.owner = std::move(received);
  return d;
}

}  // namespace pstrain
