#include "tools/bench/bench_heap.h"

#include <cstdio>

#include "absl/status/status.h"
#include "worker/allreduce/heap_reuse.h"

namespace pstrain::bench {

void KeepBenchHeapForReuse(const char* who) {
  if (absl::Status st = KeepFreedHeapForReuse(); !st.ok()) {
    std::fprintf(stderr, "%s: %s; glibc's malloc defaults stay\n", who,
                 st.ToString().c_str());
    return;
  }
  std::printf(
      "%s: freed heap kept for reuse, as ps_worker does (mmap threshold %zu "
      "MiB, trim threshold %zu MiB, %d malloc arena(s))\n",
      who, kRingMmapThresholdBytes >> 20, kRingTrimThresholdBytes >> 20,
      kHeapReuseArenas);
  std::fflush(stdout);
}

}  // namespace pstrain::bench
