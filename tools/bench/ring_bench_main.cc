// ring_bench: the ring rows of ps_bench alone (README "Performance"): the
// ring all-reduce over gRPC against OpenMPI's MPI_Allreduce over TCP, in
// interleaved rounds (ring then MPI in each round, for every rank count),
// ratios taken within a round and their medians over rounds, with the load
// average at the start of every round. README "Performance" says how to run
// it (psctl bench builds the MPI program; so can mpicxx by hand). Flags ->
// RingRoundsOptions -> RunRingRounds (tools/bench/ring_rounds.h) -> table.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "tools/bench/ring_rounds.h"
#include "tools/bench/stats.h"
#include "worker/allreduce/heap_reuse.h"

ABSL_FLAG(int, rounds, 3, "interleaved rounds (medians over rounds)");
ABSL_FLAG(int, iters, 5, "timed all-reduces per size (after one warm-up)");
ABSL_FLAG(std::string, ranks, "2,4", "rank counts, comma-separated");
ABSL_FLAG(std::string, mib, "1,4,16,64", "buffer sizes in MiB");
ABSL_FLAG(std::string, kib, "",
          "buffer sizes in KiB instead of --mib (latency of small buffers)");
ABSL_FLAG(int, segment_bytes, 1 << 20,
          "the ring's largest segment (allreduce.segment_bytes)");
ABSL_FLAG(std::string, wire_dtype, "fp32",
          "the ring's wire: fp32 or bf16 (network.wire_dtype; MPI stays "
          "fp32, so bf16 ratios compare half the bytes)");
ABSL_FLAG(bool, heap_reuse, true,
          "keep freed segment buffers mapped (KeepFreedHeapForReuse, as the "
          "worker does in mode allreduce); false: glibc's defaults");
ABSL_FLAG(std::string, mpirun, "mpirun", "OpenMPI's mpirun");
ABSL_FLAG(std::string, mpi_program, "",
          "tools/bench/mpi_allreduce.cc built with mpicxx; empty: the ring "
          "alone, no ratios (said so)");

namespace pstrain::bench {
namespace {

absl::StatusOr<RingRoundsOptions> OptionsFromFlags() {
  RingRoundsOptions o;
  o.rounds = absl::GetFlag(FLAGS_rounds);
  o.iters = absl::GetFlag(FLAGS_iters);
  const int segment_bytes = absl::GetFlag(FLAGS_segment_bytes);
  if (o.rounds < 1 || o.iters < 1 || segment_bytes < 4 || segment_bytes % 4) {
    return absl::InvalidArgumentError(
        "--rounds and --iters must be >= 1, --segment_bytes a positive "
        "multiple of 4");
  }
  PS_ASSIGN_OR_RETURN(o.ranks,
                      ParsePositiveList("ranks", absl::GetFlag(FLAGS_ranks)));
  const bool kib = !absl::GetFlag(FLAGS_kib).empty();
  PS_ASSIGN_OR_RETURN(std::vector<int> sizes,
                      kib ? ParsePositiveList("kib", absl::GetFlag(FLAGS_kib))
                          : ParsePositiveList("mib", absl::GetFlag(FLAGS_mib)));
  for (int m : sizes) o.bytes.push_back(uint64_t(m) << (kib ? 10 : 20));
  const std::string wire = absl::GetFlag(FLAGS_wire_dtype);
  if (wire != "fp32" && wire != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("--wire_dtype: expected fp32 or bf16, got '", wire, "'"));
  }
  o.ring.ring.segment_elems = segment_bytes / sizeof(float);
  if (wire == "bf16") o.ring.ring.wire_dtype = pstrain::v1::DTYPE_BF16;
  o.mpirun = absl::GetFlag(FLAGS_mpirun);
  o.mpi_program = absl::GetFlag(FLAGS_mpi_program);
  return o;
}

int Main() {
  absl::StatusOr<RingRoundsOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    fprintf(stderr, "ring_bench: %s\n",
            std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->mpi_program.empty()) {
    fprintf(stderr, "ring_bench: no --mpi_program: the ring alone\n");
  }
  if (absl::GetFlag(FLAGS_heap_reuse)) {
    if (absl::Status st = KeepFreedHeapForReuse(); !st.ok()) {
      fprintf(stderr, "ring_bench: --heap_reuse: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  InstallStopSignalHandlers();
  const RingRounds rounds =
      RunRingRounds(*options, RealRingMeasures(*options), StopRequested);
  if (rounds.stopped || StopRequested()) {
    fprintf(stderr, "ring_bench: interrupted\n");
    return 143;
  }
  printf(
      "\nring_bench (%d interleaved rounds, %d all-reduces each, %d-byte "
      "segments, %s wire, heap reuse %s; load average at the start of each "
      "round: %s)\n\n",
      options->rounds, options->iters, absl::GetFlag(FLAGS_segment_bytes),
      absl::GetFlag(FLAGS_wire_dtype).c_str(),
      absl::GetFlag(FLAGS_heap_reuse) ? "on" : "off",
      absl::StrJoin(rounds.load_averages, " | ").c_str());
  printf("%s", RingTable(RingRows(*options, rounds)).c_str());
  return rounds.failed ? 1 : 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::bench::Main();
}
