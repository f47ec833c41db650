// ring_bench's rounds with fake measurements: interleaving, failures and
// stops, per-round ratios and their medians and the table.
#include "tools/bench/ring_rounds.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain::bench {
namespace {

constexpr uint64_t kKiB = 1 << 10;
constexpr uint64_t kMiB = 1 << 20;

RingRoundsOptions TwoByTwo() {
  RingRoundsOptions o;
  o.rounds = 3;
  o.ranks = {2, 4};
  o.bytes = {64 * kKiB, kMiB};
  return o;
}

// Seconds that encode who measured what: ranks + bytes / 1 MiB + round / 8
// (ring), twice that (MPI).
std::map<uint64_t, double> Fake(const RingRoundsOptions& o, int ranks,
                                int round, double factor) {
  std::map<uint64_t, double> s;
  for (uint64_t b : o.bytes) {
    s[b] = factor * (ranks + double(b) / kMiB + round / 8.0);
  }
  return s;
}

TEST(RunRingRounds, InterleavesRingThenMpiPerRankCountInEveryRound) {
  const RingRoundsOptions o = TwoByTwo();
  std::vector<std::string> calls;
  int round = 0;
  RingMeasures m;
  m.ring = [&](int r) -> absl::StatusOr<std::map<uint64_t, double>> {
    calls.push_back(absl::StrCat("ring", r));
    if (r == 2 && calls.size() > 1) ++round;  // the first call of a round
    return Fake(o, r, round, 1);
  };
  m.mpi = [&](int r) -> absl::StatusOr<std::map<uint64_t, double>> {
    calls.push_back(absl::StrCat("mpi", r));
    return Fake(o, r, round, 2);
  };
  const RingRounds rounds = RunRingRounds(o, m, [] { return false; });
  EXPECT_EQ(calls, (std::vector<std::string>{
                       "ring2", "mpi2", "ring4", "mpi4", "ring2", "mpi2",
                       "ring4", "mpi4", "ring2", "mpi2", "ring4", "mpi4"}));
  EXPECT_EQ(rounds.failed, 0);
  EXPECT_FALSE(rounds.stopped);
  EXPECT_EQ(rounds.load_averages.size(), 3u);
  // Milliseconds, per round.
  EXPECT_EQ(rounds.ring_ms.at({4, kMiB}),
            (std::vector<double>{5000, 5125, 5250}));
  EXPECT_EQ(rounds.mpi_ms.at({2, 64 * kKiB})[1], 4375);
}

TEST(RunRingRounds, TheComparedRingRunsBesideTheRingInAlternatingOrder) {
  RingRoundsOptions o = TwoByTwo();
  o.ranks = {2};
  std::vector<std::string> calls;
  int round = 0;
  RingMeasures m;
  m.ring = [&](int r) -> absl::StatusOr<std::map<uint64_t, double>> {
    calls.push_back("ring");
    return Fake(o, r, round, 1);
  };
  m.compared = [&](int r) -> absl::StatusOr<std::map<uint64_t, double>> {
    calls.push_back("compared");
    // The second round's compared ring fails.
    if (round == 1) return absl::DeadlineExceededError("segment lost");
    return Fake(o, r, round, 4);
  };
  m.mpi = [&](int r) -> absl::StatusOr<std::map<uint64_t, double>> {
    calls.push_back("mpi");
    return Fake(o, r, round++, 2);
  };
  const RingRounds rounds = RunRingRounds(o, m, [] { return false; });
  EXPECT_EQ(calls, (std::vector<std::string>{"ring", "compared", "mpi",
                                             "compared", "ring", "mpi", "ring",
                                             "compared", "mpi"}));
  EXPECT_EQ(rounds.failed, 1);
  const std::vector<double>& compared = rounds.compared_ms.at({2, kMiB});
  EXPECT_EQ(compared[0], 12000);
  EXPECT_TRUE(std::isnan(compared[1]));
  EXPECT_EQ(compared[2], 13000);
  const std::vector<RingRow> rows = RingRows(o, rounds);
  ASSERT_EQ(rows.size(), 2u);
  // MPI / compared is 1/2 in the rounds that measured both; MPI / ring 2.
  EXPECT_EQ(rows[1].ratio, 2);
  EXPECT_EQ(rows[1].compared_ms, 12500);
  EXPECT_EQ(rows[1].compared_ratio, 0.5);
  EXPECT_EQ(rows[1].compared_per_round.size(), 3u);
  EXPECT_TRUE(std::isnan(rows[1].compared_per_round[1]));
}

TEST(RunRingRounds, AFailedMeasurementIsCountedAndLeavesItsRoundEmpty) {
  const RingRoundsOptions o = TwoByTwo();
  int mpi_calls = 0;
  RingMeasures m;
  m.ring = [&](int r) -> absl::StatusOr<std::map<uint64_t, double>> {
    return Fake(o, r, 0, 1);
  };
  m.mpi = [&](int r) -> absl::StatusOr<std::map<uint64_t, double>> {
    // The second round's 4 ranks fail.
    if (++mpi_calls == 4) return absl::UnavailableError("mpirun exited 1");
    return Fake(o, r, 0, 2);
  };
  const RingRounds rounds = RunRingRounds(o, m, [] { return false; });
  EXPECT_EQ(rounds.failed, 1);
  EXPECT_EQ(mpi_calls, 6);  // the round went on
  const std::vector<double>& mpi = rounds.mpi_ms.at({4, kMiB});
  EXPECT_EQ(mpi[0], 10000);
  EXPECT_TRUE(std::isnan(mpi[1]));
  EXPECT_EQ(mpi[2], 10000);
  EXPECT_FALSE(std::isnan(rounds.mpi_ms.at({2, kMiB})[1]));
}

TEST(RunRingRounds, StopsBeforeTheNextMeasurement) {
  const RingRoundsOptions o = TwoByTwo();
  int ring_calls = 0, mpi_calls = 0;
  RingMeasures m;
  m.ring = [&](int r) -> absl::StatusOr<std::map<uint64_t, double>> {
    ++ring_calls;
    return Fake(o, r, 0, 1);
  };
  m.mpi = [&](int r) -> absl::StatusOr<std::map<uint64_t, double>> {
    ++mpi_calls;
    return Fake(o, r, 0, 2);
  };
  // Stop once the third ring measurement (round 2, 2 ranks) is done.
  const RingRounds rounds =
      RunRingRounds(o, m, [&] { return ring_calls >= 3; });
  EXPECT_TRUE(rounds.stopped);
  EXPECT_EQ(ring_calls, 3);
  EXPECT_EQ(mpi_calls, 2);
  EXPECT_EQ(rounds.load_averages.size(), 2u);
}

TEST(RunRingRounds, WithoutMpiOnlyTheRingIsMeasured) {
  RingRoundsOptions o = TwoByTwo();
  o.rounds = 2;
  int ring_calls = 0;
  RingMeasures m;
  m.ring = [&](int r) -> absl::StatusOr<std::map<uint64_t, double>> {
    ++ring_calls;
    // A size nobody asked for is ignored.
    std::map<uint64_t, double> s = Fake(o, r, 0, 1);
    s[3 * kMiB] = 1;
    return s;
  };
  const RingRounds rounds = RunRingRounds(o, m, [] { return false; });
  EXPECT_EQ(ring_calls, 4);
  EXPECT_EQ(rounds.ring_ms.count({2, 3 * kMiB}), 0u);
  const std::vector<RingRow> rows = RingRows(o, rounds);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].ring_ms, 2062.5);
  EXPECT_TRUE(std::isnan(rows[0].mpi_ms));
  EXPECT_TRUE(std::isnan(rows[0].ratio));
}

TEST(RingRows, RatiosAreTakenWithinARoundThenTheirMedian) {
  RingRoundsOptions o;
  o.rounds = 3;
  o.ranks = {2};
  o.bytes = {kMiB};
  RingRounds rounds;
  rounds.ring_ms[{2, kMiB}] = {1, 2, 4};
  rounds.mpi_ms[{2, kMiB}] = {2, 2, __builtin_nan("")};
  const std::vector<RingRow> rows = RingRows(o, rounds);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].ring_ms, 2);
  EXPECT_EQ(rows[0].mpi_ms, 2);
  // Rounds 1 and 2 only: 2/1 and 2/2, median 1.5 (not 2 / 2 = 1, the ratio
  // of the medians).
  EXPECT_EQ(rows[0].ratio, 1.5);
  EXPECT_EQ(RingTable(rows),
            "| buffer | ranks | ring ms | MPI ms | MPI / ring | per round |\n"
            "|---|--:|--:|--:|--:|---|\n"
            "| 1 MiB | 2 | 2 | 2 | 1.50 | 2.00, 1.00, n/a |\n");
  rounds.compared_ms[{2, kMiB}] = {4, 1, 1};
  EXPECT_EQ(RingTable(RingRows(o, rounds)),
            "| buffer | ranks | ring ms | MPI ms | MPI / ring | per round | "
            "compared ring ms | MPI / compared | per round |\n"
            "|---|--:|--:|--:|--:|---|--:|--:|---|\n"
            "| 1 MiB | 2 | 2 | 2 | 1.50 | 2.00, 1.00, n/a | 1 | 1.25 | "
            "0.50, 2.00, n/a |\n");
}

TEST(RingRows, EveryRankCountThenEverySizeInTheOptionsOrder) {
  const RingRoundsOptions o = TwoByTwo();
  RingRounds rounds;
  for (int r : o.ranks) {
    for (uint64_t b : o.bytes) {
      rounds.ring_ms[{r, b}] = {1, 1, 1};
      rounds.mpi_ms[{r, b}] = {1, 1, 1};
    }
  }
  std::vector<std::pair<int, uint64_t>> order;
  for (const RingRow& row : RingRows(o, rounds)) {
    order.push_back({row.ranks, row.bytes});
  }
  EXPECT_EQ(order, (std::vector<std::pair<int, uint64_t>>{
                       {2, 64 * kKiB}, {2, kMiB}, {4, 64 * kKiB}, {4, kMiB}}));
}

TEST(RingHeading, SaysTheSettingsAndTheLoadOfEveryRound) {
  RingRoundsOptions o;
  o.rounds = 2;
  o.iters = 7;
  o.ring.ring.segment_elems = 1024;
  o.ring.ring.wire_dtype = pstrain::v1::DTYPE_BF16;
  o.ring.link_args = {{"grpc.a", 1}, {"grpc.b", 0}};
  RingRounds rounds;
  rounds.load_averages = {"1.0 2.0 3.0", "4.0 5.0 6.0"};
  EXPECT_EQ(RingHeading(o, /*heap_reuse=*/false, rounds),
            "\nring_bench (2 interleaved rounds, 7 all-reduces each, "
            "4096-byte segments, bf16 wire, grpc.a=1 grpc.b=0; heap reuse off; "
            "load average at the start of each round: 1.0 2.0 3.0 | 4.0 5.0 "
            "6.0)\n\n");
  o.ring.ring.wire_dtype = pstrain::v1::DTYPE_F32;
  o.compare = o.ring;
  o.compare->ring.segment_elems = 512;
  o.compare->link_args = {{"grpc.b", 1}};
  EXPECT_NE(RingHeading(o, /*heap_reuse=*/true, rounds)
                .find("4096-byte segments, fp32 wire, grpc.a=1 grpc.b=0; "
                      "compared: 2048-byte segments, fp32 wire, grpc.b=1; "
                      "heap reuse on;"),
            std::string::npos);
}

TEST(SizeName, WholeMebibytesElseKibibytes) {
  EXPECT_EQ(SizeName(kMiB), "1 MiB");
  EXPECT_EQ(SizeName(64 * kMiB), "64 MiB");
  EXPECT_EQ(SizeName(4 * kKiB), "4 KiB");
  EXPECT_EQ(SizeName(1536 * kKiB), "1536 KiB");
}

}  // namespace
}  // namespace pstrain::bench
