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
// kept); +-inf stays +-inf (non-finite values are refused where they must
// be, e.g. a pushed gradient). fp16 SATURATES: a finite fp32 value beyond
// the fp16 range (|x| >= 65520, where rounding would reach infinity)
// becomes +-65504, never +-inf, so a finite weight or gradient stays finite
// on the wire; FloatsToF16 counts such values, and the encoders of chunks
// (tensor_codec, chunk_frames) report them through NoteF16Saturation. bf16
// rounds to +-inf past its largest finite value, as IEEE rounding does
// (only fp32 values within half a bf16 ulp of FLT_MAX). Values below half
// of the smallest fp16 subnormal become +-0; subnormal results are exact
// roundings. Decoding is exact (every bf16 and fp16 value is an fp32 value).
//
// Bits are host integers; callers store them little-endian (tensor_codec).
// Thread-safe: the conversions are pure functions; the saturation count is
// an atomic.
#ifndef PSTRAIN_COMMON_LOW_PRECISION_H_
#define PSTRAIN_COMMON_LOW_PRECISION_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace pstrain {

// fp16's largest finite value, what FloatToF16 saturates to.
inline constexpr float kF16Max = 65504.0f;

uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToF16(float f);  // saturating, see above
float F16ToFloat(uint16_t h);

// Element-wise over n values; `in` and `out` must not overlap.
void FloatsToBf16(const float* in, size_t n, uint16_t* out);
void Bf16ToFloats(const uint16_t* in, size_t n, float* out);
// Returns how many of the values were finite and beyond the fp16 range
// (|x| >= 65520), i.e. saturated to +-65504.
size_t FloatsToF16(const float* in, size_t n, uint16_t* out);
void F16ToFloats(const uint16_t* in, size_t n, float* out);

// Saturated values are logged on the first and then at most once per this
// many (process-wide).
inline constexpr uint64_t kF16SaturationLogEvery = uint64_t{1} << 16;

// Records that `count` values of `tensor` (a name for the log; may be
// empty) saturated in an fp16 encode: adds them to the process-wide count
// and logs a warning naming the tensor (common/logging) when the count
// first becomes non-zero and each time it passes a multiple of
// kF16SaturationLogEvery. No-op for count 0.
void NoteF16Saturation(absl::string_view tensor, uint64_t count);

// Values saturated so far in this process (NoteF16Saturation).
uint64_t F16SaturationCount();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_LOW_PRECISION_H_
