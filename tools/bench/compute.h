// The optimizer's apply, one thread, against a STREAM-triad loop (a[i] =
// b[i] + s * c[i]) of the benchmark's own, built the same way, in the same
// round: each as bytes it must move per second.
#ifndef PSTRAIN_TOOLS_BENCH_COMPUTE_H_
#define PSTRAIN_TOOLS_BENCH_COMPUTE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pstrain::bench {

// Bytes per second of the triad over `elems` floats per array (3 arrays:
// two read, one written; 12 B per element), best of `repeats` passes.
double TriadBytesPerSecond(uint64_t elems, int repeats);

// Bytes per second of Optimizer::Apply over `elems` parameters, counting the
// streams the rule must move: weights and slots read and written, the
// gradient read ((3 + 2 * slots) * 4 B per element). With `chunk_elems` < elems
// the parameters are updated chunk by chunk (each with its own slots, the
// shard layout); otherwise in one call. Best of `repeats` passes.
absl::StatusOr<double> OptimizerBytesPerSecond(
    pstrain::v1::OptimizerConfig::Kind kind, uint64_t elems,
    uint64_t chunk_elems, int repeats);

std::string OptimizerName(pstrain::v1::OptimizerConfig::Kind kind);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_COMPUTE_H_
