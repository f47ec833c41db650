// push_frame_bench: a pushed frame's parse, protobuf's (a copy of every
// payload) against ParsePushFrame's in place (tools/bench/push_frame_parse.h).
//
//   bazel run -c opt //tools/bench:push_frame_bench -- --rounds=9
//   --slice_kib=64
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "tools/bench/push_frame_parse.h"

ABSL_FLAG(int, rounds, 7, "rounds of each path (alternating)");
ABSL_FLAG(int, slice_kib, 64, "size of the ByteBuffer's slices, KiB");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int slice_kib = absl::GetFlag(FLAGS_slice_kib);
  if (rounds < 1 || slice_kib < 1) {
    std::fprintf(stderr,
                 "push_frame_bench: --rounds and --slice_kib must be "
                 ">= 1\n");
    return 2;
  }
  std::printf("%-6s %12s %12s %14s %22s\n", "MB", "protobuf us", "in-place us",
              "protobuf GB/s", "in place / protobuf");
  for (int mb : {4, 16, 64}) {
    absl::StatusOr<pstrain::bench::PushFrameParseTimes> t =
        pstrain::bench::MeasurePushFrameParse(
            mb, static_cast<size_t>(slice_kib) << 10, rounds);
    if (!t.ok()) {
      std::fprintf(stderr, "push_frame_bench: %s\n",
                   t.status().ToString().c_str());
      return 1;
    }
    std::printf("%-6d %12.1f %12.1f %14.2f %22.3f\n", mb, t->protobuf_s * 1e6,
                t->in_place_s * 1e6, t->frame_bytes / t->protobuf_s / 1e9,
                t->ratio);
  }
  return 0;
}
