// Parse cost of one pushed frame on the server, old and new path side by
// side (issue 26): grpc::SerializationTraits<PushRequest>::Deserialize
// (copies every payload into the message) against ByteBuffer::Dump plus
// ParsePushFrame (payloads left in the slices). The frame is a PushRequest
// of 1 MiB fp32 chunks held in --slice_kib slices, as a received
// ByteBuffer is; rounds alternate the two, medians of --rounds each.
// Parsing only: the push path does not use ParsePushFrame yet.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/pstrain.pb.h"
#include "server/push_frame.h"
#include "tools/bench/stats.h"

ABSL_FLAG(int, rounds, 7, "rounds of each path (alternating)");
ABSL_FLAG(int, slice_kib, 64, "size of the ByteBuffer's slices, KiB");

namespace {

grpc::ByteBuffer Buffer(const std::string& frame, size_t slice) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < frame.size(); at += slice) {
    slices.emplace_back(frame.data() + at, std::min(slice, frame.size() - at),
                        grpc::Slice::STATIC_SLICE);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const size_t slice = static_cast<size_t>(absl::GetFlag(FLAGS_slice_kib))
                       << 10;
  std::printf("%-6s %12s %12s %14s\n", "MB", "protobuf us", "in-place us",
              "protobuf GB/s");
  for (int mb : {4, 16, 64}) {
    pstrain::v1::PushRequest request;
    request.mutable_header()->set_worker(1);
    for (int i = 0; i < mb; ++i) {
      pstrain::v1::ChunkData* c = request.add_chunks();
      c->set_tensor("w");
      c->set_index(i);
      c->set_dtype(pstrain::v1::DType(1));
      c->add_shape(1 << 18);
      c->set_data(std::string(1 << 20, static_cast<char>(i)));
    }
    const std::string frame = request.SerializeAsString();
    std::vector<double> old_s, new_s;
    uint64_t sink = 0;
    pstrain::v1::PushRequest message;
    for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up
      {
        grpc::ByteBuffer buffer = Buffer(frame, slice);
        auto t0 = std::chrono::steady_clock::now();
        if (!grpc::SerializationTraits<pstrain::v1::PushRequest>::Deserialize(
                 &buffer, &message)
                 .ok()) {
          return 1;
        }
        sink += message.chunks(0).data()[0];
        if (r > 0) old_s.push_back(Seconds(t0));
      }
      {
        grpc::ByteBuffer buffer = Buffer(frame, slice);
        auto t0 = std::chrono::steady_clock::now();
        std::vector<grpc::Slice> slices;
        if (!buffer.Dump(&slices).ok()) return 1;
        std::vector<absl::string_view> pieces;
        for (const grpc::Slice& s : slices) {
          pieces.emplace_back(reinterpret_cast<const char*>(s.begin()),
                              s.size());
        }
        pstrain::PushFrameView view;
        if (!pstrain::ParsePushFrame(pieces, &view).ok()) return 1;
        sink += view.chunks[0].data[0][0];
        if (r > 0) new_s.push_back(Seconds(t0));
      }
    }
    const double old_med = pstrain::bench::Median(old_s);
    const double new_med = pstrain::bench::Median(new_s);
    std::printf("%-6d %12.1f %12.1f %14.2f\n", mb, old_med * 1e6, new_med * 1e6,
                frame.size() / old_med / 1e9);
    if (sink == 42) std::printf(" \n");
  }
  return 0;
}
