#include "server/process_memory.h"

#include <malloc.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/config.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::string Experiments() {
  const char* v = getenv("GRPC_EXPERIMENTS");
  return v == nullptr ? "<unset>" : v;
}

TEST(ProcessMemoryTest, BadValuesAreRejectedAndChangeNothing) {
  unsetenv("GRPC_EXPERIMENTS");
  ProcessMemoryOptions o;
  o.malloc_arena_max = -1;
  absl::Status st = ConfigureProcessMemory(o);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("malloc_arena_max"), absl::string_view::npos)
      << st;
  o = ProcessMemoryOptions{};
  o.mmap_threshold_bytes = (int64_t{32} << 20) + 1;
  st = ConfigureProcessMemory(o);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("mmap_threshold_bytes"), absl::string_view::npos)
      << st;
  o.mmap_threshold_bytes = -1;
  EXPECT_EQ(ConfigureProcessMemory(o).code(),
            absl::StatusCode::kInvalidArgument);
  o = ProcessMemoryOptions{};
  for (int64_t bad : {int64_t{-1}, (int64_t{1} << 30) + 1}) {
    o.trim_threshold_bytes = bad;
    st = ConfigureProcessMemory(o);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("trim_threshold_bytes"),
              absl::string_view::npos)
        << st;
  }
  EXPECT_EQ(Experiments(), "<unset>");
}

TEST(ProcessMemoryTest, TurnsGrpcReadChunksOffKeepingOtherExperiments) {
  unsetenv("GRPC_EXPERIMENTS");
  ProcessMemoryOptions o;
  o.malloc_arena_max = 0;
  o.mmap_threshold_bytes = 0;
  ASSERT_TRUE(ConfigureProcessMemory(o).ok());
  EXPECT_EQ(Experiments(), "-tcp_read_chunks");

  setenv("GRPC_EXPERIMENTS", "event_engine_client", 1);
  ASSERT_TRUE(ConfigureProcessMemory(o).ok());
  EXPECT_EQ(Experiments(), "event_engine_client,-tcp_read_chunks");

  // An explicit choice in the environment is left alone.
  setenv("GRPC_EXPERIMENTS", "tcp_read_chunks", 1);
  ASSERT_TRUE(ConfigureProcessMemory(o).ok());
  EXPECT_EQ(Experiments(), "tcp_read_chunks");

  unsetenv("GRPC_EXPERIMENTS");
  o.grpc_tcp_read_chunks = true;
  ASSERT_TRUE(ConfigureProcessMemory(o).ok());
  EXPECT_EQ(Experiments(), "<unset>");
}

// A fixed 1 MiB threshold: 512 KiB comes from the heap (glibc's initial
// dynamic threshold, 128 KiB, would map it), 2 MiB is a mapping of its own.
TEST(ProcessMemoryTest, MmapThresholdIsFixed) {
#if defined(ABSL_HAVE_ADDRESS_SANITIZER) || \
    defined(ABSL_HAVE_THREAD_SANITIZER) || defined(ABSL_HAVE_MEMORY_SANITIZER)
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc malloc here";
#endif
  ProcessMemoryOptions o;
  o.malloc_arena_max = 0;
  o.mmap_threshold_bytes = 1 << 20;
  ASSERT_TRUE(ConfigureProcessMemory(o).ok());
  const size_t mapped_before = mallinfo2().hblks;
  void* small = malloc(512 << 10);
  ASSERT_NE(small, nullptr);
  memset(small, 1, 512 << 10);
  EXPECT_EQ(mallinfo2().hblks, mapped_before);
  void* large = malloc(2 << 20);
  ASSERT_NE(large, nullptr);
  memset(large, 1, 2 << 20);
  EXPECT_EQ(mallinfo2().hblks, mapped_before + 1);
  free(large);
  free(small);
  EXPECT_EQ(mallinfo2().hblks, mapped_before);
}

// With the trim threshold, freed heap below it stays mapped (the top of the
// heap is not given back), so the next buffers reuse it; with a small one
// it is given back at the free.
TEST(ProcessMemoryTest, TrimThresholdKeepsFreedHeapMapped) {
#if defined(ABSL_HAVE_ADDRESS_SANITIZER) || \
    defined(ABSL_HAVE_THREAD_SANITIZER) || defined(ABSL_HAVE_MEMORY_SANITIZER)
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc malloc here";
#endif
  // The heap's size (sbrk'd bytes) with 8 MiB of 512 KiB blocks in use at
  // its top, and after they are freed.
  auto heap_in_use_and_after_free = [](int64_t trim) {
    ProcessMemoryOptions o;
    o.malloc_arena_max = 0;
    o.mmap_threshold_bytes = 1 << 20;
    o.trim_threshold_bytes = trim;
    EXPECT_TRUE(ConfigureProcessMemory(o).ok());
    std::vector<void*> blocks;
    blocks.reserve(16);  // no small block between the large ones
    for (int i = 0; i < 16; ++i) {
      blocks.push_back(malloc(512 << 10));
      memset(blocks.back(), 1, 512 << 10);
    }
    const size_t in_use = mallinfo2().arena;
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) free(*it);
    return std::pair<size_t, size_t>(in_use, mallinfo2().arena);
  };
  // The small threshold first: the blocks then grow the heap at its top.
  const auto [trimmed_peak, trimmed] = heap_in_use_and_after_free(256 << 10);
  EXPECT_LT(trimmed + (size_t{4} << 20), trimmed_peak) << "kept with 256 KiB";
  const auto [kept_peak, kept] = heap_in_use_and_after_free(16 << 20);
  EXPECT_GE(kept + (size_t{1} << 20), kept_peak) << "given back with 16 MiB";
}

}  // namespace
}  // namespace pstrain
