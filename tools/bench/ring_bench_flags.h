// ring_bench's flags (--rounds, --iters, --ranks, --mib, --kib,
// --segment_bytes, --compare_segment_bytes, --compare_link_args,
// --wire_dtype, --heap_reuse, --mpirun, --mpi_program),
// turned into RingRoundsOptions. Only ring_bench_main.cc calls these (the
// flags are part of that binary, not of any library user).
#ifndef PSTRAIN_TOOLS_BENCH_RING_BENCH_FLAGS_H_
#define PSTRAIN_TOOLS_BENCH_RING_BENCH_FLAGS_H_

#include "absl/status/statusor.h"
#include "tools/bench/ring_rounds.h"

namespace pstrain::bench {

// The options the flags give; INVALID_ARGUMENT naming the flag when one is
// out of range or not a list of positive numbers.
absl::StatusOr<RingRoundsOptions> RingRoundsOptionsFromFlags();

// --heap_reuse: keep freed segment buffers mapped, as the worker does.
bool HeapReuseFlag();

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_RING_BENCH_FLAGS_H_
