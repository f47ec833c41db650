// pstrain's own data path, measured through the public pieces a job uses:
// Shard + ParameterServerService behind real gRPC servers on 127.0.0.1 port
// 0, and one PsClient per worker (each over its own connections, as separate
// worker processes would be). One tensor, sync mode.
#ifndef PSTRAIN_TOOLS_BENCH_PS_PATH_H_
#define PSTRAIN_TOOLS_BENCH_PS_PATH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pstrain::bench {

// A sync job of one fp32 tensor of `elems` elements over `servers` shards
// (4 MiB chunks) for `workers` workers, with optimizer `kind` (lr 0.01),
// whose chunks travel as `wire_dtype` (network.wire_dtype).
absl::StatusOr<pstrain::v1::JobSpec> OneTensorJob(
    uint64_t elems, int servers, int workers,
    pstrain::v1::OptimizerConfig::Kind kind,
    pstrain::v1::DType wire_dtype = pstrain::v1::DTYPE_F32);

struct PsPathResult {
  double push_bytes_per_s = 0;  // all workers together
  double pull_bytes_per_s = 0;
};

// Starts the shards, runs one warm-up step, then `steps` timed steps: every
// worker pulls (concurrently; the pull phase is timed), then every worker
// pushes its gradient (timed). Aggregate bytes / wall time of each phase,
// bytes counted as the fp32 model (elems * 4 per worker) whatever
// `wire_dtype` carries them: a bf16 wire moving the same model twice as
// fast shows twice the rate.
absl::StatusOr<PsPathResult> MeasurePsPath(
    uint64_t elems, int servers, int workers, int steps,
    pstrain::v1::DType wire_dtype = pstrain::v1::DTYPE_F32);

// Child role for the memory benchmark: serves one shard (momentum) of a
// `elems`-element tensor for `workers` workers on 127.0.0.1 port 0, prints
// the port on stdout, and exits 0 when stdin closes (or on SIGTERM, or
// after 30 minutes).
int ServeShardMain(uint64_t elems, int workers);

struct ServerMemory {
  int64_t peak_rss_bytes = 0;  // the server process's VmHWM
  int64_t bound_bytes = 0;     // weights + slots + 8 B/param + 64 MiB
};

// Runs `self` (this binary) as a shard server child (ServeShardMain via
// --serve_shard), drives `workers` workers through `steps` sync steps (pull
// then push each) and returns the child's peak RSS.
absl::StatusOr<ServerMemory> MeasureServerMemory(const std::string& self,
                                                 uint64_t elems, int workers,
                                                 int steps);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_PS_PATH_H_
