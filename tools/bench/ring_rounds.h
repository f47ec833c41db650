// ring_bench's measuring loop and report (docs/performance.md): the ring
// all-reduce (tools/bench/ring.h) against OpenMPI's MPI_Allreduce in
// interleaved rounds (in each round, for every rank count: the ring, then
// MPI), milliseconds kept per round, ratios taken within a round and their
// medians over rounds, with the load average at the start of every round.
// Optionally the ring also runs with other settings in the same rounds
// (`compare`), so that a setting is judged side by side under the same load.
// ring_bench_flags.cc parses flags into RingRoundsOptions; ring_bench_main.cc
// runs the rounds and prints.
#ifndef PSTRAIN_TOOLS_BENCH_RING_ROUNDS_H_
#define PSTRAIN_TOOLS_BENCH_RING_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "tools/bench/ring.h"

namespace pstrain::bench {

struct RingRoundsOptions {
  int rounds = 3;               // interleaved rounds, >= 1
  int iters = 5;                // timed all-reduces per size, >= 1
  std::vector<int> ranks;       // rank counts, each >= 1, in this order
  std::vector<uint64_t> bytes;  // buffer sizes, in this order
  RingBenchOptions ring;        // the ring's segment size, wire, link args
  // When set, the ring is also measured with these settings in every round,
  // next to `ring` (`ring` first in even rounds, last in odd ones).
  std::optional<RingBenchOptions> compare;
  std::string mpirun = "mpirun";
  std::string mpi_program;  // empty: the ring alone, no MPI column
};

// One measurement of `ranks` ranks: seconds of one all-reduce per buffer
// size (key = bytes), as RingSeconds and MpiSeconds return.
using RoundMeasure =
    std::function<absl::StatusOr<std::map<uint64_t, double>>(int ranks)>;

struct RingMeasures {
  RoundMeasure ring;
  RoundMeasure compared;  // the ring with options.compare; empty: none
  RoundMeasure mpi;       // empty: not measured
};

// RingSeconds (also with options.compare when set) and (when
// options.mpi_program is set) MpiSeconds with the options' sizes,
// iterations and ring settings. `options` must outlive the measures.
RingMeasures RealRingMeasures(const RingRoundsOptions& options);

// Milliseconds per round (NaN where a round measured nothing) of each
// (ranks, bytes) of the options, for the ring and MPI.
struct RingRounds {
  std::map<std::pair<int, uint64_t>, std::vector<double>> ring_ms, mpi_ms;
  std::map<std::pair<int, uint64_t>, std::vector<double>> compared_ms;
  std::vector<std::string> load_averages;  // at the start of each round run
  int failed = 0;        // measurements that returned an error
  bool stopped = false;  // `stop` said so before every round had run
};

// Runs options.rounds rounds; in each, for every rank count in order,
// measures.ring and measures.compared (when set; ring first in even rounds,
// compared first in odd ones), then measures.mpi. A failed measurement is
// printed to stderr ("ring_bench: ring 4 ranks: ...", "compared ring") and
// counted; the round goes on. Sizes a measure returns outside options.bytes
// are ignored. `stop` is asked before
// each round and before each MPI measurement; once it says true no more is
// measured. Progress lines go to stderr.
RingRounds RunRingRounds(const RingRoundsOptions& options,
                         const RingMeasures& measures,
                         absl::FunctionRef<bool()> stop);

// One line of the report: medians over rounds of the rounds that measured
// (NaN when none did); ratio = median of MPI / ring taken within each round
// where both measured; per_round those ratios, NaN where a round lacks one.
// The compared_* fields are the same for the compared ring (empty
// compared_per_round when nothing was compared).
struct RingRow {
  int ranks = 0;
  uint64_t bytes = 0;
  double ring_ms = 0;
  double mpi_ms = 0;
  double ratio = 0;
  std::vector<double> per_round;
  double compared_ms = 0;
  double compared_ratio = 0;
  std::vector<double> compared_per_round;
};

// The rows of every rank count (outer) and size (inner), in options' order.
std::vector<RingRow> RingRows(const RingRoundsOptions& options,
                              const RingRounds& rounds);

// The line above the table: rounds, all-reduces, segment bytes, wire, link
// arguments, the compared settings (when any), whether freed heap is kept
// (`heap_reuse`) and the load average at the start of each round, framed by
// blank lines.
std::string RingHeading(const RingRoundsOptions& options, bool heap_reuse,
                        const RingRounds& rounds);

// The Markdown table of `rows`: header, alignment line, one line per row;
// with three more columns (compared ring ms, MPI / compared, per round)
// when the rows have compared values.
std::string RingTable(const std::vector<RingRow>& rows);

// "4 MiB" for whole MiB, else "64 KiB" (whole KiB).
std::string SizeName(uint64_t bytes);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_RING_ROUNDS_H_
