#include "common/cpu_features.h"

#include <cstdio>
#include <cstdlib>

namespace pstrain {

CpuIsa DetectedCpuIsa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    return CpuIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2")) return CpuIsa::kAvx2;
#endif
  return CpuIsa::kBaseline;
}

std::optional<CpuIsa> ParseCpuIsa(std::string_view name) {
  if (name == "baseline") return CpuIsa::kBaseline;
  if (name == "avx2") return CpuIsa::kAvx2;
  if (name == "avx512") return CpuIsa::kAvx512;
  return std::nullopt;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline:
      return "baseline";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "baseline";
}

CpuIsa CapCpuIsa(CpuIsa detected, const char* cap, std::string* warning) {
  warning->clear();
  if (cap == nullptr || *cap == '\0') return detected;
  const std::optional<CpuIsa> parsed = ParseCpuIsa(cap);
  if (!parsed.has_value()) {
    *warning = std::string("PSTRAIN_MAX_CPU_ISA=") + cap +
               ": not one of baseline, avx2, avx512; ignored (this CPU runs " +
               CpuIsaName(detected) + ")";
    return detected;
  }
  return *parsed < detected ? *parsed : detected;
}

CpuIsa KernelCpuIsa() {
  static const CpuIsa isa = [] {
    std::string warning;
    const CpuIsa capped = CapCpuIsa(
        DetectedCpuIsa(), std::getenv("PSTRAIN_MAX_CPU_ISA"), &warning);
    if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
    return capped;
  }();
  return isa;
}

}  // namespace pstrain
