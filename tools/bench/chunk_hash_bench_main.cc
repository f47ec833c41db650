// chunk_hash_bench: the push fingerprint's and held term's kernels alone
// (tools/bench/chunk_hash_bench.h; docs/performance.md).
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "tools/bench/chunk_hash_bench.h"

ABSL_FLAG(int, rounds, 7, "rounds; each runs every variant once");
ABSL_FLAG(int, chunk_mb, 4, "chunk size in MiB");
ABSL_FLAG(int, buffer_mb, 256, "buffer the chunks are taken from, in MiB");
ABSL_FLAG(bool, table, false, "also time the table (non-SSE4.2) build");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  pstrain::bench::ChunkHashBenchOptions o;
  o.rounds = absl::GetFlag(FLAGS_rounds);
  const int chunk_mb = absl::GetFlag(FLAGS_chunk_mb);
  const int buffer_mb = absl::GetFlag(FLAGS_buffer_mb);
  if (o.rounds < 1 || chunk_mb < 1 || buffer_mb < chunk_mb) {
    std::fprintf(stderr,
                 "chunk_hash_bench: need --rounds >= 1, --chunk_mb >= 1 and "
                 "--buffer_mb >= --chunk_mb\n");
    return 2;
  }
  o.chunk = static_cast<size_t>(chunk_mb) << 20;
  o.buffer = static_cast<size_t>(buffer_mb) << 20;
  o.table = absl::GetFlag(FLAGS_table);
  return pstrain::bench::RunChunkHashBench(o);
}
