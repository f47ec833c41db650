// How much slower a test binary runs under a sanitizer, for the tests whose
// time-outs or "promptly" bounds a sanitizer can break: scale the bound by
// kSanitizerSlowdown rather than widening it for every build.
#ifndef PSTRAIN_TESTS_HARNESS_SANITIZER_H_
#define PSTRAIN_TESTS_HARNESS_SANITIZER_H_

#include "absl/base/config.h"

namespace pstrain {

// A TSan run measured 1.9 s for a cancel that ends in well under 1 s
// otherwise, and answered a pull 200 ms too late; 5x covers both.
#if defined(ABSL_HAVE_ADDRESS_SANITIZER) || \
    defined(ABSL_HAVE_THREAD_SANITIZER) || defined(ABSL_HAVE_MEMORY_SANITIZER)
inline constexpr int kSanitizerSlowdown = 5;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_HARNESS_SANITIZER_H_
