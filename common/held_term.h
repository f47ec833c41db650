// One element of a step's only gradient term, held as the float it arrived
// as and given back as the fixed-point sum would (server/shard.h: one
// worker's term applied on arrival). One definition, so that the server's
// conversion kernel (server/fixed_point_kernels.cc, HeldToFloat) and the
// rules' one-pass loops (common/optimizer.cc, Optimizer::ApplyHeld) give the
// same float bit for bit.
#ifndef PSTRAIN_COMMON_HELD_TERM_H_
#define PSTRAIN_COMMON_HELD_TERM_H_

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

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_HELD_TERM_H_
