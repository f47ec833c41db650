#include "common/tensor_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "common/client_text.h"

namespace pstrain {

#if !defined(ABSL_IS_LITTLE_ENDIAN)
#error \
    "pstrain's wire format is little-endian; big-endian hosts need byte swaps"
#endif

void EncodeChunk(const std::string& tensor, uint32_t index, const float* values,
                 uint64_t n, pstrain::v1::ChunkData* out) {
  out->set_tensor(tensor);
  out->set_index(index);
  out->set_dtype(pstrain::v1::DTYPE_F32);
  out->clear_shape();
  out->add_shape(static_cast<int64_t>(n));
  out->mutable_data()->assign(reinterpret_cast<const char*>(values),
                              n * sizeof(float));
}

absl::Status CheckChunk(const pstrain::v1::ChunkData& chunk,
                        uint64_t expected_len, bool require_finite) {
  auto where = [&] {
    return absl::StrCat("tensor '", EchoClientText(chunk.tensor()), "' chunk ",
                        chunk.index());
  };
  if (chunk.dtype() != pstrain::v1::DTYPE_F32) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": dtype ", pstrain::v1::DType_Name(chunk.dtype()),
        " is not supported (servers hold DTYPE_F32)"));
  }
  if (chunk.shape_size() != 1 ||
      static_cast<uint64_t>(chunk.shape(0)) != expected_len) {
    std::string got;
    for (int64_t d : chunk.shape())
      absl::StrAppend(&got, got.empty() ? "" : ",", d);
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": shape [", got, "] does not match [", expected_len, "]"));
  }
  if (chunk.data().size() != expected_len * sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": ", chunk.data().size(), " bytes for ",
                     expected_len, " fp32 elements"));
  }
  if (require_finite) {
    // A float is NaN or Inf exactly when its exponent bits are all ones. The
    // branch-free OR over blocks vectorises; the slow path finds the element.
    constexpr uint32_t kExponent = 0x7f800000u;
    const char* p = chunk.data().data();
    bool bad = false;
    for (uint64_t i = 0; i < expected_len && !bad; i += 1024) {
      const uint64_t end = std::min<uint64_t>(expected_len, i + 1024);
      uint32_t any = 0;
      for (uint64_t j = i; j < end; ++j) {
        uint32_t bits;
        std::memcpy(&bits, p + j * sizeof(float), sizeof(bits));
        any |= static_cast<uint32_t>((bits & kExponent) == kExponent);
      }
      bad = any != 0;
    }
    if (bad) {
      for (uint64_t i = 0; i < expected_len; ++i) {
        float v;
        std::memcpy(&v, p + i * sizeof(float), sizeof(float));
        if (!std::isfinite(v)) {
          return absl::InvalidArgumentError(absl::StrCat(
              where(), ": element ", i, " is not finite (", v, ")"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeChunk(const pstrain::v1::ChunkData& chunk,
                         uint64_t expected_len, bool require_finite,
                         float* out) {
  const absl::Status st = CheckChunk(chunk, expected_len, require_finite);
  if (!st.ok()) return st;
  std::memcpy(out, chunk.data().data(), expected_len * sizeof(float));
  return absl::OkStatus();
}

}  // namespace pstrain
