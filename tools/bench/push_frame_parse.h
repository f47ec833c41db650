// Parse cost of one pushed frame on the server, old and new path side by
// side (issue 26): grpc::SerializationTraits<PushRequest>::Deserialize
// (copies every payload into the message) against ByteBuffer::Dump plus
// ParsePushFrame (server/push_frame.h: payloads left in the slices). The
// frame is a PushRequest of 1 MiB fp32 chunks held in slices of a given
// size, as a received ByteBuffer is. Parsing only: the push path does not
// use ParsePushFrame yet.
#ifndef PSTRAIN_TOOLS_BENCH_PUSH_FRAME_PARSE_H_
#define PSTRAIN_TOOLS_BENCH_PUSH_FRAME_PARSE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace pstrain::bench {

struct PushFrameParseTimes {
  uint64_t frame_bytes = 0;
  double protobuf_s = 0;  // median over rounds
  double in_place_s = 0;  // median over rounds
  double ratio = 0;       // median of in place / protobuf within each round
};

// `rounds` (>= 1) alternating rounds of each path on a frame of `mb` 1 MiB
// chunks in `slice_bytes` (>= 1) slices, after one warm-up round. An error
// names the path that refused the frame.
absl::StatusOr<PushFrameParseTimes> MeasurePushFrameParse(int mb,
                                                          size_t slice_bytes,
                                                          int rounds);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_PUSH_FRAME_PARSE_H_
