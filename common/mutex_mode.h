// Abseil's lock-order checking, on in debug builds and off in opt ones.
#ifndef PSTRAIN_COMMON_MUTEX_MODE_H_
#define PSTRAIN_COMMON_MUTEX_MODE_H_

namespace pstrain {

// Abseil records every absl::Mutex acquisition in a process-wide graph of
// lock orders, and aborts on a cycle, when Abseil itself was built without
// NDEBUG. Debian's Abseil was (a lock order inverted in a test binary aborts
// with "dying due to potential deadlock"), so every binary that links it
// paid for it whatever its own build: 90 ns instead of 26 for a pair of
// uncontended locks, behind one global lock (docs/performance-log.md, "Abseil's
// lock-order graph off in opt builds"). In a binary built with NDEBUG
// (psctl's --config=opt) this turns the check off, as an Abseil built for
// release has it; in other builds (tests, bazel's default fastbuild) it does
// nothing and the check stays on. Call first in main, before any thread.
void SetMutexChecksForThisBuild();

// True where SetMutexChecksForThisBuild turns the check off (NDEBUG builds).
bool MutexChecksOffInThisBuild();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_MUTEX_MODE_H_
