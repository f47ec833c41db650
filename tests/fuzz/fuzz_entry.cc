// The libFuzzer entry point of every pstrain fuzzer. Each target's own
// LLVMFuzzerTestOneInput is compiled as PstrainFuzzTarget (fuzz.bzl's
// local_defines); this one counts executions and calls it. When the
// environment names a file in PSTRAIN_FUZZ_STATS, the process writes its
// counts there at exit, one "key=value" per line:
//   runs=<executions>
//   seconds=<wall seconds since the first execution>
//   exec_per_s=<runs / seconds, rounded down>
// (`psctl fuzz` prints them; a crash exits without writing, and the caller
// reports the crash instead.)
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

extern "C" int PstrainFuzzTarget(const uint8_t* data, size_t size);

namespace {

std::atomic<uint64_t> g_runs{0};
std::chrono::steady_clock::time_point g_start;

void WriteStats() {
  const char* path = std::getenv("PSTRAIN_FUZZ_STATS");
  if (path == nullptr || *path == '\0') return;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start)
          .count();
  const uint64_t runs = g_runs.load();
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::perror(path);
    return;
  }
  std::fprintf(f, "runs=%llu\nseconds=%.3f\nexec_per_s=%llu\n",
               static_cast<unsigned long long>(runs), seconds,
               static_cast<unsigned long long>(
                   seconds > 0 ? static_cast<double>(runs) / seconds : 0));
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool registered = [] {
    g_start = std::chrono::steady_clock::now();
    std::atexit(WriteStats);
    return true;
  }();
  (void)registered;
  g_runs.fetch_add(1, std::memory_order_relaxed);
  return PstrainFuzzTarget(data, size);
}
