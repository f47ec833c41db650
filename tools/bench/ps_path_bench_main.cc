// ps_path_bench: ps_bench's push, pull and server-memory rows alone, for
// work on the parameter server's data path (README "Performance"). In each
// of R interleaved rounds: /proc/loadavg, iperf3 -l 1M on loopback, a bare
// gRPC stream of the same bytes (upload and download), then pstrain push and
// pull for every size x servers x workers (tools/bench/ps_path.h), with
// --compare_early_apply also with ShardOptions.early_apply off. After the
// rounds, the shipped shard server's peak RSS for N workers (a child
// process, as ps_bench measures it). Prints every per-round value and the
// median ratios; no goal is asserted. Flags (below) -> PsPathBenchOptions ->
// RunPsPathBench (tools/bench/ps_path_rounds.h) -> exit status.
#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/status_macros.h"
#include "tools/bench/ps_path_rounds.h"
#include "tools/bench/serve_shard_flags.h"
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
// Child role (--serve_shard ...): tools/bench/serve_shard_flags.h.

namespace pstrain::bench {
namespace {

absl::StatusOr<PsPathBenchOptions> OptionsFromFlags(const char* self) {
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
  o.iperf3 = absl::GetFlag(FLAGS_iperf3);
  o.memory_params = absl::GetFlag(FLAGS_memory_params);
  PS_ASSIGN_OR_RETURN(
      o.memory_workers,
      ParsePositiveList("memory_workers", absl::GetFlag(FLAGS_memory_workers)));
  o.all_variants = absl::GetFlag(FLAGS_all_variants);
  o.self_path = self;
  return o;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (pstrain::bench::ServeShardRequested()) {
    return pstrain::bench::ServeShardFromFlags();
  }
  absl::StatusOr<pstrain::bench::PsPathBenchOptions> options =
      pstrain::bench::OptionsFromFlags(argv[0]);
  if (!options.ok()) {
    std::fprintf(stderr, "ps_path_bench: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  return pstrain::bench::RunPsPathBench(*options);
}
