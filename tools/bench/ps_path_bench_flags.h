// ps_path_bench's flags (--rounds, --mb, --ps_servers, --ps_workers,
// --memory_params, --memory_workers, --all_variants, --iperf3,
// --compare_early_apply, --compare_hold_first_term, --compare_apply_terms,
// --compare_lookahead, --compare_worker_bdp, --compare_push_streams,
// --compare_push_message_kib, --compare_pull_message_kib, --compare_parse,
// --compare_chunk_kib, --chunk_kib, --compare_apply_block,
// --compare_held_one_pass, --compare_op_threads),
// turned into PsPathBenchOptions. Only ps_path_bench_main.cc calls this (the
// flags are part of that binary, not of any library user).
#ifndef PSTRAIN_TOOLS_BENCH_PS_PATH_BENCH_FLAGS_H_
#define PSTRAIN_TOOLS_BENCH_PS_PATH_BENCH_FLAGS_H_

#include "absl/status/statusor.h"
#include "tools/bench/ps_path_rounds.h"

namespace pstrain::bench {

// The options the flags give, `self` the binary (for the memory run's
// child); INVALID_ARGUMENT naming the flag when a list is not of positive
// numbers.
absl::StatusOr<PsPathBenchOptions> PsPathBenchOptionsFromFlags(
    const char* self);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_PS_PATH_BENCH_FLAGS_H_
