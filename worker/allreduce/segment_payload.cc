#include "worker/allreduce/segment_payload.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/low_precision.h"

namespace pstrain {

size_t SegmentPayload::size() const {
  size_t n = 0;
  for (absl::string_view p : pieces) n += p.size();
  return n;
}

SegmentPayload SegmentPayload::FromString(std::string bytes) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  SegmentPayload payload;
  if (!owned->empty()) payload.pieces.push_back(*owned);
  payload.owner = std::move(owned);
  return payload;
}

bool IsRingWireDtype(pstrain::v1::DType dtype) {
  return dtype == pstrain::v1::DTYPE_F32 || dtype == pstrain::v1::DTYPE_BF16;
}

size_t RingWireBytes(pstrain::v1::DType dtype, size_t n) {
  return n *
         (dtype == pstrain::v1::DTYPE_BF16 ? sizeof(uint16_t) : sizeof(float));
}

void EncodeRingWire(absl::Span<const float> data, pstrain::v1::DType dtype,
                    char* out) {
  if (dtype != pstrain::v1::DTYPE_BF16) {
    std::memcpy(out, data.data(), data.size() * sizeof(float));
    return;
  }
  // Little-endian host (x86, arm64): the uint16_t bits are the wire bytes.
  uint16_t buffer[512];
  for (size_t i = 0; i < data.size(); i += 512) {
    const size_t n = std::min<size_t>(512, data.size() - i);
    FloatsToBf16(data.data() + i, n, buffer);
    std::memcpy(out + i * sizeof(uint16_t), buffer, n * sizeof(uint16_t));
  }
}

namespace {

// out[i] = theirs[i] + out[i] for n floats at `bytes` (any alignment). The
// order of the operands is the ring's, so every rank's sum is bit-identical
// to the one before this transport (and to sync mode's, tests prove).
void AddFloats(const char* bytes, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float theirs;
    std::memcpy(&theirs, bytes + i * sizeof(float), sizeof(float));
    out[i] = theirs + out[i];
  }
}

void CopyFloats(const char* bytes, float* out, size_t n) {
  std::memcpy(out, bytes, n * sizeof(float));
}

// The same for bf16 values, decoded exactly to fp32 first, in blocks (the
// decode is common/low_precision's vectorised loop; the bytes may be
// unaligned, so they are copied into an aligned block first).
constexpr size_t kBlock = 1024;
void CopyBf16(const char* bytes, float* out, size_t n) {
  uint16_t h[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    std::memcpy(h, bytes + i * sizeof(uint16_t), m * sizeof(uint16_t));
    Bf16ToFloats(h, m, out + i);
  }
}
void AddBf16(const char* bytes, float* out, size_t n) {
  float theirs[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    CopyBf16(bytes + i * sizeof(uint16_t), theirs, m);
    for (size_t k = 0; k < m; ++k) out[i + k] = theirs[k] + out[i + k];
  }
}

}  // namespace

void CombineInto(const SegmentPayload& payload, Combine how,
                 absl::Span<float> out) {
  const bool bf16 = payload.dtype == pstrain::v1::DTYPE_BF16;
  const size_t e = bf16 ? sizeof(uint16_t) : sizeof(float);
  void (*fold)(const char*, float*, size_t) =
      how == Combine::kCopy ? (bf16 ? CopyBf16 : CopyFloats)
                            : (bf16 ? AddBf16 : AddFloats);
  // Pieces may end inside a value: its bytes wait in `partial`.
  char partial[sizeof(float)];
  size_t have = 0;  // bytes in `partial`
  float* o = out.data();
  for (absl::string_view p : payload.pieces) {
    const char* b = p.data();
    size_t left = p.size();
    if (have > 0) {
      const size_t take = std::min(e - have, left);
      std::memcpy(partial + have, b, take);
      have += take, b += take, left -= take;
      if (have < e) continue;
      fold(partial, o++, 1);
      have = 0;
    }
    const size_t whole = left / e;
    fold(b, o, whole);
    o += whole, b += whole * e, left -= whole * e;
    std::memcpy(partial, b, left);
    have = left;
  }
}

}  // namespace pstrain
