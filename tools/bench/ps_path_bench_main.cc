// ps_path_bench: ps_bench's push, pull and server-memory rows alone, for
// work on the data path (docs/performance.md; what a round measures and
// prints: tools/bench/ps_path_rounds.h). --compare_early_apply,
// --compare_hold_first_term and --compare_apply_terms add rows with that
// ShardOptions setting off, --compare_push_streams rows with every push
// split over two streams, and the other --compare_* flags
// (ps_path_bench_flags.cc) rows with their setting, in the same rounds. Flags
// (ps_path_bench_flags.h) -> PsPathBenchOptions -> RunPsPathBench -> exit;
// as a shard server child (--serve_shard, serve_shard_flags.h) it serves
// one shard instead.
#include <cstdio>
#include <string>

#include "absl/flags/parse.h"
#include "common/mutex_mode.h"
#include "tools/bench/bench_heap.h"
#include "tools/bench/ps_path.h"
#include "tools/bench/ps_path_bench_flags.h"
#include "tools/bench/ps_path_rounds.h"
#include "tools/bench/serve_shard_flags.h"

int main(int argc, char** argv) {
  pstrain::SetMutexChecksForThisBuild();  // first: before any thread
  absl::ParseCommandLine(argc, argv);
  if (pstrain::bench::ServeShardRequested()) {
    return pstrain::bench::ServeShardFromFlags();
  }
  pstrain::bench::KeepBenchHeapForReuse("ps_path_bench");
  absl::StatusOr<pstrain::bench::PsPathBenchOptions> options =
      pstrain::bench::PsPathBenchOptionsFromFlags(argv[0]);
  if (!options.ok()) {
    std::fprintf(stderr, "ps_path_bench: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  return pstrain::bench::RunPsPathBench(*options);
}
