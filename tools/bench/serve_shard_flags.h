// The child role that ps_bench and ps_path_bench share: MeasureServerMemory
// (tools/bench/ps_path.h) runs the benchmark's own binary with --serve_shard
// and the variant's flags (--elems, --workers, --bdp_probe,
// --mmap_threshold, --max_concurrent_pushes, --malloc_arena_max,
// --grpc_tcp_read_chunks), defined once here. Only those two mains call
// these (the flags are part of the binaries, not of any library).
#ifndef PSTRAIN_TOOLS_BENCH_SERVE_SHARD_FLAGS_H_
#define PSTRAIN_TOOLS_BENCH_SERVE_SHARD_FLAGS_H_

namespace pstrain::bench {

// --serve_shard: this process is the memory benchmark's shard server.
bool ServeShardRequested();

// ServeShardMain with the elements, workers and ServerVariant the flags
// give; its exit status.
int ServeShardFromFlags();

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_SERVE_SHARD_FLAGS_H_
