#include "tools/bench/serve_shard_flags.h"

#include <cstdint>

#include "absl/flags/flag.h"
#include "tools/bench/ps_path.h"

// Defaults are ServerVariant's; MeasureServerMemory passes every flag.
ABSL_FLAG(bool, serve_shard, false, "internal: serve one shard (child role)");
ABSL_FLAG(uint64_t, elems, 0, "internal: --serve_shard tensor elements");
ABSL_FLAG(int, workers, 1, "internal: --serve_shard number of workers");
ABSL_FLAG(bool, bdp_probe, true, "internal: --serve_shard HTTP/2 BDP probe");
ABSL_FLAG(int64_t, mmap_threshold, 0,
          "internal: --serve_shard glibc M_MMAP_THRESHOLD (0: default)");
ABSL_FLAG(int64_t, trim_threshold, 0,
          "internal: --serve_shard glibc M_TRIM_THRESHOLD (0: default)");
ABSL_FLAG(int, max_concurrent_pushes, -1,
          "internal: --serve_shard push streams summed at once (-1: default)");
ABSL_FLAG(int, malloc_arena_max, 0,
          "internal: --serve_shard glibc M_ARENA_MAX (0: default)");
ABSL_FLAG(bool, grpc_tcp_read_chunks, true,
          "internal: --serve_shard gRPC tcp_read_chunks experiment");

namespace pstrain::bench {

bool ServeShardRequested() { return absl::GetFlag(FLAGS_serve_shard); }

int ServeShardFromFlags() {
  ServerVariant variant;
  variant.bdp_probe = absl::GetFlag(FLAGS_bdp_probe);
  variant.mmap_threshold = absl::GetFlag(FLAGS_mmap_threshold);
  variant.trim_threshold = absl::GetFlag(FLAGS_trim_threshold);
  variant.max_concurrent_pushes = absl::GetFlag(FLAGS_max_concurrent_pushes);
  variant.malloc_arena_max = absl::GetFlag(FLAGS_malloc_arena_max);
  variant.grpc_tcp_read_chunks = absl::GetFlag(FLAGS_grpc_tcp_read_chunks);
  return ServeShardMain(absl::GetFlag(FLAGS_elems),
                        absl::GetFlag(FLAGS_workers), variant);
}

}  // namespace pstrain::bench
