#include "tools/bench/ps_path_bench_flags.h"

#include <algorithm>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/bench/stats.h"

ABSL_FLAG(int, rounds, 3, "interleaved rounds");
ABSL_FLAG(std::string, mb, "16,64", "tensor sizes in decimal MB");
ABSL_FLAG(std::string, ps_servers, "1,2", "shard counts");
ABSL_FLAG(std::string, ps_workers, "1,4", "worker counts");
ABSL_FLAG(uint64_t, memory_params, 16 << 20,
          "parameters of the memory run (0: skip it)");
ABSL_FLAG(std::string, memory_workers, "1,4,16",
          "worker counts of the memory run");
ABSL_FLAG(bool, all_variants, false,
          "memory run: every server variant (ps_path.h), interleaved per N");
ABSL_FLAG(std::string, iperf3, "iperf3", "iperf3 binary");
ABSL_FLAG(bool, compare_early_apply, false,
          "also measure every push/pull row with ShardOptions.early_apply "
          "off, side by side");
ABSL_FLAG(bool, compare_hold_first_term, false,
          "also measure every push/pull row with ShardOptions.hold_first_term "
          "off (one worker: the term through the fixed-point sum)");
ABSL_FLAG(bool, compare_apply_terms, false,
          "also measure every push/pull row with "
          "ShardOptions.apply_terms_on_arrival off (one worker: the term held "
          "for the applier thread)");
ABSL_FLAG(bool, compare_push_streams, false,
          "also measure every push/pull row with each push split over two "
          "streams per shard (PsClientOptions.push_streams 2; rows tagged "
          "_split; the job's default is one stream)");

ABSL_FLAG(int, compare_pull_streams, 0,
          "also measure every push/pull row with each pull over this many "
          "streams at any size (PsClientOptions.pull_streams; rows tagged "
          "_pullstreams; 0: not; at most 8)");
ABSL_FLAG(int, compare_lookahead, 0,
          "also measure every push/pull row with the servers' HTTP/2 stream "
          "lookahead at this many bytes (rows tagged _lookahead; 0: not)");
ABSL_FLAG(bool, compare_worker_bdp, false,
          "also measure every push/pull row with the workers' channels "
          "without the HTTP/2 BDP probe (rows tagged _wbdpoff)");
ABSL_FLAG(int32_t, compare_push_message_kib, 0,
          "also measure every push/pull row with the workers' push messages "
          "at this many KiB (PsClientOptions.push_message_bytes; rows tagged "
          "_pushmsg; 0: not; 1..4096)");
ABSL_FLAG(int32_t, compare_pull_message_kib, 0,
          "also measure every push/pull row with the servers' pull messages "
          "at this many KiB (PsServiceOptions::pull_message_bytes; rows "
          "tagged _pullmsg; 0: not; 1..4096)");
ABSL_FLAG(bool, compare_parse, false,
          "also measure every push/pull row with the servers parsing push "
          "messages the other way than shipped: in place from gRPC's slices "
          "(rows tagged _inplace) or into a PushRequest (_parsecopy)");
ABSL_FLAG(int32_t, compare_chunk_kib, 0,
          "also measure every push/pull row with the shard map's chunks at "
          "this many KiB (rows tagged _chunks; 0: not; 1..4096)");
ABSL_FLAG(int32_t, chunk_kib, 0,
          "the shard map's chunks in KiB for every push/pull row (0: a real "
          "job's automatic size, at most 1 MiB; 1..4096)");
ABSL_FLAG(bool, compare_apply_block, false,
          "also measure every push/pull row with the shards' optimizer over "
          "whole chunks (ShardOptions.apply_block 0) instead of in blocks");
ABSL_FLAG(bool, compare_held_one_pass, false,
          "also measure every push/pull row with a one-worker term applied "
          "in two passes (ShardOptions.apply_held_in_one_pass off; rows "
          "tagged _twopass)");
ABSL_FLAG(bool, servers_in_process, false,
          "every row's shards in this process (default: each in a process "
          "of its own, this binary as a --serve_shard child)");
ABSL_FLAG(bool, compare_in_process, false,
          "beside each row, the same with its shards in this process "
          "(rows _inproc)");
ABSL_FLAG(bool, compare_op_threads, false,
          "also measure every push/pull row with each operation's shard "
          "tasks on threads started for it (PsClientOptions.reuse_op_threads "
          "off; rows tagged _ownthreads)");

namespace pstrain::bench {

absl::StatusOr<PsPathBenchOptions> PsPathBenchOptionsFromFlags(
    const char* self) {
  PsPathBenchOptions o;
  PsPathRoundsOptions& r = o.rounds;
  r.rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  PS_ASSIGN_OR_RETURN(r.mb, ParsePositiveList("mb", absl::GetFlag(FLAGS_mb)));
  PS_ASSIGN_OR_RETURN(
      r.servers,
      ParsePositiveList("ps_servers", absl::GetFlag(FLAGS_ps_servers)));
  PS_ASSIGN_OR_RETURN(
      r.workers,
      ParsePositiveList("ps_workers", absl::GetFlag(FLAGS_ps_workers)));
  r.compare_early_apply = absl::GetFlag(FLAGS_compare_early_apply);
  r.compare_hold_first_term = absl::GetFlag(FLAGS_compare_hold_first_term);
  r.compare_apply_terms = absl::GetFlag(FLAGS_compare_apply_terms);
  r.compare_push_streams = absl::GetFlag(FLAGS_compare_push_streams);
  r.compare_apply_block = absl::GetFlag(FLAGS_compare_apply_block);
  r.compare_held_one_pass = absl::GetFlag(FLAGS_compare_held_one_pass);
  r.compare_op_threads = absl::GetFlag(FLAGS_compare_op_threads);
  r.servers_in_process = absl::GetFlag(FLAGS_servers_in_process);
  r.compare_in_process = absl::GetFlag(FLAGS_compare_in_process);
  r.compare_lookahead = absl::GetFlag(FLAGS_compare_lookahead);
  r.compare_pull_streams = absl::GetFlag(FLAGS_compare_pull_streams);
  if (r.compare_pull_streams < 0 || r.compare_pull_streams > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("--compare_pull_streams: must be in [0, 8], got ",
                     r.compare_pull_streams));
  }
  r.compare_worker_bdp = absl::GetFlag(FLAGS_compare_worker_bdp);
  r.compare_push_message_kib = absl::GetFlag(FLAGS_compare_push_message_kib);
  r.compare_pull_message_kib = absl::GetFlag(FLAGS_compare_pull_message_kib);
  r.compare_parse = absl::GetFlag(FLAGS_compare_parse);
  r.chunk_kib = absl::GetFlag(FLAGS_chunk_kib);
  r.compare_chunk_kib = absl::GetFlag(FLAGS_compare_chunk_kib);
  if (r.compare_push_message_kib < 0 || r.compare_push_message_kib > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--compare_push_message_kib: must be in [0, 4096], got ",
                     r.compare_push_message_kib));
  }
  if (r.compare_pull_message_kib < 0 || r.compare_pull_message_kib > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--compare_pull_message_kib: must be in [0, 4096], got ",
                     r.compare_pull_message_kib));
  }
  if (r.compare_chunk_kib < 0 || r.compare_chunk_kib > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--compare_chunk_kib: must be in [0, 4096], got ",
                     r.compare_chunk_kib));
  }
  if (r.chunk_kib < 0 || r.chunk_kib > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chunk_kib: must be in [0, 4096], got ", r.chunk_kib));
  }
  o.iperf3 = absl::GetFlag(FLAGS_iperf3);
  o.memory_params = absl::GetFlag(FLAGS_memory_params);
  PS_ASSIGN_OR_RETURN(
      o.memory_workers,
      ParsePositiveList("memory_workers", absl::GetFlag(FLAGS_memory_workers)));
  o.all_variants = absl::GetFlag(FLAGS_all_variants);
  o.self_path = self;
  return o;
}

}  // namespace pstrain::bench
