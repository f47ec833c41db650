#include "tools/bench/ring_rounds.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/bench/stats.h"

namespace pstrain::bench {
namespace {

constexpr double kNaN = __builtin_nan("");

// "1048576-byte segments, fp32 wire, grpc.http2.bdp_probe=0 ..."
std::string RingSettings(const RingBenchOptions& ring) {
  return absl::StrCat(
      ring.ring.segment_elems * sizeof(float), "-byte segments, ",
      ring.ring.wire_dtype == pstrain::v1::DTYPE_BF16 ? "bf16" : "fp32",
      " wire, ", absl::StrJoin(ring.link_args, " ", absl::PairFormatter("=")));
}

std::string PerRound(const std::vector<double>& ratios) {
  std::vector<std::string> out;
  for (double x : ratios) {
    out.push_back(x == x ? absl::StrFormat("%.2f", x) : "n/a");
  }
  return absl::StrJoin(out, ", ");
}

// Stores one measurement of `ranks` ranks in round k of `ms`; false (with
// the error printed) when it failed.
bool Record(const char* what, int ranks, int k,
            const absl::StatusOr<std::map<uint64_t, double>>& seconds,
            std::map<std::pair<int, uint64_t>, std::vector<double>>* ms) {
  if (!seconds.ok()) {
    fprintf(stderr, "ring_bench: %s %d ranks: %s\n", what, ranks,
            seconds.status().ToString().c_str());
    return false;
  }
  for (const auto& [b, s] : *seconds) {
    auto it = ms->find({ranks, b});
    if (it != ms->end()) it->second[k] = s * 1e3;
  }
  return true;
}

}  // namespace

RingMeasures RealRingMeasures(const RingRoundsOptions& options) {
  RingMeasures m;
  m.ring = [&options](int ranks) {
    return RingSeconds(ranks, options.bytes, options.iters, options.ring);
  };
  if (options.compare.has_value()) {
    m.compared = [&options](int ranks) {
      return RingSeconds(ranks, options.bytes, options.iters, *options.compare);
    };
  }
  if (!options.mpi_program.empty()) {
    m.mpi = [&options](int ranks) {
      return MpiSeconds(options.mpirun, options.mpi_program, ranks,
                        options.bytes, options.iters);
    };
  }
  return m;
}

RingRounds RunRingRounds(const RingRoundsOptions& options,
                         const RingMeasures& measures,
                         absl::FunctionRef<bool()> stop) {
  RingRounds out;
  for (int r : options.ranks) {
    for (uint64_t b : options.bytes) {
      out.ring_ms[{r, b}].assign(options.rounds, kNaN);
      out.mpi_ms[{r, b}].assign(options.rounds, kNaN);
      if (measures.compared) {
        out.compared_ms[{r, b}].assign(options.rounds, kNaN);
      }
    }
  }
  for (int k = 0; k < options.rounds; ++k) {
    if (stop()) {
      out.stopped = true;
      return out;
    }
    out.load_averages.push_back(LoadAverage());
    fprintf(stderr, "ring_bench: round %d/%d (load average %s)\n", k + 1,
            options.rounds, out.load_averages.back().c_str());
    for (int r : options.ranks) {
      auto ring = [&] {
        if (!Record("ring", r, k, measures.ring(r), &out.ring_ms)) {
          ++out.failed;
        }
      };
      auto compared = [&] {
        if (measures.compared &&
            !Record("compared ring", r, k, measures.compared(r),
                    &out.compared_ms)) {
          ++out.failed;
        }
      };
      if (k % 2 == 0) {
        ring();
        compared();
      } else {
        compared();
        ring();
      }
      if (!measures.mpi) continue;
      if (stop()) {
        out.stopped = true;
        return out;
      }
      if (!Record("mpirun", r, k, measures.mpi(r), &out.mpi_ms)) ++out.failed;
    }
  }
  return out;
}

std::vector<RingRow> RingRows(const RingRoundsOptions& options,
                              const RingRounds& rounds) {
  std::vector<RingRow> rows;
  for (int r : options.ranks) {
    for (uint64_t b : options.bytes) {
      RingRow row;
      row.ranks = r;
      row.bytes = b;
      std::vector<double> ring = rounds.ring_ms.at({r, b});
      std::vector<double> mpi = rounds.mpi_ms.at({r, b});
      ring.resize(options.rounds, kNaN);
      mpi.resize(options.rounds, kNaN);
      for (int k = 0; k < options.rounds; ++k) {
        // NaN when either is (a round that measured nothing).
        row.per_round.push_back(mpi[k] / ring[k]);
      }
      row.ring_ms = Median(ring);
      row.mpi_ms = Median(mpi);
      row.ratio = Median(row.per_round);
      if (auto it = rounds.compared_ms.find({r, b});
          it != rounds.compared_ms.end()) {
        std::vector<double> compared = it->second;
        compared.resize(options.rounds, kNaN);
        for (int k = 0; k < options.rounds; ++k) {
          row.compared_per_round.push_back(mpi[k] / compared[k]);
        }
        row.compared_ms = Median(compared);
        row.compared_ratio = Median(row.compared_per_round);
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::string RingHeading(const RingRoundsOptions& options, bool heap_reuse,
                        const RingRounds& rounds) {
  return absl::StrCat(
      "\nring_bench (", options.rounds, " interleaved rounds, ", options.iters,
      " all-reduces each, ", RingSettings(options.ring),
      options.compare.has_value()
          ? absl::StrCat("; compared: ", RingSettings(*options.compare))
          : "",
      "; heap reuse ", heap_reuse ? "on" : "off",
      "; load average at the start of each round: ",
      absl::StrJoin(rounds.load_averages, " | "), ")\n\n");
}

std::string RingTable(const std::vector<RingRow>& rows) {
  const bool compared = !rows.empty() && !rows[0].compared_per_round.empty();
  std::string out = absl::StrCat(
      "| buffer | ranks | ring ms | MPI ms | MPI / ring | per round |",
      compared ? " compared ring ms | MPI / compared | per round |" : "",
      "\n|---|--:|--:|--:|--:|---|", compared ? "--:|--:|---|" : "", "\n");
  for (const RingRow& row : rows) {
    absl::StrAppendFormat(&out, "| %s | %d | %.3g | %.3g | %.2f | %s |",
                          SizeName(row.bytes), row.ranks, row.ring_ms,
                          row.mpi_ms, row.ratio, PerRound(row.per_round));
    if (compared) {
      absl::StrAppendFormat(&out, " %.3g | %.2f | %s |", row.compared_ms,
                            row.compared_ratio,
                            PerRound(row.compared_per_round));
    }
    out += "\n";
  }
  return out;
}

std::string SizeName(uint64_t bytes) {
  return bytes % (1 << 20) == 0 ? absl::StrCat(bytes >> 20, " MiB")
                                : absl::StrCat(bytes >> 10, " KiB");
}

}  // namespace pstrain::bench
