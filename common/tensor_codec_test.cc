#include "common/tensor_codec.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/low_precision.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using pstrain::v1::ChunkData;
using pstrain::v1::DType;

const std::vector<float> kValues = {0.0f,    -1.0f,  1.00390625f, 3.14159f,
                                    1e-7f,   -2e-5f, 65504.0f,    -123.456f,
                                    0.3333f, 1e-40f};

TEST(TensorCodecTest, WireSizes) {
  EXPECT_EQ(WireElementBytes(pstrain::v1::DTYPE_F32), 4u);
  EXPECT_EQ(WireElementBytes(pstrain::v1::DTYPE_BF16), 2u);
  EXPECT_EQ(WireElementBytes(pstrain::v1::DTYPE_F16), 2u);
  EXPECT_EQ(WireElementBytes(pstrain::v1::DTYPE_UNSPECIFIED), 0u);
  EXPECT_FALSE(IsWireDtype(pstrain::v1::DTYPE_UNSPECIFIED));
}

class CodecRoundTrip : public testing::TestWithParam<DType> {};

TEST_P(CodecRoundTrip, DecodeGivesTheRoundedValues) {
  const DType dtype = GetParam();
  // More than one conversion block, so the block loop is covered.
  std::vector<float> values;
  for (int i = 0; i < 2500; ++i) values.push_back(kValues[i % kValues.size()]);
  ChunkData chunk;
  EncodeChunk("w", 3, values.data(), values.size(), &chunk, dtype);
  EXPECT_EQ(chunk.dtype(), dtype);
  EXPECT_EQ(chunk.data().size(), values.size() * WireElementBytes(dtype));
  std::vector<float> rounded = values;
  RoundToWire(dtype, rounded.data(), rounded.size());
  std::vector<float> out(values.size(), -7.0f);
  ASSERT_TRUE(DecodeChunk(chunk, values.size(), /*require_finite=*/true,
                          out.data(), dtype)
                  .ok());
  for (size_t i = 0; i < values.size(); ++i) {
    const float want =
        dtype == pstrain::v1::DTYPE_BF16  ? Bf16ToFloat(FloatToBf16(values[i]))
        : dtype == pstrain::v1::DTYPE_F16 ? F16ToFloat(FloatToF16(values[i]))
                                          : values[i];
    EXPECT_EQ(out[i], want) << i;
    EXPECT_EQ(rounded[i], want) << i;
  }
}

TEST_P(CodecRoundTrip, WrongDtypeIsRejectedAndNothingWritten) {
  const DType dtype = GetParam();
  const DType other = dtype == pstrain::v1::DTYPE_F32 ? pstrain::v1::DTYPE_BF16
                                                      : pstrain::v1::DTYPE_F32;
  ChunkData chunk;
  EncodeChunk("w", 0, kValues.data(), kValues.size(), &chunk, other);
  std::vector<float> out(kValues.size(), -7.0f);
  const absl::Status st =
      DecodeChunk(chunk, kValues.size(), false, out.data(), dtype);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("does not match the job's wire dtype " +
                              pstrain::v1::DType_Name(dtype)),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find(pstrain::v1::DType_Name(other)),
            std::string::npos)
      << st;
  for (float v : out) EXPECT_EQ(v, -7.0f);
}

TEST_P(CodecRoundTrip, ByteCountIsChecked) {
  const DType dtype = GetParam();
  ChunkData chunk;
  EncodeChunk("w", 0, kValues.data(), kValues.size(), &chunk, dtype);
  chunk.mutable_data()->push_back('\0');
  const absl::Status st = CheckChunk(chunk, kValues.size(), false, dtype);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bytes for"), std::string::npos) << st;
}

TEST_P(CodecRoundTrip, NonFiniteIsFoundByElement) {
  const DType dtype = GetParam();
  for (float bad : {std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> values(3000, 0.5f);
    values[2047] = bad;
    ChunkData chunk;
    EncodeChunk("w", 0, values.data(), values.size(), &chunk, dtype);
    const absl::Status st = CheckChunk(chunk, values.size(), true, dtype);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("element 2047 is not finite"),
              std::string::npos)
        << st;
    EXPECT_TRUE(CheckChunk(chunk, values.size(), false, dtype).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CodecRoundTrip,
                         testing::Values(pstrain::v1::DTYPE_F32,
                                         pstrain::v1::DTYPE_BF16,
                                         pstrain::v1::DTYPE_F16),
                         [](const testing::TestParamInfo<DType>& info) {
                           return pstrain::v1::DType_Name(info.param);
                         });

TEST(TensorCodecTest, Fp16BeyondItsRangeSaturatesAndIsCounted) {
  // A finite value beyond fp16's range is sent as +-65504, never +-inf, and
  // counted (docs/architecture.md, "Low-precision wire"); RoundToWire, the
  // shard's model of what a worker reads, rounds the same way without counting.
  const std::vector<float> values = {70000.0f, -131008.0f, 65519.0f, 1.5f};
  const uint64_t before = F16SaturationCount();
  ChunkData chunk;
  EncodeChunk("w", 0, values.data(), values.size(), &chunk,
              pstrain::v1::DTYPE_F16);
  EXPECT_EQ(F16SaturationCount(), before + 2);
  EXPECT_TRUE(
      CheckChunk(chunk, values.size(), true, pstrain::v1::DTYPE_F16).ok());
  std::vector<float> out(values.size());
  ASSERT_TRUE(DecodeChunk(chunk, values.size(), true, out.data(),
                          pstrain::v1::DTYPE_F16)
                  .ok());
  const std::vector<float> want = {65504.0f, -65504.0f, 65504.0f, 1.5f};
  EXPECT_EQ(out, want);
  std::vector<float> rounded = values;
  RoundToWire(pstrain::v1::DTYPE_F16, rounded.data(), rounded.size());
  EXPECT_EQ(rounded, want);
  EXPECT_EQ(F16SaturationCount(), before + 2);
}

TEST(TensorCodecTest, Fp16InfinityStaysInfiniteAndIsNotFinite) {
  // An infinite value stays infinite, which a shard rejects.
  const float inf = std::numeric_limits<float>::infinity();
  ChunkData chunk;
  EncodeChunk("w", 0, &inf, 1, &chunk, pstrain::v1::DTYPE_F16);
  EXPECT_FALSE(CheckChunk(chunk, 1, true, pstrain::v1::DTYPE_F16).ok());
  float out = 0;
  ASSERT_TRUE(DecodeChunk(chunk, 1, false, &out, pstrain::v1::DTYPE_F16).ok());
  EXPECT_TRUE(std::isinf(out));
}

TEST(TensorCodecTest, UnknownDtypeOnTheWireIsNamed) {
  ChunkData chunk;
  EncodeChunk("w", 0, kValues.data(), kValues.size(), &chunk);
  chunk.set_dtype(static_cast<DType>(42));
  const absl::Status st = CheckChunk(chunk, kValues.size(), false);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("dtype 42"), std::string::npos) << st;
}

// Issue 23, finding 6: a hostile shape list is not echoed whole (100,000
// entries made the error too large for gRPC's metadata: RESOURCE_EXHAUSTED
// instead of the INVALID_ARGUMENT the client should read).
TEST(TensorCodecTest, LongShapeListIsNotEchoedWhole) {
  ChunkData chunk;
  EncodeChunk("w", 0, kValues.data(), kValues.size(), &chunk);
  chunk.clear_shape();
  for (int i = 0; i < 100000; ++i) chunk.add_shape(123456789);
  const absl::Status st = CheckChunk(chunk, kValues.size(), false);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(st.message().size(), 300u) << st.message().substr(0, 300);
  EXPECT_NE(st.message().find("(100000 dimensions)"), std::string::npos)
      << st.message().substr(0, 300);
}

}  // namespace
}  // namespace pstrain
