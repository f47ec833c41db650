#include "common/sparse_rows.h"

#include <algorithm>
#include <cstring>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "common/client_text.h"
#include "common/low_precision.h"
#include "common/sharding.h"
#include "common/tensor_codec.h"

namespace pstrain {

#if !defined(ABSL_IS_LITTLE_ENDIAN)
#error "pstrain's wire format is little-endian"
#endif

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint32_t RowShard(int64_t row, uint32_t num_shards) {
  if (num_shards <= 1) return 0;
  return static_cast<uint32_t>(SplitMix64(static_cast<uint64_t>(row)) %
                               num_shards);
}

absl::StatusOr<TableShape> RowSparseShape(const pstrain::v1::TensorSpec& spec) {
  if (spec.shape_size() != 2 || spec.shape(0) < 1 || spec.shape(1) < 1) {
    std::string got;
    for (int i = 0; i < spec.shape_size() && i < 8; ++i) {
      absl::StrAppend(&got, i == 0 ? "" : ",", spec.shape(i));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("row-sparse tensor '", EchoClientText(spec.name()),
                     "': shape [", got, "] is not [rows >= 1, dim >= 1]"));
  }
  return TableShape{spec.shape(0), spec.shape(1)};
}

void AppendRowIds(absl::Span<const int64_t> ids, std::string* out) {
  const size_t at = out->size();
  out->resize(at + ids.size() * sizeof(int64_t));
  if (!ids.empty()) {
    std::memcpy(&(*out)[at], ids.data(), ids.size() * sizeof(int64_t));
  }
}

absl::StatusOr<std::vector<int64_t>> DecodeRowIds(const std::string& bytes,
                                                  const std::string& tensor) {
  if (bytes.size() % sizeof(int64_t) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", EchoClientText(tensor), "': ", bytes.size(),
                     " bytes of row ids is not a multiple of 8"));
  }
  std::vector<int64_t> ids(bytes.size() / sizeof(int64_t));
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), bytes.size());
  return ids;
}

void AppendRowValues(const float* values, uint64_t n, pstrain::v1::DType dtype,
                     const std::string& tensor, std::string* out) {
  if (n == 0) return;
  pstrain::v1::ChunkData chunk;
  EncodeChunk(tensor, 0, values, n, &chunk, dtype);
  out->append(chunk.data());
}

uint64_t RowsPerMessage(uint64_t dim, pstrain::v1::DType dtype,
                        bool with_values) {
  uint64_t per_row = sizeof(int64_t);
  if (with_values)
    per_row += dim * std::max<uint64_t>(WireElementBytes(dtype), 4);
  return std::max<uint64_t>(1, kMaxMessagePayloadBytes / per_row);
}

}  // namespace pstrain
