// Conversions between fp32 and the two 16-bit wire formats
// (docs/architecture.md, "Low-precision wire"; network.wire_dtype):
//  * bf16 (bfloat16): fp32's sign and 8-bit exponent, 7 stored mantissa bits.
//    Same range as fp32; relative rounding error at most 2^-8 for normals.
//  * fp16 (IEEE 754 binary16): 5-bit exponent, 10 stored mantissa bits.
//    Largest finite 65504, smallest normal 2^-14, smallest subnormal 2^-24;
//    relative rounding error at most 2^-11 for normals.
//
// Encoding rounds to nearest, ties to even, in integer arithmetic (no
// dependence on the floating-point environment). NaN stays NaN (quiet, sign
// kept); +-inf stays +-inf; fp32 values beyond the fp16 range become +-inf
// (|x| >= 65520, the midpoint above 65504, ties to even); values below half
// of the smallest fp16 subnormal become +-0; subnormal results are exact
// roundings. Decoding is exact (every bf16 and fp16 value is an fp32 value).
//
// Bits are host integers; callers store them little-endian (tensor_codec).
// Thread-safe: pure functions.
#ifndef PSTRAIN_COMMON_LOW_PRECISION_H_
#define PSTRAIN_COMMON_LOW_PRECISION_H_

#include <cstddef>
#include <cstdint>

namespace pstrain {

uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToF16(float f);
float F16ToFloat(uint16_t h);

// Element-wise over n values; `in` and `out` must not overlap.
void FloatsToBf16(const float* in, size_t n, uint16_t* out);
void Bf16ToFloats(const uint16_t* in, size_t n, float* out);
void FloatsToF16(const float* in, size_t n, uint16_t* out);
void F16ToFloats(const uint16_t* in, size_t n, float* out);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_LOW_PRECISION_H_
