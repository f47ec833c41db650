// One element of a step's only gradient term, held as the float it arrived
// as and given back as the fixed-point sum would (server/shard.h: one
// worker's term applied on arrival). One definition, so that the server's
// conversion kernel (server/fixed_point_kernels.cc, HeldToFloat) and the
// rules' one-pass loops (common/optimizer.cc, Optimizer::ApplyHeld) give the
// same float bit for bit.
#ifndef PSTRAIN_COMMON_HELD_TERM_H_
#define PSTRAIN_COMMON_HELD_TERM_H_

#include <cfloat>
#include <cmath>

namespace pstrain {

// 1.5 * 2^52: adding it to a double below 2^51 in magnitude rounds the
// double to an integer (to nearest, ties to even); subtracting it again
// gives that integer exactly.
inline constexpr double kRoundToIntegerMagic = 6755399441055744.0;

// float(double(round(n * x * to_fixed)) * scale): the term n * x on the
// accumulator's grid (to_fixed = 2^-lsb), back in float units with `scale`
// = from_fixed / samples. Needs |n * x * to_fixed| < 2^51.
inline __attribute__((always_inline)) float HeldTermElement(float x, double n,
                                                            double to_fixed,
                                                            double scale) {
  const double r = n * static_cast<double>(x) * to_fixed + kRoundToIntegerMagic;
  return static_cast<float>((r - kRoundToIntegerMagic) * scale);
}

// HeldTermElement in float arithmetic, for when `n` and `to_fixed` are
// powers of two and n * to_fixed and `scale` are normal floats
// (HeldTermInFloats says so and gives them as `k` and `scale`): the same float
// bit for bit, with half the vector lanes' work (no conversions to double and
// back). Why the bits are the same, under the same |n * x * to_fixed| < 2^51:
// - x * k is exact in float (x times a power of two) unless it falls below
//   the normal range, and then both forms round it to 0.
// - nearbyint (to nearest, ties to even: the default rounding mode) gives
//   the integer the magic-number addition gives, and it is a float exactly
//   (from 2^23 on x * k is an integer already).
// - Adding +0 turns -0 into +0, as (r - magic) does for every term that
//   rounds to 0.
// - That integer (24 significant bits at most) times `scale` (24 bits) is
//   exact in double, so both forms round the same exact product once to
//   float.
inline __attribute__((always_inline)) float HeldTermElementInFloats(
    float x, float k, float scale) {
  return (std::nearbyint(x * k) + 0.0f) * scale;
}

// Whether HeldTermElementInFloats(x, *k, *scale_f) is HeldTermElement(x, n,
// to_fixed, scale) for every x; if so, *k = n * to_fixed and *scale_f =
// scale as floats.
inline bool HeldTermInFloats(double n, double to_fixed, double scale, float* k,
                             float* scale_f) {
  auto normal_float = [](double v) {
    return v >= static_cast<double>(FLT_MIN) &&
           v <= static_cast<double>(FLT_MAX) &&
           static_cast<double>(static_cast<float>(v)) == v;
  };
  auto power_of_two = [](double v) {
    int e = 0;
    return std::frexp(v, &e) == 0.5;
  };
  const double kd = n * to_fixed;
  if (!power_of_two(n) || !power_of_two(to_fixed) || !normal_float(kd) ||
      !normal_float(scale)) {
    return false;
  }
  *k = static_cast<float>(kd);
  *scale_f = static_cast<float>(scale);
  return true;
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_HELD_TERM_H_
