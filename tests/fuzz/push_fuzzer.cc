// Fuzzes the push decode/validate path: Shard::Push with fuzzed PushRequest
// bytes on a small shard (shard 0 of two), up to 8 pushes per input.
// Properties: nothing crashes, and a rejected push changes nothing (the
// shard's statistics and weights are exactly as before).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "proto/pstrain.pb.h"
#include "server/shard.h"
#include "tests/fuzz/fuzz_input.h"

namespace pstrain {
namespace fuzz {
namespace {

// Everything a client can observe of the shard without blocking.
std::string Observe(Shard* shard) {
  std::string state = shard->Stats().SerializeAsString();
  // A pull at clock 0 never waits in async mode; in sync mode it may be
  // refused at once (deadline now), which is also part of the state.
  absl::StatusOr<PullResult> pull = shard->Pull(0, 0, absl::Now());
  if (pull.ok()) {
    state.append(reinterpret_cast<const char*>(pull->values.data()),
                 pull->values.size() * sizeof(float));
  } else {
    state += pull.status().ToString();
  }
  return state;
}

}  // namespace
}  // namespace fuzz
}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  const fuzz::FramedInput in = fuzz::SplitFrames(data, size, /*max_frames=*/8);
  absl::StatusOr<std::unique_ptr<Shard>> shard = Shard::Create(
      ShardOptionsFromJob(fuzz::SmallJob(/*num_servers=*/2, in.variant), 0));
  PS_FUZZ_CHECK(shard.ok(), "the fuzz job is valid");
  for (const std::string& frame : in.frames) {
    v1::PushRequest request;
    if (!request.ParseFromString(frame)) continue;
    std::vector<const v1::ChunkData*> chunks;
    for (const auto& c : request.chunks()) chunks.push_back(&c);
    const std::string before = fuzz::Observe(shard->get());
    absl::StatusOr<PushResult> result =
        (*shard)->Push(request.header(), chunks);
    if (!result.ok()) {
      PS_FUZZ_CHECK(fuzz::Observe(shard->get()) == before,
                    "a rejected push must leave the shard untouched");
    }
  }
  (*shard)->Close();
  return 0;
}
