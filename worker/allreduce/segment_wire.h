// A ring segment on the wire without protobuf's copies: the sender writes
// pstrain.v1.RingSegment's encoding as a small header slice followed by one
// copy of the rank's floats in a gRPC slice; the receiver parses the header
// out of the received message's slices and keeps the payload as those
// slices (SegmentPayload), which the rank then adds or copies into its
// vector. The bytes are exactly a serialised RingSegment, so either side may
// also be protobuf.
//
// Why the sender copies once: a write's completion may come before its
// bytes reach the socket, and gRPC 1.51 let go of sent slices late
// (measured: payload slices with a release callback, 34 segments of an idle
// stream, were released only when the stream closed), so a slice pointing
// into the rank's vector would not tell when the vector may change again.
// With copies, memory stays bounded under traffic (ring_bench: 30 16-MiB
// all-reduces peak at about the same RSS as 3).
#ifndef PSTRAIN_WORKER_ALLREDUCE_SEGMENT_WIRE_H_
#define PSTRAIN_WORKER_ALLREDUCE_SEGMENT_WIRE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/allreduce/segment_payload.h"
#include "worker/allreduce/transport.h"

namespace pstrain {

// RingSegment{key, from_rank, session_id, data, dtype, generation}, holding
// its own copy of `data` in `dtype` (one pass: a memcpy for fp32, a rounding
// to bf16 for bf16; no protobuf string). fp32 leaves the dtype field unset,
// generation 0 the generation field. Requires IsRingWireDtype(dtype).
grpc::ByteBuffer EncodeSegment(
    const SegmentKey& key, uint32_t from_rank, uint64_t session_id,
    absl::Span<const float> data,
    pstrain::v1::DType dtype = pstrain::v1::DTYPE_F32, uint64_t generation = 0);

struct DecodedSegment {
  SegmentKey key;
  uint32_t from_rank = 0;
  uint64_t session_id = 0;
  uint64_t generation = 0;  // the sender's job generation
  SegmentPayload payload;   // the data field's bytes, in place
};

// Parses a RingSegment from `message`, which it takes over (its slices
// become the payload's owner). Unknown fields are skipped, as protobuf
// would. INVALID_ARGUMENT for a truncated or malformed message, a known
// field with the wrong wire type, more than one data field, or a dtype
// other than fp32 and bf16.
absl::StatusOr<DecodedSegment> DecodeSegment(grpc::ByteBuffer message);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_SEGMENT_WIRE_H_
