#include "common/chunk_frames.h"

#include <cstring>
#include <utility>

#include "common/low_precision.h"
#include "common/tensor_codec.h"

namespace pstrain {
namespace {

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

constexpr int kLengthDelimited = 2;
// ChunkData.data (field 5, length-delimited).
constexpr char kDataTag = (5 << 3) | kLengthDelimited;

// What a borrowed fp32 payload slice holds on to.
struct Borrowed {
  Keepalive* keepalive;
  std::shared_ptr<void> owner;
};

}  // namespace

void Keepalive::Acquire() {
  absl::MutexLock lock(&mu_);
  ++refs_;
}

void Keepalive::Release() {
  absl::MutexLock lock(&mu_);
  --refs_;
}

int Keepalive::in_use() const {
  absl::MutexLock lock(&mu_);
  return refs_;
}

bool Keepalive::WaitUnused(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto unused = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return refs_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&unused), deadline);
}

void ChunkFrame::AddFields(const google::protobuf::MessageLite& fields) {
  fields.AppendToString(&pending_);
}

void ChunkFrame::AddChunk(const std::string& tensor, uint32_t index,
                          const float* values, uint64_t n,
                          pstrain::v1::DType dtype, Keepalive* keepalive,
                          std::shared_ptr<void> owner) {
  if (!IsWireDtype(dtype)) dtype = pstrain::v1::DTYPE_F32;
  pstrain::v1::ChunkData meta;
  meta.set_tensor(tensor);
  meta.set_index(index);
  meta.set_dtype(dtype);
  meta.add_shape(static_cast<int64_t>(n));
  const uint64_t bytes = n * WireElementBytes(dtype);
  const size_t meta_bytes = meta.ByteSizeLong();
  const uint64_t chunk_bytes = meta_bytes + 1 + VarintSize(bytes) + bytes;
  PutVarint((static_cast<uint64_t>(chunk_field_) << 3) | kLengthDelimited,
            &pending_);
  PutVarint(chunk_bytes, &pending_);
  meta.AppendToString(&pending_);
  pending_.push_back(kDataTag);
  PutVarint(bytes, &pending_);
  FlushPending();
  payload_bytes_ += bytes;
  if (bytes == 0) return;
  if (dtype == pstrain::v1::DTYPE_F32) {
    if (keepalive != nullptr) keepalive->Acquire();
    auto* borrowed = new Borrowed{keepalive, std::move(owner)};
    slices_.emplace_back(
        const_cast<float*>(values), bytes,
        [](void* p) {
          auto* b = static_cast<Borrowed*>(p);
          if (b->keepalive != nullptr) b->keepalive->Release();
          delete b;
        },
        borrowed);
    return;
  }
  // Our own (aligned) buffer: a gRPC slice's inline bytes need not be.
  auto* out = new uint16_t[n];
  if (dtype == pstrain::v1::DTYPE_BF16) {
    FloatsToBf16(values, n, out);
  } else {
    NoteF16Saturation(tensor, FloatsToF16(values, n, out));
  }
  slices_.emplace_back(out, bytes,
                       [](void* p) { delete[] static_cast<uint16_t*>(p); });
}

void ChunkFrame::FlushPending() {
  if (pending_.empty()) return;
  slices_.emplace_back(pending_.data(), pending_.size());
  pending_.clear();
}

grpc::ByteBuffer ChunkFrame::Release() {
  FlushPending();
  grpc::ByteBuffer buffer(slices_.data(), slices_.size());
  slices_.clear();
  payload_bytes_ = 0;
  return buffer;
}

}  // namespace pstrain
