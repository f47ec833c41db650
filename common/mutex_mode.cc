#include "common/mutex_mode.h"

#include "absl/synchronization/mutex.h"

namespace pstrain {

bool MutexChecksOffInThisBuild() {
#ifdef NDEBUG
  return true;
#else
  return false;
#endif
}

void SetMutexChecksForThisBuild() {
  if (MutexChecksOffInThisBuild()) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
}

}  // namespace pstrain
