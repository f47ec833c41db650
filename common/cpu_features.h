// What this CPU can run, asked once: the kernels built for AVX2 and AVX-512
// beside a baseline build (server/fixed_point_kernels.cc, common/optimizer.cc's
// one-pass loops) pick their build with it. Every build gives the same bits
// (the tests compare them); a wider one only does more elements per
// instruction.
//
// PSTRAIN_MAX_CPU_ISA=baseline|avx2|avx512 caps the choice (as oneDNN's
// ONEDNN_MAX_CPU_ISA does): for measuring one build against another in the
// same binary, for running the narrower builds' paths in tests on a CPU
// that has the wider ones, and for CPUs whose clock drops under 512-bit
// work (Intel's first AVX-512 generations), where AVX2 may be faster. A
// value that is not one of these is reported once on stderr and ignored.
#ifndef PSTRAIN_COMMON_CPU_FEATURES_H_
#define PSTRAIN_COMMON_CPU_FEATURES_H_

#include <optional>
#include <string>
#include <string_view>

namespace pstrain {

// The kernel builds, narrowest first.
enum class CpuIsa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The widest build this CPU runs: AVX-512 needs the F, DQ, BW and VL
// subsets (every AVX-512 CPU since Skylake-SP and Zen 4 has them).
CpuIsa DetectedCpuIsa();

// "baseline", "avx2" or "avx512" as a CpuIsa; nullopt for anything else.
std::optional<CpuIsa> ParseCpuIsa(std::string_view name);
const char* CpuIsaName(CpuIsa isa);

// `detected` capped by `cap` (PSTRAIN_MAX_CPU_ISA's value; null or empty:
// no cap). A cap that is not a build's name leaves `detected` and sets
// *warning to the line that says so; otherwise *warning is cleared.
CpuIsa CapCpuIsa(CpuIsa detected, const char* cap, std::string* warning);

// DetectedCpuIsa() capped by PSTRAIN_MAX_CPU_ISA, read once per process.
CpuIsa KernelCpuIsa();

inline bool CpuHasAvx2() { return KernelCpuIsa() >= CpuIsa::kAvx2; }
inline bool CpuHasAvx512() { return KernelCpuIsa() >= CpuIsa::kAvx512; }

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CPU_FEATURES_H_
