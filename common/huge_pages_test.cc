#include "common/huge_pages.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(HugePages, ReadsTheTunableAmongOthers) {
  EXPECT_EQ(MallocHugetlbValue(""), "");
  EXPECT_EQ(MallocHugetlbValue("glibc.malloc.hugetlb=1"), "1");
  EXPECT_EQ(
      MallocHugetlbValue("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0"),
      "0");
  EXPECT_EQ(MallocHugetlbValue("glibc.malloc.hugetlb=1:glibc.malloc.hugetlb=2"),
            "2");  // the last one
  // A longer name that starts the same is another tunable.
  EXPECT_EQ(MallocHugetlbValue("glibc.malloc.hugetlbx=1"), "");
}

TEST(HugePages, AWorkerAsksForThemUnlessTheEnvironmentChose) {
  EXPECT_EQ(WorkerGlibcTunables(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(WorkerGlibcTunables(""), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(WorkerGlibcTunables("glibc.malloc.arena_max=2"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  // An explicit choice is kept as it is, whatever its value.
  EXPECT_EQ(WorkerGlibcTunables("glibc.malloc.hugetlb=0"),
            "glibc.malloc.hugetlb=0");
  EXPECT_EQ(
      WorkerGlibcTunables("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"),
      "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2");
  EXPECT_EQ(WorkerGlibcTunables("glibc.malloc.hugetlbx=1"),
            "glibc.malloc.hugetlbx=1:glibc.malloc.hugetlb=1");
}

TEST(HugePages, AWorkersEnvironmentIsOursWithItsTunables) {
  const char* const plain[] = {"PATH=/bin", "HOME=/root", nullptr};
  EXPECT_THAT(WorkerEnvironment(plain),
              ElementsAre("PATH=/bin", "HOME=/root",
                          "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"));
  // Ours extended in place of the original (one GLIBC_TUNABLES, last).
  const char* const tuned[] = {"GLIBC_TUNABLES=glibc.malloc.arena_max=2",
                               "PATH=/bin", nullptr};
  EXPECT_THAT(WorkerEnvironment(tuned),
              ElementsAre("PATH=/bin",
                          "GLIBC_TUNABLES=glibc.malloc.arena_max=2:"
                          "glibc.malloc.hugetlb=1"));
  // An explicit choice stays, and so does an unrelated look-alike.
  const char* const chosen[] = {
      "GLIBC_TUNABLESX=1", "GLIBC_TUNABLES=glibc.malloc.hugetlb=0",
      "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", nullptr};
  EXPECT_THAT(WorkerEnvironment(chosen),
              ElementsAre("GLIBC_TUNABLESX=1",
                          "GLIBC_TUNABLES=glibc.malloc.hugetlb=0"));
  const char* const empty[] = {nullptr};
  EXPECT_THAT(WorkerEnvironment(empty),
              ElementsAre("GLIBC_TUNABLES=glibc.malloc.hugetlb=1"));
  EXPECT_THAT(WorkerEnvironment(nullptr),
              ElementsAre("GLIBC_TUNABLES=glibc.malloc.hugetlb=1"));
}

TEST(HugePages, KernelModeIsTheBracketedWord) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/thp_enabled";
  std::ofstream(path) << "always [madvise] never\n";
  EXPECT_EQ(KernelThpMode(path), "madvise");
  std::ofstream(path, std::ios::trunc) << "[never] always\n";
  EXPECT_EQ(KernelThpMode(path), "never");
  std::ofstream(path, std::ios::trunc) << "always madvise never\n";
  EXPECT_EQ(KernelThpMode(path), "");
  EXPECT_EQ(KernelThpMode(path + ".none"), "");
}

TEST(HugePages, TheLogLineSaysWhichPagesAndWhy) {
  EXPECT_THAT(HeapPagesText("glibc.malloc.hugetlb=1", "madvise", true),
              StartsWith("transparent huge pages ("));
  EXPECT_THAT(HeapPagesText("glibc.malloc.hugetlb=1", "never", true),
              AllOf(StartsWith("4 KiB pages"), HasSubstr("never")));
  EXPECT_THAT(HeapPagesText(nullptr, "madvise", true),
              AllOf(StartsWith("4 KiB pages"),
                    HasSubstr("does not name glibc.malloc.hugetlb")));
  EXPECT_THAT(HeapPagesText("glibc.malloc.hugetlb=0", "always", true),
              StartsWith("glibc.malloc.hugetlb=0 from GLIBC_TUNABLES"));
  EXPECT_THAT(HeapPagesText("glibc.malloc.hugetlb=1", "", true),
              HasSubstr("transparent huge pages: ?"));
  EXPECT_THAT(HeapPagesText("glibc.malloc.hugetlb=1", "madvise", false),
              HasSubstr("sanitizer"));
}

}  // namespace
}  // namespace pstrain
