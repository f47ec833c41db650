// Where a single-host job's processes run (psctl run, ps_bench's real jobs):
// each server on a core of its own, counted from the last allowed CPU down,
// and each ps_worker on as many cores as it has compute threads, counted
// from the first up, so that a server's receive, parse and apply stay on one
// core's caches instead of following the scheduler's migrations between
// cores. Measured on a 2-core machine (docs/performance-log.md, "Processes
// on cores"): real 4 MB jobs pushed 1.27x and pulled 1.29x faster with one
// worker and one server, 1.08x and 1.10x with 4 workers and 2 servers, and
// every job's step was 1.02-1.22x faster. A worker with a compute thread for
// every allowed CPU stays unpinned (its matrix products use them all), as does
// every process on a one-CPU host.
#ifndef PSTRAIN_COMMON_CPU_PLACEMENT_H_
#define PSTRAIN_COMMON_CPU_PLACEMENT_H_

#include <sched.h>

#include <string>
#include <vector>

namespace pstrain {

// The CPUs this process may run on (sched_getaffinity), ascending; empty if
// they cannot be read.
std::vector<int> AllowedCpus();

// The CPUs server `shard` (0-based) is pinned to among `allowed`: one,
// allowed[C - 1 - shard % C] for C allowed CPUs; empty (unpinned) when C < 2.
std::vector<int> ServerCpus(const std::vector<int>& allowed, int shard);

// The CPUs worker `rank` is pinned to: t = compute_threads (at least 1)
// consecutive ones of `allowed` from (rank * t) % C, wrapping; empty
// (unpinned) when C < 2 or t >= C.
std::vector<int> WorkerCpus(const std::vector<int>& allowed, int rank,
                            int compute_threads);

// "1" or "0,1" or "unpinned".
std::string CpuListText(const std::vector<int>& cpus);

// The set of `cpus` (CPU numbers at least 0 and below CPU_SETSIZE).
cpu_set_t CpuSetOf(const std::vector<int>& cpus);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CPU_PLACEMENT_H_
