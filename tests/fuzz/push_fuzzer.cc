// Fuzzes the push decode/validate path: Shard::Push with fuzzed PushRequest
// bytes on a small shard (shard 0 of two), up to 8 pushes per input; in
// sync, a push whose header says it is a part of a split push
// (PushHeader.parts > 1) goes through the stream path instead (BeginPush,
// Add, Finish), as the service feeds it. Properties: nothing crashes, a
// rejected push changes nothing (the shard's statistics and weights are
// exactly as before), and a rejected or pending part commits nothing (its
// summed chunks may stay as the worker's contribution, which no reader
// sees, so only the version and the accepted pushes are compared; so too
// for the pushes after a part, which may find such contributions).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
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

// What a push commits: the version and the count of accepted pushes.
std::pair<uint64_t, uint64_t> Committed(Shard* shard) {
  const v1::ShardStats stats = shard->Stats();
  return {stats.version(), stats.pushes()};
}

// One part streamed as the service streams it: every chunk added in order
// until one is refused, then finished.
absl::StatusOr<PushResult> StreamPart(Shard* shard,
                                      const v1::PushRequest& request) {
  absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> push =
      shard->BeginPush(request.header());
  if (!push.ok()) return push.status();
  for (const v1::ChunkData& c : request.chunks()) {
    if (absl::Status st = (*push)->Add(c); !st.ok()) return st;
  }
  return (*push)->Finish();
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
  bool parts_seen = false;  // contributions may be left uncommitted
  for (const std::string& frame : in.frames) {
    v1::PushRequest request;
    if (!request.ParseFromString(frame)) continue;
    if ((*shard)->sums_on_arrival() && request.header().parts() > 1) {
      parts_seen = true;
      const auto before = fuzz::Committed(shard->get());
      absl::StatusOr<PushResult> part = fuzz::StreamPart(shard->get(), request);
      if (!part.ok() || part->pending) {
        PS_FUZZ_CHECK(fuzz::Committed(shard->get()) == before,
                      "a refused or pending part must commit nothing");
      }
      continue;
    }
    std::vector<const v1::ChunkData*> chunks;
    for (const auto& c : request.chunks()) chunks.push_back(&c);
    if (parts_seen) {
      const auto before = fuzz::Committed(shard->get());
      absl::StatusOr<PushResult> result =
          (*shard)->Push(request.header(), chunks);
      if (!result.ok()) {
        PS_FUZZ_CHECK(fuzz::Committed(shard->get()) == before,
                      "a rejected push must commit nothing");
      }
      continue;
    }
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
