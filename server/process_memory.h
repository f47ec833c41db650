// Process-wide memory settings of a parameter-server process: glibc malloc's
// arenas and mmap threshold, and gRPC's TCP read buffers. They keep a sync
// server's peak RSS within weights + slots + accumulator + 64 MiB and nearly
// independent of the number of workers (docs/architecture.md, "Server data path
// and push safety"; CHANGELOG.md; measured by ps_bench's server-memory
// variants).
#ifndef PSTRAIN_SERVER_PROCESS_MEMORY_H_
#define PSTRAIN_SERVER_PROCESS_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"

namespace pstrain {

struct ProcessMemoryOptions {
  // glibc M_ARENA_MAX: at most this many malloc arenas (0: glibc's default,
  // 8 per core). Each arena keeps the memory its threads freed, so gRPC's
  // poller and callback threads each holding freed receive buffers add up
  // with the number of connections. One arena: freed memory is reused by
  // every thread.
  int malloc_arena_max = 1;
  // glibc M_MMAP_THRESHOLD in bytes (0: glibc's dynamic threshold, which
  // rises to the largest buffer freed so far, up to 32 MiB, after which
  // 4 MiB message buffers come from the arena and stay there). Fixed: every
  // allocation of at least this size is its own mapping, returned to the
  // kernel when freed. At most 32 MiB.
  int64_t mmap_threshold_bytes = 1 << 20;
  // glibc M_TRIM_THRESHOLD in bytes (0: glibc's, which a fixed mmap
  // threshold pins at 128 KiB). Free heap above it at the top is given back
  // to the kernel. At 128 KiB, gRPC's freed read buffers (64 KiB slices, a
  // 4 MiB push message's worth at a time) were trimmed after every message
  // and faulted in again for the next, a page fault per 4 KiB on the
  // receive path: 16 MiB keeps that much freed heap mapped for reuse,
  // which does not raise the peak. Measured in real jobs (1 worker, 1
  // server, psctl run): push time 50.2 -> 33.6 ms per step at 64 MB, 12.1
  // -> 10.6 at 16 MB, 4.1 -> 3.6 at 4 MB (docs/performance-log.md, "The
  // server's trim threshold"). At most 1 GiB.
  int64_t trim_threshold_bytes = 16 << 20;
  // gRPC's "tcp_read_chunks" experiment (on by default in gRPC 1.51): each
  // connection's read buffer grows with the largest burst it has read and is
  // kept while the connection lives (about 1.1 MiB per worker connection
  // after a push of 4 MiB messages). Off, reads use one slice of at most
  // PsServerChannelArgs()'s grpc.experimental.tcp_max_read_chunk_size.
  // Applied through GRPC_EXPERIMENTS (gRPC's only switch for it), appended
  // to what the environment already asks for; a GRPC_EXPERIMENTS that names
  // tcp_read_chunks itself is left as it is.
  bool grpc_tcp_read_chunks = false;
};

// Applies `options`. Call at the very start of main, before any thread is
// started and before the first gRPC call: the arena limit binds threads
// created later, and gRPC reads its experiments once. INVALID_ARGUMENT
// naming the field for a negative value or a threshold above 32 MiB;
// INTERNAL when glibc refuses a setting. In a sanitizer build (its own
// allocator) the malloc settings are checked but not applied. Not
// thread-safe.
absl::Status ConfigureProcessMemory(const ProcessMemoryOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PROCESS_MEMORY_H_
