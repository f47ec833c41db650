// The --serve_shard child role: its flags give back the ServeShardSpec
// ServeShardArgv wrote, and MeasurePsPath runs a job's shards in children
// of their own (this test binary is the child, as ps_bench is its own).
#include "tools/bench/serve_shard_flags.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "gtest/gtest.h"
#include "tools/bench/ps_path.h"

namespace pstrain::bench {
namespace {

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

TEST(ServeShardFlagsTest, ArgvGivesBackTheSpec) {
  ServeShardSpec spec;
  spec.elems = 12345;
  spec.workers = 3;
  spec.servers = 2;
  spec.shard = 1;
  spec.optimizer = pstrain::v1::OptimizerConfig::SGD;
  spec.variant.bdp_probe = false;
  spec.variant.mmap_threshold = 1 << 20;
  spec.variant.trim_threshold = 2 << 20;
  spec.variant.max_concurrent_pushes = 2;
  spec.variant.malloc_arena_max = 1;
  spec.variant.grpc_tcp_read_chunks = false;
  PsPathSetting& s = spec.setting;
  s.wire_dtype = pstrain::v1::DTYPE_BF16;
  s.chunk_bytes = 65536;
  s.early_apply = false;
  s.hold_first_term = false;
  s.apply_terms_on_arrival = false;
  s.apply_held_in_one_pass = false;
  s.apply_in_blocks = false;
  s.server_lookahead = 1 << 22;
  s.pull_message_bytes = 1 << 19;
  s.parse_in_place = !kParsePushesInPlace;

  std::vector<std::string> argv = ServeShardArgv("self", spec);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  ASSERT_TRUE(ServeShardRequested());
  const ServeShardSpec got = ServeShardSpecFromFlags();
  EXPECT_EQ(got.elems, spec.elems);
  EXPECT_EQ(got.workers, spec.workers);
  EXPECT_EQ(got.servers, spec.servers);
  EXPECT_EQ(got.shard, spec.shard);
  EXPECT_EQ(got.optimizer, spec.optimizer);
  EXPECT_EQ(got.variant.bdp_probe, spec.variant.bdp_probe);
  EXPECT_EQ(got.variant.mmap_threshold, spec.variant.mmap_threshold);
  EXPECT_EQ(got.variant.trim_threshold, spec.variant.trim_threshold);
  EXPECT_EQ(got.variant.max_concurrent_pushes,
            spec.variant.max_concurrent_pushes);
  EXPECT_EQ(got.variant.malloc_arena_max, spec.variant.malloc_arena_max);
  EXPECT_EQ(got.variant.grpc_tcp_read_chunks,
            spec.variant.grpc_tcp_read_chunks);
  const PsPathSetting& g = got.setting;
  EXPECT_EQ(g.wire_dtype, s.wire_dtype);
  EXPECT_EQ(g.chunk_bytes, s.chunk_bytes);
  EXPECT_EQ(g.early_apply, s.early_apply);
  EXPECT_EQ(g.hold_first_term, s.hold_first_term);
  EXPECT_EQ(g.apply_terms_on_arrival, s.apply_terms_on_arrival);
  EXPECT_EQ(g.apply_held_in_one_pass, s.apply_held_in_one_pass);
  EXPECT_EQ(g.apply_in_blocks, s.apply_in_blocks);
  EXPECT_EQ(g.server_lookahead, s.server_lookahead);
  EXPECT_EQ(g.pull_message_bytes, s.pull_message_bytes);
  EXPECT_EQ(g.parse_in_place, s.parse_in_place);
}

// Children this process has not reaped (zombies or running).
bool HasChildren() {
  int status = 0;
  const pid_t p = waitpid(-1, &status, WNOHANG);
  return p >= 0;  // -1 (ECHILD): none left
}

TEST(MeasurePsPathTest, ShardsInProcessesOfTheirOwn) {
  PsPathSetting setting;
  setting.server_binary = SelfPath();
  ASSERT_FALSE(setting.server_binary.empty());
  // 2 shards (2 children), 2 workers: every chunk pulled and pushed.
  absl::StatusOr<PsPathResult> r = MeasurePsPath(
      1 << 16, /*servers=*/2, /*workers=*/2, /*steps=*/2, setting);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->push_bytes_per_s, 0);
  EXPECT_GT(r->pull_bytes_per_s, 0);
  EXPECT_EQ(r->warm_steps, 2);
  // The children's CPU time counts: a share of the machine, read.
  EXPECT_TRUE(std::isfinite(r->push_cpu_busy));
  EXPECT_GT(r->push_cpu_busy, 0);
  // Copies on write are read from shards in this process: none here.
  EXPECT_TRUE(std::isnan(r->copies_per_step));
  // Both children were stopped and reaped.
  EXPECT_FALSE(HasChildren());
}

TEST(MeasurePsPathTest, AChildThatCannotServeIsAnError) {
  PsPathSetting setting;
  setting.server_binary = "/nonexistent/ps_bench";
  absl::StatusOr<PsPathResult> r = MeasurePsPath(1 << 10, 1, 1, 1, setting);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // The child role first: MeasurePsPath starts this binary with
  // --serve_shard.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--serve_shard") {
      absl::ParseCommandLine(argc, argv);
      return pstrain::bench::ServeShardFromFlags();
    }
  }
  return RUN_ALL_TESTS();
}
