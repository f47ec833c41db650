#include "worker/model/straggler_model.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

using pstrain::v1::WorkerConfig;

WorkerConfig NoStragglers() {
  WorkerConfig w;
  w.set_compute_ms(10);
  w.set_straggler_rank(-1);
  w.set_straggler_factor(1);
  w.set_transient_straggler_p(0);
  w.set_transient_straggler_factor(2);
  w.set_pause_rank(-1);
  return w;
}

TEST(StragglerModelTest, NoModelsNoSlowdown) {
  const WorkerConfig w = NoStragglers();
  for (int64_t step = 0; step < 200; ++step) {
    for (uint32_t rank = 0; rank < 4; ++rank) {
      EXPECT_EQ(EmulatedStepTime(w, 7, rank, step, absl::Milliseconds(10)),
                absl::Milliseconds(10));
    }
  }
}

TEST(StragglerModelTest, PersistentStragglerSlowsItsRankOnly) {
  WorkerConfig w = NoStragglers();
  w.set_straggler_rank(2);
  w.set_straggler_factor(3);
  EXPECT_EQ(SlowdownFor(w, 7, 2, 5).factor, 3);
  EXPECT_EQ(SlowdownFor(w, 7, 1, 5).factor, 1);
}

TEST(StragglerModelTest, TransientDrawsAreReproducibleAndSeeded) {
  std::vector<double> a, b, other_seed;
  for (int64_t step = 0; step < 500; ++step) {
    a.push_back(TransientFactor(0.3, 2, 7, 1, step));
    b.push_back(TransientFactor(0.3, 2, 7, 1, step));
    other_seed.push_back(TransientFactor(0.3, 2, 8, 1, step));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other_seed);
  // Ranks draw independently.
  int differ = 0;
  for (int64_t step = 0; step < 500; ++step) {
    differ += TransientFactor(0.3, 2, 7, 1, step) !=
              TransientFactor(0.3, 2, 7, 2, step);
  }
  EXPECT_GT(differ, 0);
}

TEST(StragglerModelTest, ZeroProbabilityGivesNoSlowdown) {
  WorkerConfig w = NoStragglers();
  w.set_transient_straggler_p(0);
  w.set_transient_straggler_factor(5);
  for (int64_t step = 0; step < 1000; ++step) {
    EXPECT_EQ(SlowdownFor(w, 7, step % 4, step).factor, 1);
  }
}

// The draws follow the stated law: the share of slowed steps is about p,
// every slowed factor is in [min, cap x min], and the Pareto(shape 2)
// quantiles hold: P(X > 2 x_m) = 1/4, median 1.41 x_m. Bounds are several
// standard deviations wide for 20,000 draws (a fixed seed: deterministic).
TEST(StragglerModelTest, TransientFollowsTheParetoLaw) {
  const double p = 0.25, xm = 3;
  int slowed = 0, above_twice = 0;
  std::vector<double> factors;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double f = TransientFactor(p, xm, 11, i % 8, i / 8);
    if (f == 1.0) continue;
    ++slowed;
    EXPECT_GE(f, xm);
    EXPECT_LE(f, kTransientCap * xm);
    above_twice += f > 2 * xm;
    factors.push_back(f);
  }
  EXPECT_NEAR(static_cast<double>(slowed) / n, p, 0.02);
  EXPECT_NEAR(static_cast<double>(above_twice) / slowed, 0.25, 0.03);
  std::sort(factors.begin(), factors.end());
  EXPECT_NEAR(factors[factors.size() / 2] / xm, 1.4142, 0.05);
  // Heavy tail: some draws reach far beyond the median, up to the cap.
  EXPECT_GT(factors.back(), 5 * xm);
}

TEST(StragglerModelTest, ProbabilityOneSlowsEveryStep) {
  for (int64_t step = 0; step < 100; ++step) {
    EXPECT_GE(TransientFactor(1.0, 2, 7, 0, step), 2);
  }
}

TEST(StragglerModelTest, PauseHappensOnceAtItsStepOnItsRank) {
  WorkerConfig w = NoStragglers();
  w.set_pause_rank(1);
  w.set_pause_at_step(12);
  w.set_pause_s(0.75);
  int pauses = 0;
  for (int64_t step = 0; step < 40; ++step) {
    for (uint32_t rank = 0; rank < 4; ++rank) {
      const absl::Duration t =
          EmulatedStepTime(w, 7, rank, step, absl::Milliseconds(10));
      if (rank == 1 && step == 12) {
        EXPECT_EQ(t, absl::Milliseconds(10) + absl::Milliseconds(750));
        ++pauses;
      } else {
        EXPECT_EQ(t, absl::Milliseconds(10)) << rank << "@" << step;
      }
    }
  }
  EXPECT_EQ(pauses, 1);
}

TEST(StragglerModelTest, ModelsCompose) {
  WorkerConfig w = NoStragglers();
  w.set_straggler_rank(0);
  w.set_straggler_factor(2);
  w.set_transient_straggler_p(1);
  w.set_transient_straggler_factor(3);
  const double t = TransientFactor(1, 3, 7, 0, 4);
  EXPECT_DOUBLE_EQ(SlowdownFor(w, 7, 0, 4).factor, 2 * t);
}

}  // namespace
}  // namespace pstrain
