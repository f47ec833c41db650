// Whether this build allocates with glibc's malloc: not under AddressSanitizer,
// ThreadSanitizer or MemorySanitizer, which bring their own allocator (their
// mallopt does nothing, and GLIBC_TUNABLES's malloc tunables do not apply).
#ifndef PSTRAIN_COMMON_GLIBC_MALLOC_H_
#define PSTRAIN_COMMON_GLIBC_MALLOC_H_

#include "absl/base/config.h"

namespace pstrain {

#if defined(ABSL_HAVE_ADDRESS_SANITIZER) || \
    defined(ABSL_HAVE_THREAD_SANITIZER) || defined(ABSL_HAVE_MEMORY_SANITIZER)
inline constexpr bool kGlibcMalloc = false;
#else
inline constexpr bool kGlibcMalloc = true;
#endif

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_GLIBC_MALLOC_H_
