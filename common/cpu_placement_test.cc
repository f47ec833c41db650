#include "common/cpu_placement.h"

#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

using Cpus = std::vector<int>;

TEST(CpuPlacement, ServersFromTheLastCpuDownOneEach) {
  const Cpus two = {0, 1};
  EXPECT_EQ(ServerCpus(two, 0), Cpus{1});
  EXPECT_EQ(ServerCpus(two, 1), Cpus{0});
  EXPECT_EQ(ServerCpus(two, 2), Cpus{1});  // more servers than CPUs: wraps
  // The allowed CPUs, not 0..C-1 (a cpuset of a container).
  EXPECT_EQ(ServerCpus({2, 5, 7}, 0), Cpus{7});
  EXPECT_EQ(ServerCpus({2, 5, 7}, 1), Cpus{5});
}

TEST(CpuPlacement, WorkersFromTheFirstCpuUpWithTheirComputeThreads) {
  const Cpus two = {0, 1};
  // 4 workers on 2 cores, one compute thread each: 0, 1, 0, 1.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(WorkerCpus(two, r, 1), Cpus{r % 2});
  const Cpus eight = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(WorkerCpus(eight, 0, 3), (Cpus{0, 1, 2}));
  EXPECT_EQ(WorkerCpus(eight, 1, 3), (Cpus{3, 4, 5}));
  EXPECT_EQ(WorkerCpus(eight, 2, 3), (Cpus{0, 6, 7}));  // 6, 7, wrapping to 0
  EXPECT_EQ(WorkerCpus({4, 9}, 1, 1), Cpus{9});
}

TEST(CpuPlacement, UnpinnedWhereItWouldTakeCoresAway) {
  // One worker with a compute thread per CPU keeps them all.
  EXPECT_TRUE(WorkerCpus({0, 1}, 0, 2).empty());
  EXPECT_TRUE(WorkerCpus({0, 1}, 0, 8).empty());
  // One CPU: nothing to place.
  EXPECT_TRUE(WorkerCpus({0}, 0, 1).empty());
  EXPECT_TRUE(ServerCpus({0}, 0).empty());
  EXPECT_TRUE(ServerCpus({}, 0).empty());
  // A zero or negative thread count counts as one.
  EXPECT_EQ(WorkerCpus({0, 1}, 1, 0), Cpus{1});
}

TEST(CpuPlacement, TextAndSet) {
  EXPECT_EQ(CpuListText({}), "unpinned");
  EXPECT_EQ(CpuListText({0, 6, 7}), "0,6,7");
  const cpu_set_t set = CpuSetOf({1, 3});
  EXPECT_EQ(CPU_COUNT(&set), 2);
  EXPECT_TRUE(CPU_ISSET(1, &set));
  EXPECT_TRUE(CPU_ISSET(3, &set));
}

TEST(CpuPlacement, AllowedCpusAreThisProcesssAscending) {
  const Cpus cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(static_cast<int>(cpus.size()), CPU_COUNT(&set));
  for (size_t i = 1; i < cpus.size(); ++i) EXPECT_LT(cpus[i - 1], cpus[i]);
}

}  // namespace
}  // namespace pstrain
