// Transparent huge pages for a ps_worker's heap. glibc's malloc backs the
// memory it takes from the kernel with 2 MiB pages when a process starts with
// glibc.malloc.hugetlb=1 in GLIBC_TUNABLES (glibc 2.35 and later; Debian 12
// has 2.36). glibc reads it once, before main, so the launcher sets it:
// ps_launch (psctl run) for every ps_worker it starts, the worker manifests
// in deploy/k8s and ps_bench's real jobs likewise. A worker touches its
// weights, its gradient and gRPC's read buffers for the first time in its first
// steps; where a fresh 4 KiB page is dear (10-14 us in this project's 2-core
// VM) those first steps were several times slower than the rest. On huge pages
// the first 25 steps' communication was 1.25-1.58x faster and jobs of 200-300
// steps ended 1.04-1.10x sooner, the steady steps unchanged
// (docs/performance-log.md, "A worker's heap on huge pages"). The servers keep
// 4 KiB pages: on huge pages only the smallest job's start gained, and
// khugepaged may fill a server's sparse 2 MiB ranges over time while its peak
// memory is a goal of its own (server/process_memory.h; "Tried, not kept: the
// servers' heap on huge pages").
#ifndef PSTRAIN_COMMON_HUGE_PAGES_H_
#define PSTRAIN_COMMON_HUGE_PAGES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace pstrain {

inline constexpr char kGlibcTunablesVariable[] = "GLIBC_TUNABLES";
inline constexpr char kMallocHugetlbTunable[] = "glibc.malloc.hugetlb";
inline constexpr char kKernelThpModePath[] =
    "/sys/kernel/mm/transparent_hugepage/enabled";

// The value `tunables` (GLIBC_TUNABLES's syntax: NAME=VALUE items separated
// by ':') gives glibc.malloc.hugetlb, the last one if it is named twice;
// empty when it is not named.
std::string MallocHugetlbValue(absl::string_view tunables);

// GLIBC_TUNABLES for a ps_worker, from the launcher's own value (`current`,
// null when unset): glibc.malloc.hugetlb=1 appended to `current`, or
// `current` unchanged when it names glibc.malloc.hugetlb already (a choice
// made in the environment wins: GLIBC_TUNABLES=glibc.malloc.hugetlb=0 turns
// huge pages off for the workers psctl run starts).
std::string WorkerGlibcTunables(const char* current);

// A ps_worker's whole environment ("NAME=VALUE" items) from `environ` (a
// null-terminated list, e.g. this process's `environ`): every item but
// GLIBC_TUNABLES, then GLIBC_TUNABLES as WorkerGlibcTunables makes it. What
// ps_launch starts workers with, and ps_bench's real jobs likewise.
std::vector<std::string> WorkerEnvironment(const char* const* environ);

// The kernel's transparent huge page mode, the bracketed word of `path`
// ("always", "madvise" or "never"); empty when it cannot be read.
std::string KernelThpMode(const std::string& path = kKernelThpModePath);

// For a worker's log: which pages its heap is on and why, from its
// GLIBC_TUNABLES (`tunables`, null when unset), the kernel's mode (empty:
// unknown) and whether glibc's malloc is in use (false in sanitizer builds,
// whose allocator ignores the tunable).
std::string HeapPagesText(const char* tunables, absl::string_view kernel_mode,
                          bool glibc_malloc);
// The same for this process.
std::string HeapPagesText();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_HUGE_PAGES_H_
