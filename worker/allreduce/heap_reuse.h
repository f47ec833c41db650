// glibc's malloc hands memory back to the kernel eagerly: it serves blocks
// above its mmap threshold with fresh mappings, and it trims the top of the
// heap once more than its trim threshold (by default, after the first large
// free, twice that block's size) is free. The ring allocates and frees a
// segment-sized buffer per message on both ends (the sender's copy, gRPC's
// read buffers), so with the defaults nearly every segment landed in freshly
// mapped pages: a page fault and a zeroed page per 4 KiB, on the critical
// path (perf, 2 ranks: clear_page and exc_page_fault under the socket
// copies). KeepFreedHeapForReuse raises both thresholds so that freed
// segment buffers are reused from memory already mapped, and keeps one malloc
// arena: gRPC reads on whichever of its threads polls, and with glibc's
// default arenas (8 per core) each thread's arena grew to a step's buffers on
// its own, so reads still landed in fresh pages for many steps (a 4 MB pull
// with about 900 faults took 15-20 ms instead of 2; docs/performance-log.md,
// "One malloc arena"). The cost: the process keeps up to the trim threshold of
// freed heap mapped (its RSS stays near its peak instead of falling back),
// and its threads share one arena's lock. ps_worker calls it at start-up in
// every mode: a parameter-server step's pulls and pushes go through gRPC's
// read buffers too (4 workers, 2 servers on 2 cores: about 5 % off the
// step time, CHANGELOG.md).
#ifndef PSTRAIN_WORKER_ALLREDUCE_HEAP_REUSE_H_
#define PSTRAIN_WORKER_ALLREDUCE_HEAP_REUSE_H_

#include <cstddef>

#include "absl/status/status.h"

namespace pstrain {

// glibc's largest mmap threshold on 64-bit (blocks below it come from the
// heap), and the free heap kept mapped.
inline constexpr size_t kRingMmapThresholdBytes = size_t{32} << 20;
inline constexpr size_t kRingTrimThresholdBytes = size_t{256} << 20;
// M_ARENA_MAX: one arena, so every thread reuses what any thread freed (as
// ps_server does, server/process_memory.h).
inline constexpr int kHeapReuseArenas = 1;

// Sets M_MMAP_THRESHOLD, M_TRIM_THRESHOLD and M_ARENA_MAX (mallopt) to the
// values above. Process-wide: call from main before threads start (threads
// that already have an arena keep it), or where a process decides to run the
// ring; not from library code that others share. INTERNAL if mallopt
// refuses. In a sanitizer build (its own allocator) nothing is set.
absl::Status KeepFreedHeapForReuse();

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_HEAP_REUSE_H_
