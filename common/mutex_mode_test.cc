// SetMutexChecksForThisBuild keeps Abseil's lock-order check where the
// build has no NDEBUG (an inverted order aborts) and turns it off where it
// has (the same inversion runs through).
#include "common/mutex_mode.h"

#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

void LockTwoInBothOrders() {
  absl::Mutex a, b;
  {
    absl::MutexLock first(&a);
    absl::MutexLock second(&b);
  }
  {
    absl::MutexLock first(&b);
    absl::MutexLock second(&a);
  }
}

TEST(MutexMode, TheLockOrderCheckFollowsTheBuild) {
  SetMutexChecksForThisBuild();
  if (MutexChecksOffInThisBuild()) {
    std::printf("NDEBUG build: the check is off\n");
    LockTwoInBothOrders();  // no abort
  } else {
    std::printf("build without NDEBUG: the check stays on\n");
    EXPECT_DEATH(LockTwoInBothOrders(), "potential deadlock");
  }
}

}  // namespace
}  // namespace pstrain
