#include "common/tensor_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "common/client_text.h"
#include "common/low_precision.h"

namespace pstrain {

using pstrain::v1::DType;

#if !defined(ABSL_IS_LITTLE_ENDIAN)
#error \
    "pstrain's wire format is little-endian; big-endian hosts need byte swaps"
#endif

namespace {

// Elements converted per block (a few KiB on the stack).
constexpr uint64_t kBlock = 1024;

float DecodeOne(DType dtype, const char* p, uint64_t i) {
  if (dtype == pstrain::v1::DTYPE_F32) {
    float v;
    std::memcpy(&v, p + i * sizeof(float), sizeof(v));
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p + i * sizeof(h), sizeof(h));
  return dtype == pstrain::v1::DTYPE_BF16 ? Bf16ToFloat(h) : F16ToFloat(h);
}

// True if any of the n elements at p has an all-ones exponent (NaN or Inf).
// The branch-free OR over blocks vectorises.
template <typename Bits>
bool AnyNonFinite(const char* p, uint64_t n, Bits exponent) {
  for (uint64_t i = 0; i < n; i += kBlock) {
    const uint64_t end = std::min<uint64_t>(n, i + kBlock);
    uint32_t any = 0;
    for (uint64_t j = i; j < end; ++j) {
      Bits bits;
      std::memcpy(&bits, p + j * sizeof(Bits), sizeof(bits));
      any |= static_cast<uint32_t>((bits & exponent) == exponent);
    }
    if (any != 0) return true;
  }
  return false;
}

}  // namespace

std::string DtypeName(DType dtype) {
  return pstrain::v1::DType_IsValid(dtype)
             ? pstrain::v1::DType_Name(dtype)
             : absl::StrCat(static_cast<int>(dtype));
}

bool IsWireDtype(DType dtype) { return WireElementBytes(dtype) != 0; }

uint64_t WireElementBytes(DType dtype) {
  switch (dtype) {
    case pstrain::v1::DTYPE_F32:
      return 4;
    case pstrain::v1::DTYPE_BF16:
    case pstrain::v1::DTYPE_F16:
      return 2;
    default:
      return 0;
  }
}

void EncodeChunk(const std::string& tensor, uint32_t index, const float* values,
                 uint64_t n, pstrain::v1::ChunkData* out, DType dtype) {
  if (!IsWireDtype(dtype)) dtype = pstrain::v1::DTYPE_F32;
  out->set_tensor(tensor);
  out->set_index(index);
  out->set_dtype(dtype);
  out->clear_shape();
  out->add_shape(static_cast<int64_t>(n));
  if (dtype == pstrain::v1::DTYPE_F32) {
    out->mutable_data()->assign(reinterpret_cast<const char*>(values),
                                n * sizeof(float));
    return;
  }
  std::string* data = out->mutable_data();
  data->resize(n * sizeof(uint16_t));
  uint16_t block[kBlock];
  uint64_t saturated = 0;
  for (uint64_t i = 0; i < n; i += kBlock) {
    const uint64_t m = std::min<uint64_t>(kBlock, n - i);
    if (dtype == pstrain::v1::DTYPE_BF16) {
      FloatsToBf16(values + i, m, block);
    } else {
      saturated += FloatsToF16(values + i, m, block);
    }
    std::memcpy(&(*data)[i * sizeof(uint16_t)], block, m * sizeof(uint16_t));
  }
  NoteF16Saturation(tensor, saturated);
}

ChunkFields FieldsOf(const pstrain::v1::ChunkData& chunk) {
  ChunkFields f;
  f.tensor = chunk.tensor();
  f.index = chunk.index();
  f.dtype = chunk.dtype();
  f.shape = absl::MakeConstSpan(chunk.shape().data(), chunk.shape_size());
  f.data = chunk.data().data();
  f.data_size = chunk.data().size();
  return f;
}

absl::Status CheckChunk(const pstrain::v1::ChunkData& chunk,
                        uint64_t expected_len, bool require_finite,
                        DType dtype) {
  return CheckChunk(FieldsOf(chunk), expected_len, require_finite, dtype);
}

absl::Status CheckChunk(const ChunkFields& chunk, uint64_t expected_len,
                        bool require_finite, DType dtype) {
  auto where = [&] {
    return absl::StrCat("tensor '", EchoClientText(chunk.tensor), "' chunk ",
                        chunk.index);
  };
  if (chunk.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": dtype ", DtypeName(static_cast<DType>(chunk.dtype)),
        " does not match the job's wire dtype ", pstrain::v1::DType_Name(dtype),
        " (network.wire_dtype)"));
  }
  const uint64_t element_bytes = WireElementBytes(dtype);
  if (element_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": dtype ", pstrain::v1::DType_Name(dtype),
                     " cannot travel on the wire"));
  }
  if (chunk.shape.size() != 1 ||
      static_cast<uint64_t>(chunk.shape[0]) != expected_len) {
    // At most 8 dimensions are quoted: a hostile shape list of 100,000
    // entries must not make an error too large for gRPC's metadata.
    std::string got;
    for (size_t i = 0; i < chunk.shape.size() && i < 8; ++i) {
      absl::StrAppend(&got, i == 0 ? "" : ",", chunk.shape[i]);
    }
    if (chunk.shape.size() > 8) {
      absl::StrAppend(&got, ",...(", chunk.shape.size(), " dimensions)");
    }
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": shape [", got, "] does not match [", expected_len, "]"));
  }
  if (chunk.data_size != expected_len * element_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": ", chunk.data_size, " bytes for ", expected_len, " ",
        pstrain::v1::DType_Name(dtype), " elements"));
  }
  if (require_finite) {
    // A value is NaN or Inf exactly when its exponent bits are all ones; the
    // slow path finds the element.
    const char* p = chunk.data;
    bool bad;
    switch (dtype) {
      case pstrain::v1::DTYPE_BF16:
        bad = AnyNonFinite<uint16_t>(p, expected_len, 0x7f80);
        break;
      case pstrain::v1::DTYPE_F16:
        bad = AnyNonFinite<uint16_t>(p, expected_len, 0x7c00);
        break;
      default:
        bad = AnyNonFinite<uint32_t>(p, expected_len, 0x7f800000u);
    }
    if (bad) {
      for (uint64_t i = 0; i < expected_len; ++i) {
        const float v = DecodeOne(dtype, p, i);
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
                         uint64_t expected_len, bool require_finite, float* out,
                         DType dtype) {
  const absl::Status st =
      CheckChunk(chunk, expected_len, require_finite, dtype);
  if (!st.ok()) return st;
  DecodeElements(dtype, chunk.data().data(), expected_len, out);
  return absl::OkStatus();
}

void DecodeElements(DType dtype, const char* src, uint64_t n, float* out) {
  if (dtype == pstrain::v1::DTYPE_F32) {
    std::memcpy(out, src, n * sizeof(float));
    return;
  }
  uint16_t block[kBlock];
  for (uint64_t i = 0; i < n; i += kBlock) {
    const uint64_t m = std::min<uint64_t>(kBlock, n - i);
    std::memcpy(block, src + i * sizeof(uint16_t), m * sizeof(uint16_t));
    if (dtype == pstrain::v1::DTYPE_BF16) {
      Bf16ToFloats(block, m, out + i);
    } else {
      F16ToFloats(block, m, out + i);
    }
  }
}

void RoundToWire(DType dtype, float* values, uint64_t n) {
  if (dtype != pstrain::v1::DTYPE_BF16 && dtype != pstrain::v1::DTYPE_F16) {
    return;
  }
  uint16_t block[kBlock];
  for (uint64_t i = 0; i < n; i += kBlock) {
    const uint64_t m = std::min<uint64_t>(kBlock, n - i);
    if (dtype == pstrain::v1::DTYPE_BF16) {
      FloatsToBf16(values + i, m, block);
      Bf16ToFloats(block, m, values + i);
    } else {
      // Saturates as the encode of what is sent does (which counts it).
      FloatsToF16(values + i, m, block);
      F16ToFloats(block, m, values + i);
    }
  }
}

}  // namespace pstrain
