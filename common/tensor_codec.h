// Encoding dense fp32 chunks as raw little-endian bytes, and checking them.
#ifndef PSTRAIN_COMMON_TENSOR_CODEC_H_
#define PSTRAIN_COMMON_TENSOR_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// Fills `out` with `n` floats from `values` (dtype F32, shape [n]).
void EncodeChunk(const std::string& tensor, uint32_t index, const float* values,
                 uint64_t n, pstrain::v1::ChunkData* out);

// Checks that `chunk` is an fp32 payload of exactly `expected_len` elements
// (dtype, shape and byte size all agree) and, when `require_finite`, that no
// value is NaN or Inf (INVALID_ARGUMENT naming the tensor, chunk and element).
// Copies nothing.
absl::Status CheckChunk(const pstrain::v1::ChunkData& chunk,
                        uint64_t expected_len, bool require_finite);

// CheckChunk, then copies the `expected_len` floats to `out`. Writes nothing
// to `out` on error.
absl::Status DecodeChunk(const pstrain::v1::ChunkData& chunk,
                         uint64_t expected_len, bool require_finite,
                         float* out);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TENSOR_CODEC_H_
