#include "common/cpu_features.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(CpuFeaturesTest, NamesRoundTrip) {
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    EXPECT_EQ(ParseCpuIsa(CpuIsaName(isa)), isa);
  }
  EXPECT_EQ(ParseCpuIsa("AVX2"), std::nullopt);
  EXPECT_EQ(ParseCpuIsa(""), std::nullopt);
  EXPECT_EQ(ParseCpuIsa("avx512f"), std::nullopt);
}

TEST(CpuFeaturesTest, CapLowersNeverRaises) {
  std::string warning = "stale";
  EXPECT_EQ(CapCpuIsa(CpuIsa::kAvx512, nullptr, &warning), CpuIsa::kAvx512);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(CapCpuIsa(CpuIsa::kAvx512, "", &warning), CpuIsa::kAvx512);
  EXPECT_EQ(CapCpuIsa(CpuIsa::kAvx512, "avx2", &warning), CpuIsa::kAvx2);
  EXPECT_EQ(CapCpuIsa(CpuIsa::kAvx512, "baseline", &warning),
            CpuIsa::kBaseline);
  // A cap above what the CPU runs changes nothing.
  EXPECT_EQ(CapCpuIsa(CpuIsa::kAvx2, "avx512", &warning), CpuIsa::kAvx2);
  EXPECT_EQ(CapCpuIsa(CpuIsa::kBaseline, "avx2", &warning), CpuIsa::kBaseline);
  EXPECT_EQ(warning, "");
}

TEST(CpuFeaturesTest, UnknownCapIsReportedAndIgnored) {
  std::string warning;
  EXPECT_EQ(CapCpuIsa(CpuIsa::kAvx2, "sse9", &warning), CpuIsa::kAvx2);
  EXPECT_EQ(warning,
            "PSTRAIN_MAX_CPU_ISA=sse9: not one of baseline, avx2, avx512; "
            "ignored (this CPU runs avx2)");
}

// KernelCpuIsa reads the variable once per process, so each case runs in a
// child forked before this process has asked (nothing else here asks).
int KernelCpuIsaInChild(const char* cap) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (cap == nullptr) {
      unsetenv("PSTRAIN_MAX_CPU_ISA");
    } else {
      setenv("PSTRAIN_MAX_CPU_ISA", cap, 1);
    }
    _exit(static_cast<int>(KernelCpuIsa()));
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

TEST(CpuFeaturesTest, EnvironmentCapsTheKernelsBuild) {
  const int detected = static_cast<int>(DetectedCpuIsa());
  EXPECT_EQ(KernelCpuIsaInChild(nullptr), detected);
  EXPECT_EQ(KernelCpuIsaInChild("baseline"), 0);
  EXPECT_EQ(KernelCpuIsaInChild("avx2"), std::min(detected, 1));
  EXPECT_EQ(KernelCpuIsaInChild("avx512"), detected);
  EXPECT_EQ(KernelCpuIsaInChild("bogus"), detected);
}

}  // namespace
}  // namespace pstrain
