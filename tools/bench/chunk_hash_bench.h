// chunk_hash_bench: the push fingerprint's kernels alone (docs/performance.md,
// "Fewer passes over pushed bytes"). Streams `chunk`-byte chunks from a
// `buffer`-byte buffer (larger than the caches, so chunks come from memory,
// as a freshly received push does) through each variant, every variant in
// every round and in alternating order, and prints each variant's GB/s and
// its ratio to the first variant's (before) within each round.
#ifndef PSTRAIN_TOOLS_BENCH_CHUNK_HASH_BENCH_H_
#define PSTRAIN_TOOLS_BENCH_CHUNK_HASH_BENCH_H_

#include <cstddef>

namespace pstrain::bench {

struct ChunkHashBenchOptions {
  int rounds = 7;
  size_t chunk = 4 << 20;
  size_t buffer = 256 << 20;
  bool table = false;  // also time the table (non-SSE4.2) build
};

// Runs the rounds and prints them; the exit status (0). Needs rounds >= 1,
// chunk > 0 and buffer >= chunk.
int RunChunkHashBench(const ChunkHashBenchOptions& options);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_CHUNK_HASH_BENCH_H_
