// Building gRPC messages of dense chunks without copying their payloads.
//
// A ChunkFrame is one serialised message (PushRequest or PullResponse: the
// same bytes protobuf would write) held as a list of grpc::Slice: small
// owned slices for the framing and the chunk's tensor, index, dtype and
// shape, and one slice per payload. An fp32 payload is not copied: its slice
// points at the caller's floats and holds a `Keepalive` reference until gRPC
// is done with it, so the caller can tell when the memory is free again
// (Keepalive::WaitUnused) or tie it to a refcounted owner. A bf16/fp16
// payload is converted (round to nearest even; fp16 saturating at +-65504,
// reported by NoteF16Saturation with the tensor's name) into a slice of
// its own.
// Any protobuf parser reads the result as the message it mimics.
#ifndef PSTRAIN_COMMON_CHUNK_FRAMES_H_
#define PSTRAIN_COMMON_CHUNK_FRAMES_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// Counts the payload slices still referencing borrowed memory. Thread-safe.
class Keepalive {
 public:
  // Waits until no slice references the memory any more (true) or
  // `deadline` passes (false).
  bool WaitUnused(absl::Time deadline);
  int in_use() const;

 private:
  friend class ChunkFrame;
  void Acquire();
  void Release();
  mutable absl::Mutex mu_;
  int refs_ ABSL_GUARDED_BY(mu_) = 0;
};

// One message under construction. Not thread-safe; movable.
class ChunkFrame {
 public:
  // `chunk_field` is the field number of `repeated ChunkData` in the outer
  // message (PushRequest.chunks = 2, PullResponse.chunks = 3).
  explicit ChunkFrame(int chunk_field) : chunk_field_(chunk_field) {}

  // Appends the serialised fields of `fields` (e.g. a PushRequest holding
  // only its header); call before the chunks.
  void AddFields(const google::protobuf::MessageLite& fields);
  // Appends a ChunkData of `n` values at `values` in `dtype` (DTYPE_F32,
  // DTYPE_BF16 or DTYPE_F16). fp32: `values` are referenced, not copied;
  // `keepalive` (may be null; else it must outlive the reference) counts
  // the reference until gRPC drops it, and `owner` (may be null) is kept
  // alive as long as it.
  void AddChunk(const std::string& tensor, uint32_t index, const float* values,
                uint64_t n, pstrain::v1::DType dtype, Keepalive* keepalive,
                std::shared_ptr<void> owner = nullptr);
  // Payload bytes added so far (wire dtype).
  uint64_t payload_bytes() const { return payload_bytes_; }
  bool empty() const { return slices_.empty() && pending_.empty(); }
  // The message; the frame is empty afterwards.
  grpc::ByteBuffer Release();

 private:
  void FlushPending();
  const int chunk_field_;
  std::string pending_;  // framing not yet turned into a slice
  std::vector<grpc::Slice> slices_;
  uint64_t payload_bytes_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CHUNK_FRAMES_H_
