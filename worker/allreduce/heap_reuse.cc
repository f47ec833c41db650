#include "worker/allreduce/heap_reuse.h"

#include <malloc.h>

namespace pstrain {

absl::Status KeepFreedHeapForReuse() {
  // Setting M_MMAP_THRESHOLD also turns off glibc's dynamic adjustment of
  // both thresholds, so the values stay as set.
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(kRingMmapThresholdBytes)) !=
          1 ||
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(kRingTrimThresholdBytes)) !=
          1) {
    return absl::InternalError(
        "mallopt refused M_MMAP_THRESHOLD or M_TRIM_THRESHOLD");
  }
  return absl::OkStatus();
}

}  // namespace pstrain
