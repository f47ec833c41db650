// The measuring process's malloc settings, shared by the benchmarks that
// run gRPC streams in their own process (ps_bench, ps_path_bench,
// grpc_args_bench).
#ifndef PSTRAIN_TOOLS_BENCH_BENCH_HEAP_H_
#define PSTRAIN_TOOLS_BENCH_BENCH_HEAP_H_

namespace pstrain::bench {

// Freed heap kept mapped for reuse, as ps_worker's
// (worker/allreduce/heap_reuse.h). Benchmarks call it first (not
// ps_bench's --serve_shard child, which takes its variant's settings), so
// that their in-process rows (pstrain's push and pull, the bare gRPC
// stream, the raw-TCP PS) do not measure glibc trimming a cold heap and
// faulting it in again: with glibc's dynamic thresholds the first transfers
// of a process ran up to 5x slower (docs/performance-log.md, "The server's trim
// threshold"), and grpc_args_bench's streams ran at 0.36-1.4 GB/s instead of
// 1.8-3.2 ("What gRPC's settings move"). Prints a line saying so, naming
// `who`; on failure says why and goes on with glibc's defaults.
void KeepBenchHeapForReuse(const char* who);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_BENCH_HEAP_H_
