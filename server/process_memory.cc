#include "server/process_memory.h"

#include <malloc.h>
#include <stdlib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/glibc_malloc.h"

namespace pstrain {
namespace {
// glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems.
constexpr int64_t kMaxMmapThreshold = int64_t{32} << 20;
// The largest trim threshold taken (mallopt takes an int).
constexpr int64_t kMaxTrimThreshold = int64_t{1} << 30;
}  // namespace

absl::Status ConfigureProcessMemory(const ProcessMemoryOptions& options) {
  if (options.malloc_arena_max < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("malloc_arena_max must be >= 0 (0: glibc's default), got ",
                     options.malloc_arena_max));
  }
  if (options.mmap_threshold_bytes < 0 ||
      options.mmap_threshold_bytes > kMaxMmapThreshold) {
    return absl::InvalidArgumentError(
        absl::StrCat("mmap_threshold_bytes must be in [0, ", kMaxMmapThreshold,
                     "] (0: glibc's dynamic threshold), got ",
                     options.mmap_threshold_bytes));
  }
  if (options.trim_threshold_bytes < 0 ||
      options.trim_threshold_bytes > kMaxTrimThreshold) {
    return absl::InvalidArgumentError(
        absl::StrCat("trim_threshold_bytes must be in [0, ", kMaxTrimThreshold,
                     "] (0: glibc's), got ", options.trim_threshold_bytes));
  }
  if (kGlibcMalloc && options.malloc_arena_max > 0 &&
      mallopt(M_ARENA_MAX, options.malloc_arena_max) == 0) {
    return absl::InternalError(absl::StrCat(
        "mallopt(M_ARENA_MAX, ", options.malloc_arena_max, ") failed"));
  }
  if (kGlibcMalloc && options.mmap_threshold_bytes > 0 &&
      mallopt(M_MMAP_THRESHOLD,
              static_cast<int>(options.mmap_threshold_bytes)) == 0) {
    return absl::InternalError(absl::StrCat("mallopt(M_MMAP_THRESHOLD, ",
                                            options.mmap_threshold_bytes,
                                            ") failed"));
  }
  if (kGlibcMalloc && options.trim_threshold_bytes > 0 &&
      mallopt(M_TRIM_THRESHOLD,
              static_cast<int>(options.trim_threshold_bytes)) == 0) {
    return absl::InternalError(absl::StrCat("mallopt(M_TRIM_THRESHOLD, ",
                                            options.trim_threshold_bytes,
                                            ") failed"));
  }
  const char* current = getenv("GRPC_EXPERIMENTS");
  const std::string given = current == nullptr ? "" : current;
  // An explicit choice in the environment wins.
  if (!options.grpc_tcp_read_chunks &&
      given.find("tcp_read_chunks") == std::string::npos) {
    const std::string value = given.empty()
                                  ? "-tcp_read_chunks"
                                  : absl::StrCat(given, ",-tcp_read_chunks");
    if (setenv("GRPC_EXPERIMENTS", value.c_str(), 1) != 0) {
      return absl::InternalError("setenv(GRPC_EXPERIMENTS) failed");
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
