// What this CPU can run, asked once: the kernels built for AVX2 beside a
// baseline build (server/fixed_point_kernels.cc, common/optimizer.cc's
// one-pass loops) pick their build with it.
#ifndef PSTRAIN_COMMON_CPU_FEATURES_H_
#define PSTRAIN_COMMON_CPU_FEATURES_H_

namespace pstrain {

inline bool CpuHasAvx2() {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return avx2;
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CPU_FEATURES_H_
