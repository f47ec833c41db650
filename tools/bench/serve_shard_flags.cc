#include "tools/bench/serve_shard_flags.h"

#include <cstdint>

#include "absl/flags/flag.h"
#include "tools/bench/ps_path.h"

// Defaults are ServeShardSpec's; ServeShardArgv passes every flag.
ABSL_FLAG(bool, serve_shard, false, "internal: serve one shard (child role)");
ABSL_FLAG(uint64_t, elems, 0, "internal: --serve_shard tensor elements");
ABSL_FLAG(int, workers, 1, "internal: --serve_shard number of workers");
ABSL_FLAG(int, servers, 1, "internal: --serve_shard shards of the job");
ABSL_FLAG(int, shard, 0, "internal: --serve_shard the shard served");
ABSL_FLAG(int, optimizer, pstrain::v1::OptimizerConfig::MOMENTUM,
          "internal: --serve_shard OptimizerConfig.Kind");
ABSL_FLAG(bool, bdp_probe, true, "internal: --serve_shard HTTP/2 BDP probe");
ABSL_FLAG(int64_t, mmap_threshold, 0,
          "internal: --serve_shard glibc M_MMAP_THRESHOLD (0: default)");
ABSL_FLAG(int64_t, trim_threshold, 0,
          "internal: --serve_shard glibc M_TRIM_THRESHOLD (0: default)");
ABSL_FLAG(int, max_concurrent_pushes, -1,
          "internal: --serve_shard push streams summed at once (-1: default)");
ABSL_FLAG(int, malloc_arena_max, 0,
          "internal: --serve_shard glibc M_ARENA_MAX (0: default)");
ABSL_FLAG(bool, grpc_tcp_read_chunks, true,
          "internal: --serve_shard gRPC tcp_read_chunks experiment");
ABSL_FLAG(int, wire_dtype, pstrain::v1::DTYPE_F32,
          "internal: --serve_shard network.wire_dtype (DType)");
ABSL_FLAG(uint64_t, chunk_bytes, 0,
          "internal: --serve_shard chunk bytes (0: a real job's)");
ABSL_FLAG(bool, early_apply, true, "internal: --serve_shard ShardOptions");
ABSL_FLAG(bool, hold_first_term, true, "internal: --serve_shard ShardOptions");
ABSL_FLAG(bool, apply_terms_on_arrival, true,
          "internal: --serve_shard ShardOptions");
ABSL_FLAG(bool, apply_held_in_one_pass, true,
          "internal: --serve_shard ShardOptions");
ABSL_FLAG(bool, apply_in_blocks, true,
          "internal: --serve_shard ShardOptions (false: apply_block 0)");
ABSL_FLAG(int, server_lookahead, 0,
          "internal: --serve_shard HTTP/2 stream lookahead (0: default)");
ABSL_FLAG(uint64_t, pull_message_bytes, 0,
          "internal: --serve_shard pull message payload (0: default)");
ABSL_FLAG(bool, parse_in_place, pstrain::kParsePushesInPlace,
          "internal: --serve_shard PsServiceOptions.parse_pushes_in_place");

namespace pstrain::bench {

bool ServeShardRequested() { return absl::GetFlag(FLAGS_serve_shard); }

ServeShardSpec ServeShardSpecFromFlags() {
  ServeShardSpec spec;
  spec.elems = absl::GetFlag(FLAGS_elems);
  spec.workers = absl::GetFlag(FLAGS_workers);
  spec.servers = absl::GetFlag(FLAGS_servers);
  spec.shard = absl::GetFlag(FLAGS_shard);
  spec.optimizer = static_cast<pstrain::v1::OptimizerConfig::Kind>(
      absl::GetFlag(FLAGS_optimizer));
  ServerVariant& variant = spec.variant;
  variant.bdp_probe = absl::GetFlag(FLAGS_bdp_probe);
  variant.mmap_threshold = absl::GetFlag(FLAGS_mmap_threshold);
  variant.trim_threshold = absl::GetFlag(FLAGS_trim_threshold);
  variant.max_concurrent_pushes = absl::GetFlag(FLAGS_max_concurrent_pushes);
  variant.malloc_arena_max = absl::GetFlag(FLAGS_malloc_arena_max);
  variant.grpc_tcp_read_chunks = absl::GetFlag(FLAGS_grpc_tcp_read_chunks);
  PsPathSetting& s = spec.setting;
  s.wire_dtype =
      static_cast<pstrain::v1::DType>(absl::GetFlag(FLAGS_wire_dtype));
  s.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  s.early_apply = absl::GetFlag(FLAGS_early_apply);
  s.hold_first_term = absl::GetFlag(FLAGS_hold_first_term);
  s.apply_terms_on_arrival = absl::GetFlag(FLAGS_apply_terms_on_arrival);
  s.apply_held_in_one_pass = absl::GetFlag(FLAGS_apply_held_in_one_pass);
  s.apply_in_blocks = absl::GetFlag(FLAGS_apply_in_blocks);
  s.server_lookahead = absl::GetFlag(FLAGS_server_lookahead);
  s.pull_message_bytes = absl::GetFlag(FLAGS_pull_message_bytes);
  s.parse_in_place = absl::GetFlag(FLAGS_parse_in_place);
  return spec;
}

int ServeShardFromFlags() { return ServeShardMain(ServeShardSpecFromFlags()); }

}  // namespace pstrain::bench
