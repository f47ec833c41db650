#include "server/process_memory.h"

#include <malloc.h>
#include <stdlib.h>

#include <cstring>
#include <string>

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

}  // namespace
}  // namespace pstrain
