// Parses one PushRequest frame as it lies in gRPC's slices, without copying
// the chunks' payloads: each ChunkData's `data` is returned as the pieces
// of the input that hold it (it may span slices). PushReactor uses it when
// PsServiceOptions::parse_pushes_in_place is set (not the default: measured
// no faster, docs/performance.md), handing the views to
// Shard::IncomingPush::Add(ChunkView).
#ifndef PSTRAIN_SERVER_PUSH_FRAME_H_
#define PSTRAIN_SERVER_PUSH_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// One ChunkData with its payload left in place. The pieces point into the
// input given to ParsePushFrame and live as long as it does.
struct ChunkView {
  std::string tensor;
  uint32_t index = 0;
  int dtype = 0;  // v1::DType, open enum as in proto3
  std::vector<int64_t> shape;
  std::vector<absl::string_view> data;  // in order; empty pieces omitted
  size_t data_size = 0;                 // sum of the pieces' sizes
};

struct PushFrameView {
  bool has_header = false;
  v1::PushHeader header;  // small: parsed (copied) as protobuf would
  std::vector<ChunkView> chunks;
};

// Parses `pieces` (the frame's bytes, in order, e.g. a ByteBuffer's
// slices) with protobuf's semantics for PushRequest: the last occurrence of
// a scalar field wins, repeated header occurrences merge, packed and
// unpacked `shape` both accepted, unknown fields (and known fields with an
// unexpected wire type) skipped, `tensor` must be valid UTF-8. A frame that
// protobuf would refuse (truncated, bad tag or varint, bad group, invalid
// UTF-8, bad header) gives INVALID_ARGUMENT; `out` is then unspecified.
absl::Status ParsePushFrame(absl::Span<const absl::string_view> pieces,
                            PushFrameView* out);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PUSH_FRAME_H_
