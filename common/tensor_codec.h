// Encoding dense chunks as raw little-endian bytes, and checking them.
//
// Values are fp32 on both ends; on the wire they are fp32, bf16 or fp16
// (network.wire_dtype, common/low_precision.h: round to nearest even on
// encode, fp16 saturating at +-65504, exact decode).
#ifndef PSTRAIN_COMMON_TENSOR_CODEC_H_
#define PSTRAIN_COMMON_TENSOR_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// True for the dtypes a chunk may travel in: DTYPE_F32, DTYPE_BF16,
// DTYPE_F16.
bool IsWireDtype(pstrain::v1::DType dtype);

// "DTYPE_BF16", or the number of a value outside the enum ("42").
std::string DtypeName(pstrain::v1::DType dtype);

// Bytes per element on the wire: 4 for DTYPE_F32, 2 for DTYPE_BF16 and
// DTYPE_F16, 0 for anything else.
uint64_t WireElementBytes(pstrain::v1::DType dtype);

// Fills `out` with `n` floats from `values`, shape [n], converted to `dtype`
// (a wire dtype, else DTYPE_F32 is used). fp16 values beyond its range are
// saturated and reported (NoteF16Saturation, naming `tensor`).
void EncodeChunk(const std::string& tensor, uint32_t index, const float* values,
                 uint64_t n, pstrain::v1::ChunkData* out,
                 pstrain::v1::DType dtype = pstrain::v1::DTYPE_F32);

// Checks that `chunk` is a payload of exactly `expected_len` elements in
// `dtype` (dtype, shape and byte size all agree) and, when
// `require_finite`, that no value is NaN or Inf (INVALID_ARGUMENT naming the
// tensor, chunk and element; a wrong dtype names both dtypes). Copies nothing.
absl::Status CheckChunk(const pstrain::v1::ChunkData& chunk,
                        uint64_t expected_len, bool require_finite,
                        pstrain::v1::DType dtype = pstrain::v1::DTYPE_F32);

// What CheckChunk reads of a chunk, wherever its fields lie (a ChunkData, or
// a frame parsed in place: server/push_frame.h). `data` may be null when
// only the layout is checked (require_finite false); `data_size` is the
// payload's byte size either way.
struct ChunkFields {
  absl::string_view tensor;
  uint32_t index = 0;
  int dtype = 0;  // v1::DType, open enum as in proto3
  absl::Span<const int64_t> shape;
  const char* data = nullptr;
  uint64_t data_size = 0;
};
ChunkFields FieldsOf(const pstrain::v1::ChunkData& chunk);
// CheckChunk of those fields: the same checks and messages.
absl::Status CheckChunk(const ChunkFields& chunk, uint64_t expected_len,
                        bool require_finite,
                        pstrain::v1::DType dtype = pstrain::v1::DTYPE_F32);

// CheckChunk, then decodes the `expected_len` values to fp32 in `out`.
// Writes nothing to `out` on error.
absl::Status DecodeChunk(const pstrain::v1::ChunkData& chunk,
                         uint64_t expected_len, bool require_finite, float* out,
                         pstrain::v1::DType dtype = pstrain::v1::DTYPE_F32);

// Decodes `n` elements of wire dtype `dtype` at `src` (n *
// WireElementBytes(dtype) bytes, any alignment) to fp32. For payloads that
// CheckChunk accepted.
void DecodeElements(pstrain::v1::DType dtype, const char* src, uint64_t n,
                    float* out);

// Rounds `n` values in place to what `dtype` can carry (encode, then
// decode): what the other end of the wire sees (fp16 saturated, not
// reported: this mirrors an encode that reports). A no-op for DTYPE_F32.
void RoundToWire(pstrain::v1::DType dtype, float* values, uint64_t n);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TENSOR_CODEC_H_
