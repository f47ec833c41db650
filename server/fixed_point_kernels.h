// The shard's fixed-point kernels (server/shard.h, "Summing on arrival"):
// the loops that find a chunk's largest |g|, add n * g * 2^-L rounded to an
// int64 accumulator, and turn the accumulator back into floats.
//
// The fast paths are bit-identical to the scalar std::llrint and int64 ->
// double conversions they replace where they apply: for |y| < 2^51,
// y + 1.5 * 2^52 lies in [2^52, 2^53), where doubles are the integers, so
// the addition rounds y to the nearest integer (ties to even, as llrint in
// the default rounding mode), and the bits of the sum minus those of
// 1.5 * 2^52 are that integer; the reverse turns an int64 below 2^51 in
// magnitude into its exact double. Unlike the scalar conversions they
// vectorise. Each kernel is built twice, for AVX2 and for the baseline ISA,
// from one body; the free functions pick AVX2 at run time when the CPU has it
// (a plain check, not an ifunc: ifunc resolvers run before the sanitizers'
// runtimes are up). Both builds give the same bits (fixed_point_kernels_test).
//
// Stateless and thread-safe; every pointer argument must hold `len`
// elements and may be unaligned (src and dst are bytes of little-endian
// floats, as in a ChunkData payload).
#ifndef PSTRAIN_SERVER_FIXED_POINT_KERNELS_H_
#define PSTRAIN_SERVER_FIXED_POINT_KERNELS_H_

#include <cstdint>

namespace pstrain {
namespace fixed_point {

// Terms and accumulators below this magnitude take the fast conversions.
constexpr double kFastLimit = 2251799813685248.0;  // 2^51
// MaxAbsBits at or above this: a NaN or an Inf was among the floats.
constexpr uint32_t kNonFiniteBits = 0x7f800000u;

// The bits of the largest |g| of the `len` floats at `src` (the magnitudes'
// bits order as the magnitudes do). With `dst`, the floats are also copied
// there in the same pass.
uint32_t MaxAbsBits(const char* src, uint64_t len, char* dst = nullptr);

// acc[i] += llrint(n * g[i] * to_fixed), for terms known below kFastLimit
// in magnitude (a larger term gives a wrong sum, not an error).
void AddFixedFast(const char* src, uint64_t len, double n, double to_fixed,
                  int64_t* acc);

// True if every acc[i] is below 2^51 in magnitude.
bool FixedFitsFast(const int64_t* acc, uint64_t len);

// g[i] = float(double(acc[i]) * from_fixed / samples), then acc[i] = 0.
// `fast` (the fast conversion) needs FixedFitsFast(acc, len). When `samples`
// is a power of two and from_fixed / samples a normal double, the divide is
// a multiply by that quotient, bit for bit the same: y is an integer, so
// y * from_fixed (a power of two 2^L, normal) is exact and normal, and both
// sides are the same exact value rounded once.
void FixedToFloat(int64_t* acc, uint64_t len, double from_fixed, double samples,
                  bool fast, float* g);

// g[i] = float(double(fixed(n * src[i])) * from_fixed / samples) for a chunk
// whose only term of the step is the floats at `src`: AddFixedFast into a
// zero accumulator and FixedToFloat's fast case fused, the same operations
// on the same doubles, so the result is bit for bit theirs. Needs the terms
// known below kFastLimit.
void HeldToFloat(const char* src, uint64_t len, double n, double to_fixed,
                 double from_fixed, double samples, float* g);

// One build of every kernel, for tests and benchmarks that compare them.
struct Kernels {
  uint32_t (*max_abs_bits)(const char* src, uint64_t len, char* dst);
  void (*add_fixed_fast)(const char* src, uint64_t len, double n,
                         double to_fixed, int64_t* acc);
  bool (*fixed_fits_fast)(const int64_t* acc, uint64_t len);
  void (*fixed_to_float)(int64_t* acc, uint64_t len, double from_fixed,
                         double samples, bool fast, float* g);
  void (*held_to_float)(const char* src, uint64_t len, double n,
                        double to_fixed, double from_fixed, double samples,
                        float* g);
};

// Whether this CPU runs the AVX2 / AVX-512 build (common/cpu_features.h:
// PSTRAIN_MAX_CPU_ISA can cap it).
bool HasAvx2();
bool HasAvx512();
// The baseline build (always runnable).
const Kernels& BaselineKernels();
// The AVX2 build; only to be called when HasAvx2().
const Kernels& Avx2Kernels();
// The AVX-512 build; only to be called when HasAvx512().
const Kernels& Avx512Kernels();
// The build the free functions above use: the widest this CPU runs.
const Kernels& ChosenKernels();

}  // namespace fixed_point
}  // namespace pstrain

#endif  // PSTRAIN_SERVER_FIXED_POINT_KERNELS_H_
