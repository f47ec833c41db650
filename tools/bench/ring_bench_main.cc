// ring_bench: the ring rows of ps_bench alone (docs/performance.md): the
// ring all-reduce over gRPC against OpenMPI's MPI_Allreduce over TCP, in
// interleaved rounds, ratios taken within a round and their medians. Flags
// (ring_bench_flags.h) -> RingRoundsOptions -> RunRingRounds
// (ring_rounds.h) -> heading and table. Exit 0, 1 when a measurement
// failed, 2 on bad flags, 143 when interrupted.
#include <cstdio>
#include <string>

#include "absl/flags/parse.h"
#include "common/mutex_mode.h"
#include "common/signals.h"
#include "tools/bench/ring_bench_flags.h"
#include "tools/bench/ring_rounds.h"
#include "worker/allreduce/heap_reuse.h"

namespace pstrain::bench {
namespace {

int Main() {
  absl::StatusOr<RingRoundsOptions> options = RingRoundsOptionsFromFlags();
  if (!options.ok()) {
    fprintf(stderr, "ring_bench: %s\n",
            std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->mpi_program.empty()) {
    fprintf(stderr, "ring_bench: no --mpi_program: the ring alone\n");
  }
  const bool heap_reuse = HeapReuseFlag();
  if (absl::Status st = heap_reuse ? KeepFreedHeapForReuse() : absl::OkStatus();
      !st.ok()) {
    fprintf(stderr, "ring_bench: --heap_reuse: %s\n", st.ToString().c_str());
    return 1;
  }
  InstallStopSignalHandlers();
  const RingRounds rounds =
      RunRingRounds(*options, RealRingMeasures(*options), StopRequested);
  if (rounds.stopped || StopRequested()) {
    fprintf(stderr, "ring_bench: interrupted\n");
    return 143;
  }
  printf("%s", RingHeading(*options, heap_reuse, rounds).c_str());
  printf("%s", RingTable(RingRows(*options, rounds)).c_str());
  return rounds.failed ? 1 : 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  pstrain::SetMutexChecksForThisBuild();  // first: before any thread
  absl::ParseCommandLine(argc, argv);
  return pstrain::bench::Main();
}
