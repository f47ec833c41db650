#include "worker/allreduce/heap_reuse.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/config.h"
#include "absl/synchronization/barrier.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

// The arenas glibc has made so far: malloc_info writes one <heap nr="...">
// element per arena.
int Arenas() {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  if (out == nullptr) return -1;
  malloc_info(0, out);
  fclose(out);
  const std::string xml(text, size);
  free(text);
  int arenas = 0;
  for (size_t at = xml.find("<heap nr="); at != std::string::npos;
       at = xml.find("<heap nr=", at + 1)) {
    ++arenas;
  }
  return arenas;
}

// Threads that allocate at the same time share one arena after
// KeepFreedHeapForReuse (glibc's default gives each a new one), so what one
// frees, another reuses.
TEST(HeapReuseTest, ThreadsShareOneArena) {
#if defined(ABSL_HAVE_ADDRESS_SANITIZER) || \
    defined(ABSL_HAVE_THREAD_SANITIZER) || defined(ABSL_HAVE_MEMORY_SANITIZER)
  GTEST_SKIP() << "a sanitizer build uses the sanitizer's allocator, which "
                  "has no glibc arenas to count";
#else
  ASSERT_TRUE(KeepFreedHeapForReuse().ok());
  constexpr int kThreads = 4;
  absl::Barrier* all_allocated = new absl::Barrier(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([all_allocated] {
      // Below the mmap threshold: from an arena.
      char* block = static_cast<char*>(malloc(1 << 20));
      ASSERT_NE(block, nullptr);
      memset(block, 1, 1 << 20);
      // Every thread holds its block at once, so none could have reused
      // another's arena after that thread ended.
      if (all_allocated->Block()) delete all_allocated;
      free(block);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(Arenas(), 1);
#endif
}

}  // namespace
}  // namespace pstrain
