#include "server/push_frame.h"

#include <algorithm>
#include <cstring>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace pstrain {
namespace {

// A read position over the frame's pieces, bounded by `limit_` bytes.
class Cursor {
 public:
  explicit Cursor(absl::Span<const absl::string_view> pieces)
      : pieces_(pieces) {
    for (absl::string_view p : pieces) limit_ += p.size();
    Settle();
  }

  size_t remaining() const { return limit_ - consumed_; }
  bool AtEnd() const { return consumed_ == limit_; }

  // Narrows the readable range to the next `n` bytes; returns the old
  // limit for PopLimit. False when fewer than `n` remain.
  bool PushLimit(size_t n, size_t* old_limit) {
    if (n > remaining()) return false;
    *old_limit = limit_;
    limit_ = consumed_ + n;
    return true;
  }
  void PopLimit(size_t old_limit) { limit_ = old_limit; }

  bool ReadByte(uint8_t* b) {
    if (AtEnd()) return false;
    *b = static_cast<uint8_t>(pieces_[piece_][offset_]);
    Advance(1);
    return true;
  }

  // Up to 10 bytes, as protobuf: a longer varint is malformed.
  bool ReadVarint(uint64_t* v) {
    uint64_t result = 0;
    for (int i = 0; i < 10; ++i) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      result |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;
  }

  bool Skip(size_t n) {
    if (n > remaining()) return false;
    Advance(n);
    return true;
  }

  // The next `n` bytes as pieces of the input (no copy).
  bool ReadPieces(size_t n, std::vector<absl::string_view>* out) {
    if (n > remaining()) return false;
    while (n > 0) {
      absl::string_view p = pieces_[piece_].substr(offset_);
      size_t take = std::min(n, p.size());
      out->push_back(p.substr(0, take));
      Advance(take);
      n -= take;
    }
    return true;
  }

  // The next `n` bytes copied into `out` (for small fields).
  bool ReadString(size_t n, std::string* out) {
    std::vector<absl::string_view> parts;
    if (!ReadPieces(n, &parts)) return false;
    out->clear();
    out->reserve(n);
    for (absl::string_view p : parts) out->append(p.data(), p.size());
    return true;
  }

 private:
  void Advance(size_t n) {
    consumed_ += n;
    offset_ += n;
    Settle();
  }
  // Moves past exhausted (and empty) pieces.
  void Settle() {
    while (piece_ < pieces_.size() && offset_ >= pieces_[piece_].size()) {
      offset_ -= pieces_[piece_].size();
      ++piece_;
    }
  }

  absl::Span<const absl::string_view> pieces_;
  size_t piece_ = 0;
  size_t offset_ = 0;
  size_t consumed_ = 0;
  size_t limit_ = 0;
};

constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kStartGroup = 3;
constexpr int kEndGroup = 4;
constexpr int kFixed32 = 5;
// protobuf's default recursion limit, which bounds nested groups too.
constexpr int kMaxDepth = 100;

// Reads a varint of at most `max_bytes` bytes whose last byte is below
// `last_below` (protobuf's limits for tags and lengths).
bool ReadShortVarint(Cursor* in, int max_bytes, uint8_t last_below,
                     uint64_t* v) {
  uint64_t result = 0;
  for (int i = 0; i < max_bytes; ++i) {
    uint8_t b;
    if (!in->ReadByte(&b)) return false;
    if (i == max_bytes - 1 && b >= last_below) return false;
    result |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) break;
  }
  *v = result;
  return true;
}

// Reads a tag as protobuf does: at most 5 bytes, bits past 32 dropped;
// false at a malformed one or field number 0.
bool ReadTag(Cursor* in, uint32_t* field, int* wire_type) {
  uint64_t tag;
  if (!ReadShortVarint(in, 5, 0x80, &tag)) return false;
  const uint32_t t = static_cast<uint32_t>(tag);
  *field = t >> 3;
  *wire_type = static_cast<int>(t & 7);
  return *field != 0;
}

// A length: at most 5 bytes and below 2 GiB, as protobuf requires.
bool ReadLength(Cursor* in, size_t* n) {
  uint64_t v;
  if (!ReadShortVarint(in, 5, 8, &v)) return false;
  *n = static_cast<size_t>(v);
  return true;
}

// Skips one field's value (after its tag), groups included.
bool SkipField(Cursor* in, uint32_t field, int wire_type, int depth) {
  switch (wire_type) {
    case kVarint: {
      uint64_t v;
      return in->ReadVarint(&v);
    }
    case kFixed64:
      return in->Skip(8);
    case kFixed32:
      return in->Skip(4);
    case kLengthDelimited: {
      size_t n;
      return ReadLength(in, &n) && in->Skip(n);
    }
    case kStartGroup: {
      if (depth >= kMaxDepth) return false;
      while (true) {
        uint32_t f;
        int wt;
        if (!ReadTag(in, &f, &wt)) return false;
        if (wt == kEndGroup) return f == field;
        if (!SkipField(in, f, wt, depth + 1)) return false;
      }
    }
    default:  // a stray end-group, or wire types 6 and 7
      return false;
  }
}

// Whether protobuf accepts `s` as a proto3 `string` (valid UTF-8), asked
// of protobuf itself through a one-field ChunkData (its UTF-8 check is not
// public API). Only the small tensor name goes through it.
bool ValidString(const std::string& s) {
  std::string field;
  {
    google::protobuf::io::StringOutputStream out(&field);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.WriteTag(1 << 3 | kLengthDelimited);
    coded.WriteVarint32(static_cast<uint32_t>(s.size()));
    coded.WriteRaw(s.data(), static_cast<int>(s.size()));
  }
  v1::ChunkData probe;
  return probe.ParseFromString(field);
}

bool ParseChunk(Cursor* in, ChunkView* c) {
  while (!in->AtEnd()) {
    uint32_t field;
    int wt;
    if (!ReadTag(in, &field, &wt)) return false;
    uint64_t v;
    size_t n;
    if (field == 1 && wt == kLengthDelimited) {
      if (!ReadLength(in, &n) || !in->ReadString(n, &c->tensor)) return false;
      if (!ValidString(c->tensor)) return false;
    } else if (field == 2 && wt == kVarint) {
      if (!in->ReadVarint(&v)) return false;
      c->index = static_cast<uint32_t>(v);
    } else if (field == 3 && wt == kVarint) {
      if (!in->ReadVarint(&v)) return false;
      c->dtype = static_cast<int>(static_cast<int32_t>(v));
    } else if (field == 4 && wt == kVarint) {
      if (!in->ReadVarint(&v)) return false;
      c->shape.push_back(static_cast<int64_t>(v));
    } else if (field == 4 && wt == kLengthDelimited) {  // packed
      size_t old;
      if (!ReadLength(in, &n) || !in->PushLimit(n, &old)) return false;
      while (!in->AtEnd()) {
        if (!in->ReadVarint(&v)) return false;
        c->shape.push_back(static_cast<int64_t>(v));
      }
      in->PopLimit(old);
    } else if (field == 5 && wt == kLengthDelimited) {
      if (!ReadLength(in, &n)) return false;
      c->data.clear();  // the last occurrence wins
      if (!in->ReadPieces(n, &c->data)) return false;
      c->data_size = n;
    } else if (wt == kEndGroup || !SkipField(in, field, wt, 1)) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status ParsePushFrame(absl::Span<const absl::string_view> pieces,
                            PushFrameView* out) {
  *out = PushFrameView();
  Cursor in(pieces);
  const absl::Status bad(absl::StatusCode::kInvalidArgument,
                         "not a valid PushRequest");
  while (!in.AtEnd()) {
    uint32_t field;
    int wt;
    if (!ReadTag(&in, &field, &wt)) return bad;
    size_t n;
    if (field == 1 && wt == kLengthDelimited) {
      std::string bytes;
      if (!ReadLength(&in, &n) || !in.ReadString(n, &bytes)) return bad;
      // Repeated occurrences of a message field are parsed into the same
      // message, as protobuf does (a later explicit 0 overwrites, unlike
      // MergeFrom of a parsed part).
      if (!out->header.MergeFromString(bytes)) return bad;
      out->has_header = true;
    } else if (field == 2 && wt == kLengthDelimited) {
      size_t old;
      if (!ReadLength(&in, &n) || !in.PushLimit(n, &old)) return bad;
      out->chunks.emplace_back();
      if (!ParseChunk(&in, &out->chunks.back())) return bad;
      in.PopLimit(old);
    } else if (wt == kEndGroup || !SkipField(&in, field, wt, 0)) {
      return bad;
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
