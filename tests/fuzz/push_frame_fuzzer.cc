// Fuzzes the in-place PushRequest parser (server/push_frame.h) against
// protobuf's own parse. Input: byte 0 picks where the frame is cut into
// slices (up to three pieces, some possibly empty), the rest is the frame.
// Property: ParsePushFrame accepts exactly the frames protobuf accepts and
// gives the same header and chunks (payload bytes included), wherever the
// slice boundaries fall.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/pstrain.pb.h"
#include "server/push_frame.h"

namespace pstrain {
namespace fuzz {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "push_frame_fuzzer: %s differs from protobuf\n", what);
  std::abort();
}

}  // namespace
}  // namespace fuzz
}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using pstrain::fuzz::Check;
  if (size == 0) return 0;
  const absl::string_view frame(reinterpret_cast<const char*>(data + 1),
                                size - 1);
  const size_t n = frame.size();
  const size_t a = n == 0 ? 0 : (data[0] & 0x0f) * n / 15;
  const size_t b = n == 0 ? 0 : a + ((data[0] >> 4) * (n - a)) / 15;
  const std::vector<absl::string_view> pieces = {
      frame.substr(0, a), frame.substr(a, b - a), frame.substr(b)};

  pstrain::v1::PushRequest want;
  const bool want_ok = want.ParseFromArray(frame.data(), frame.size());
  pstrain::PushFrameView got;
  const bool got_ok = pstrain::ParsePushFrame(pieces, &got).ok();
  Check(got_ok == want_ok, "acceptance");
  if (!want_ok) return 0;
  Check(got.has_header == want.has_header(), "has_header");
  Check(got.header.SerializeAsString() == want.header().SerializeAsString(),
        "header");
  Check(got.chunks.size() == static_cast<size_t>(want.chunks_size()),
        "chunk count");
  for (int i = 0; i < want.chunks_size(); ++i) {
    const pstrain::v1::ChunkData& w = want.chunks(i);
    const pstrain::ChunkView& g = got.chunks[i];
    std::string payload;
    for (absl::string_view p : g.data) payload.append(p.data(), p.size());
    Check(g.tensor == w.tensor() && g.index == w.index() &&
              g.dtype == static_cast<int>(w.dtype()),
          "chunk fields");
    Check(g.shape == std::vector<int64_t>(w.shape().begin(), w.shape().end()),
          "shape");
    Check(payload == w.data() && g.data_size == w.data().size(), "payload");
  }
  return 0;
}
