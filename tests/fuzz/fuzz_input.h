// Helpers shared by the libFuzzer targets in tests/fuzz/.
//
// Input format of the message fuzzers (so seeds are easy to write, see
// make_seeds.py): byte 0 selects a variant (mode, parser ...), then frames,
// each a 2-byte little-endian length and that many bytes (one serialized
// protobuf message). A truncated last frame is cut to what is left.
#ifndef PSTRAIN_TESTS_FUZZ_FUZZ_INPUT_H_
#define PSTRAIN_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "proto/pstrain.pb.h"

namespace pstrain {
namespace fuzz {

struct FramedInput {
  uint8_t variant = 0;
  std::vector<std::string> frames;
};

inline FramedInput SplitFrames(const uint8_t* data, size_t size,
                               size_t max_frames) {
  FramedInput in;
  if (size == 0) return in;
  in.variant = data[0];
  size_t pos = 1;
  while (pos < size && in.frames.size() < max_frames) {
    size_t len = data[pos];
    if (pos + 1 < size) len |= static_cast<size_t>(data[pos + 1]) << 8;
    pos += 2;
    if (pos > size) break;
    if (len > size - pos) len = size - pos;
    in.frames.emplace_back(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
  }
  return in;
}

// A property the code under test must keep; a violation is a crash, which
// libFuzzer reports with the input.
#define PS_FUZZ_CHECK(cond, what)                                        \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "fuzz check failed: %s (%s)\n", #cond, what); \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

// Tensor "w" of 10 elements in chunks of 4 (4, 4, 2) and tensor "b" of 4.
// With two servers, w/0 and w/1 are on shard 0, w/2 and b/0 on shard 1;
// with one, everything is on shard 0. `variant` picks the consistency mode
// and optimizer.
inline pstrain::v1::JobSpec SmallJob(int num_servers, uint8_t variant) {
  pstrain::v1::JobSpec job;
  switch (variant % 3) {
    case 0:
      job.mutable_config()->mutable_training()->set_mode(
          pstrain::v1::MODE_SYNC);
      break;
    case 1:
      job.mutable_config()->mutable_training()->set_mode(
          pstrain::v1::MODE_ASYNC);
      job.mutable_config()->mutable_training()->set_staleness(1);
      break;
    default:
      job.mutable_config()->mutable_training()->set_mode(
          pstrain::v1::MODE_ASYNC);
      job.mutable_config()->mutable_training()->set_staleness(-1);
      break;
  }
  job.mutable_config()->mutable_job()->set_workers(2);
  job.set_num_servers(num_servers);
  auto* opt = job.mutable_config()->mutable_training()->mutable_optimizer();
  opt->set_kind((variant / 3) % 2 == 0 ? pstrain::v1::OptimizerConfig::SGD
                                       : pstrain::v1::OptimizerConfig::ADAM);
  opt->set_base_lr(0.1);
  opt->set_beta1(0.9);
  opt->set_beta2(0.999);
  opt->set_epsilon(1e-8);
  auto* map = job.mutable_shard_map();
  for (auto [name, n] : {std::pair<const char*, int>{"w", 10}, {"b", 4}}) {
    auto* t = map->add_tensors();
    t->set_name(name);
    t->add_shape(n);
    t->set_dtype(pstrain::v1::DTYPE_F32);
    t->mutable_init()->set_kind(pstrain::v1::InitRule::UNIFORM);
    t->mutable_init()->set_scale(1.0f);
    t->mutable_init()->set_seed(3);
  }
  auto chunk = [&](const char* t, int i, int off, int len, int shard) {
    auto* c = map->add_chunks();
    c->set_tensor(t);
    c->set_index(i);
    c->set_offset(off);
    c->set_length(len);
    c->set_shard(shard);
  };
  const int second = num_servers > 1 ? 1 : 0;
  chunk("w", 0, 0, 4, 0);
  chunk("w", 1, 4, 4, 0);
  chunk("w", 2, 8, 2, second);
  chunk("b", 0, 0, 4, second);
  for (int s = 0; s < num_servers; ++s) {
    map->add_server_addresses("in-process");
  }
  return job;
}

}  // namespace fuzz
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_FUZZ_FUZZ_INPUT_H_
