// The bytes of one ring segment as they arrived, without copying them: one
// or more pieces (over gRPC, the slices of the received message), kept alive
// by an owner; and the two ways a rank folds a segment into its vector.
#ifndef PSTRAIN_WORKER_ALLREDUCE_SEGMENT_PAYLOAD_H_
#define PSTRAIN_WORKER_ALLREDUCE_SEGMENT_PAYLOAD_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// Little-endian values of `dtype` (fp32, or bf16 on a 16-bit ring wire),
// split anywhere (even inside a value) into pieces that stay valid as long
// as `owner` lives. Movable; not copied.
struct SegmentPayload {
  std::shared_ptr<const void> owner;
  absl::InlinedVector<absl::string_view, 4> pieces;
  pstrain::v1::DType dtype = pstrain::v1::DTYPE_F32;

  size_t size() const;  // bytes over all pieces

  // One piece owning `bytes` (tests, the in-memory transport).
  static SegmentPayload FromString(std::string bytes);
};

// How a received segment meets the rank's own values.
enum class Combine {
  kCopy,  // all-gather: out[i] = theirs[i]
  kAdd,   // reduce-scatter: out[i] = theirs[i] + out[i]
};

// The ring's wire dtypes: DTYPE_F32 and DTYPE_BF16.
bool IsRingWireDtype(pstrain::v1::DType dtype);
// Bytes of `n` elements of ring wire dtype `dtype` (4 or 2 each).
size_t RingWireBytes(pstrain::v1::DType dtype, size_t n);
// Writes `data` as RingWireBytes(dtype, data.size()) little-endian bytes of
// `dtype` at `out` (bf16: rounded to nearest even, common/low_precision.h).
// Requires IsRingWireDtype(dtype).
void EncodeRingWire(absl::Span<const float> data, pstrain::v1::DType dtype,
                    char* out);

// Folds `payload` into `out` as `how` says, straight from its pieces (no
// intermediate copy; bf16 values are decoded exactly to fp32 first).
// Requires IsRingWireDtype(payload.dtype) and
// payload.size() == RingWireBytes(payload.dtype, out.size()).
void CombineInto(const SegmentPayload& payload, Combine how,
                 absl::Span<float> out);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_SEGMENT_PAYLOAD_H_
