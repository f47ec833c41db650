#include "worker/allreduce/heap_reuse.h"

#include <malloc.h>

#include "common/glibc_malloc.h"

namespace pstrain {

absl::Status KeepFreedHeapForReuse() {
  if (!kGlibcMalloc) return absl::OkStatus();  // the sanitizer's allocator
  // Setting M_MMAP_THRESHOLD also turns off glibc's dynamic adjustment of
  // both thresholds, so the values stay as set.
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(kRingMmapThresholdBytes)) !=
          1 ||
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(kRingTrimThresholdBytes)) !=
          1 ||
      mallopt(M_ARENA_MAX, kHeapReuseArenas) != 1) {
    return absl::InternalError(
        "mallopt refused M_MMAP_THRESHOLD, M_TRIM_THRESHOLD or M_ARENA_MAX");
  }
  return absl::OkStatus();
}

}  // namespace pstrain
