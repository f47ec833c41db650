#include "common/cpu_placement.h"

#include <algorithm>

#include "absl/strings/str_join.h"

namespace pstrain {

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  }
  return cpus;
}

std::vector<int> ServerCpus(const std::vector<int>& allowed, int shard) {
  const int c = static_cast<int>(allowed.size());
  if (c < 2 || shard < 0) return {};
  return {allowed[c - 1 - shard % c]};
}

std::vector<int> WorkerCpus(const std::vector<int>& allowed, int rank,
                            int compute_threads) {
  const int c = static_cast<int>(allowed.size());
  const int t = std::max(1, compute_threads);
  if (c < 2 || t >= c || rank < 0) return {};
  std::vector<int> cpus;
  const int start = static_cast<int>((static_cast<long long>(rank) * t) % c);
  for (int i = 0; i < t; ++i) cpus.push_back(allowed[(start + i) % c]);
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

std::string CpuListText(const std::vector<int>& cpus) {
  return cpus.empty() ? "unpinned" : absl::StrJoin(cpus, ",");
}

cpu_set_t CpuSetOf(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  }
  return set;
}

}  // namespace pstrain
