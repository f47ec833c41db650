// The child role that ps_bench and ps_path_bench share: MeasureServerMemory
// and MeasurePsPath with setting.server_binary (tools/bench/ps_path.h) run
// the benchmark's own binary with --serve_shard and the flags of a
// ServeShardSpec (ServeShardArgv), defined once here. Only those two mains
// and the test of the flags link this (the flags are part of the binaries,
// not of any library).
#ifndef PSTRAIN_TOOLS_BENCH_SERVE_SHARD_FLAGS_H_
#define PSTRAIN_TOOLS_BENCH_SERVE_SHARD_FLAGS_H_

#include "tools/bench/ps_path.h"

namespace pstrain::bench {

// --serve_shard: this process is a benchmark's shard server.
bool ServeShardRequested();

// The ServeShardSpec the flags give (ServeShardArgv's inverse).
ServeShardSpec ServeShardSpecFromFlags();

// ServeShardMain(ServeShardSpecFromFlags()); its exit status.
int ServeShardFromFlags();

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_SERVE_SHARD_FLAGS_H_
