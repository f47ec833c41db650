#include "tools/bench/push_frame_parse.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/pstrain.pb.h"
#include "server/push_frame.h"
#include "tools/bench/stats.h"

namespace pstrain::bench {

namespace {

grpc::ByteBuffer Buffer(const std::string& frame, size_t slice) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < frame.size(); at += slice) {
    slices.emplace_back(frame.data() + at, std::min(slice, frame.size() - at),
                        grpc::Slice::STATIC_SLICE);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Frame(int mb) {
  pstrain::v1::PushRequest request;
  request.mutable_header()->set_worker(1);
  for (int i = 0; i < mb; ++i) {
    pstrain::v1::ChunkData* c = request.add_chunks();
    c->set_tensor("w");
    c->set_index(i);
    c->set_dtype(pstrain::v1::DTYPE_F32);
    c->add_shape(1 << 18);
    c->set_data(std::string(1 << 20, static_cast<char>(i)));
  }
  return request.SerializeAsString();
}

}  // namespace

absl::StatusOr<PushFrameParseTimes> MeasurePushFrameParse(int mb,
                                                          size_t slice_bytes,
                                                          int rounds) {
  if (mb < 1 || slice_bytes < 1 || rounds < 1) {
    return absl::InvalidArgumentError(
        "push_frame_bench: needs mb, slice size and rounds >= 1");
  }
  const std::string frame = Frame(mb);
  std::vector<double> old_s, new_s, ratio;
  pstrain::v1::PushRequest message;
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
    grpc::ByteBuffer old_buffer = Buffer(frame, slice_bytes);
    absl::Time t0 = absl::Now();
    if (!grpc::SerializationTraits<pstrain::v1::PushRequest>::Deserialize(
             &old_buffer, &message)
             .ok()) {
      return absl::InternalError("protobuf's parse refused the frame");
    }
    const double old_seconds = absl::ToDoubleSeconds(absl::Now() - t0);

    grpc::ByteBuffer new_buffer = Buffer(frame, slice_bytes);
    t0 = absl::Now();
    std::vector<grpc::Slice> slices;
    if (!new_buffer.Dump(&slices).ok()) {
      return absl::InternalError("ByteBuffer::Dump failed");
    }
    std::vector<absl::string_view> pieces;
    for (const grpc::Slice& s : slices) {
      pieces.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    PushFrameView view;
    if (absl::Status st = ParsePushFrame(pieces, &view); !st.ok()) {
      return absl::InternalError(
          absl::StrCat("ParsePushFrame refused the frame: ", st.message()));
    }
    const double new_seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    if (view.chunks.size() != static_cast<size_t>(message.chunks_size())) {
      return absl::InternalError("the two parses found different chunks");
    }
    if (r == 0) continue;
    old_s.push_back(old_seconds);
    new_s.push_back(new_seconds);
    ratio.push_back(new_seconds / old_seconds);
  }
  return PushFrameParseTimes{frame.size(), Median(old_s), Median(new_s),
                             Median(ratio)};
}

}  // namespace pstrain::bench
