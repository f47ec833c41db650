// Ring all-gather of blocks of different sizes (gloo's AllgatherRing with
// per-rank counts): rank r's block [offset_r, offset_r + sizes[r]) of a
// vector laid out as every rank's block back to back travels right around
// the ring in N - 1 rounds; in round j rank r passes on block r - j (its own
// in round 0, then the one it received in round j - 1) and receives block
// r - j - 1. Each rank receives every block but its own and sends every
// block but its right neighbour's, in segments of at most segment_elems floats,
// each passed on as soon as it arrives. Blocks are copied, never summed, so
// every rank ends with the same bits. The all-reduce trainer gathers each
// worker's (row ids, row gradients) with it (docs/sparse.md).
#ifndef PSTRAIN_WORKER_ALLREDUCE_RING_ALLGATHER_H_
#define PSTRAIN_WORKER_ALLREDUCE_RING_ALLGATHER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/allreduce/ring_allreduce.h"
#include "worker/allreduce/transport.h"

namespace pstrain {

// On entry `data` (sum of sizes floats) holds this rank's block at its
// offset; on success it holds every rank's. `sizes` (one per rank, the same
// on every rank) and `step` (the operation's tag: segments are keyed
// (step, ROW_GATHER, block's rank, offset in the block), so it may share a
// step with a RingAllReduce) are the caller's. Blocks travel in fp32 whatever
// options.wire_dtype says. INVALID_ARGUMENT when sizes has not one entry per
// rank or data is not their sum, or segment_elems is 0; DEADLINE_EXCEEDED
// and CANCELLED as RingAllReduce. Either way the transport no longer reads
// `data` when it returns.
absl::Status RingAllGather(Transport* transport, uint64_t step,
                           absl::Span<const uint64_t> sizes,
                           absl::Span<float> data, const RingOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_RING_ALLGATHER_H_
