// The softmax cross-entropy of one row in float, as the CUDA kernel computes
// it (kernels.cu calls these functions; the CPU test checks them against a
// double reference, softmax_formula_test.cc).
//
// With m = z[a] the row's maximum (a its first index) and
// rest = sum over j != a of exp(z_j - m), in [0, cols - 1]:
//   loss   = (m - z_label) + log1p(rest)
//   p_j    = exp(z_j - m) / (1 + rest)
// The loss is the sum of a difference of logits and a logarithm of very
// different sizes when the logits are large and the loss is small (logits
// near 1e4, loss near 1e-5). Adding the small logarithm to m first, as in
// log(sum) + m - z_label, loses it in m's rounding (ulp(1e4) ~ 1e-3); and
// log(sum) with sum = 1 + rest rounded to float keeps only ~1e-7 of rest.
// Here m - z_label is exact whenever the two are within a factor 2 (Sterbenz)
// and log1p(rest) keeps rest's full relative precision.
#ifndef PSTRAIN_WORKER_COMPUTE_CUDA_SOFTMAX_FORMULA_H_
#define PSTRAIN_WORKER_COMPUTE_CUDA_SOFTMAX_FORMULA_H_

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define PSTRAIN_HOST_DEVICE __host__ __device__
#else
#define PSTRAIN_HOST_DEVICE
#endif

namespace pstrain {
namespace cuda {

// The loss of a row from its maximum, the label's logit and `rest`.
PSTRAIN_HOST_DEVICE inline float SoftmaxCrossEntropyLoss(float max,
                                                         float z_label,
                                                         float rest) {
  return (max - z_label) + log1pf(rest);
}

// softmax(z)_j from z_j, the row's maximum and `rest`.
PSTRAIN_HOST_DEVICE inline float SoftmaxProbability(float z_j, float max,
                                                    float rest) {
  return expf(z_j - max) / (1.0f + rest);
}

// The kernel's steps for one row of `cols` >= 1 logits, serially (the kernel
// spreads the loops over a warp; only the summation order of `rest`
// differs). `label` in [0, cols).
inline float SoftmaxCrossEntropyRow(const float* z, int64_t cols,
                                    int64_t label) {
  int64_t arg = 0;
  for (int64_t j = 1; j < cols; ++j) {
    if (z[j] > z[arg]) arg = j;
  }
  float rest = 0;
  for (int64_t j = 0; j < cols; ++j) {
    if (j != arg) rest += expf(z[j] - z[arg]);
  }
  return SoftmaxCrossEntropyLoss(z[arg], z[label], rest);
}

}  // namespace cuda
}  // namespace pstrain

#endif  // PSTRAIN_WORKER_COMPUTE_CUDA_SOFTMAX_FORMULA_H_
