#include "server/chunk_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Generous bound for waits on another thread; reached only on a hang.
constexpr absl::Duration kHang = absl::Seconds(60);

TEST(ChunkPoolTest, RunsEveryTaskOnceOnAValidSlotInEveryRound) {
  for (int threads : {1, 2, 4}) {
    std::unique_ptr<ChunkPool> pool = ChunkPool::Start(threads);
    ASSERT_EQ(pool->threads(), threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}}) {
      for (int round = 0; round < 3; ++round) {
        std::vector<std::atomic<int>> runs(n);
        std::atomic<int> bad_slot{0};
        pool->ParallelFor(n, [&](size_t task, int slot) {
          if (slot < 0 || slot >= threads) bad_slot.fetch_add(1);
          runs[task].fetch_add(1);
        });
        // ParallelFor returned: every task has run exactly once.
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(runs[i].load(), 1) << threads << " " << n << " " << i;
        }
        EXPECT_EQ(bad_slot.load(), 0);
      }
    }
  }
}

TEST(ChunkPoolTest, HelpersTakePartAndSlotsAreExclusive) {
  // Task 0 waits until another slot has run a task: with one helper that
  // can only finish if the helper takes part. Each slot's scratch is written
  // without a lock; a slot used by two threads at once would be a race
  // (TSan) and could lose an increment.
  std::unique_ptr<ChunkPool> pool = ChunkPool::Start(2);
  absl::Notification other_slot_ran;
  std::vector<int> per_slot(2, 0);
  const size_t n = 64;
  bool waited = false;
  pool->ParallelFor(n, [&](size_t task, int slot) {
    ++per_slot[slot];
    if (slot != 0 && !other_slot_ran.HasBeenNotified()) {
      other_slot_ran.Notify();
    }
    if (task == 0) {
      waited = other_slot_ran.WaitForNotificationWithTimeout(kHang);
    }
  });
  EXPECT_TRUE(waited);
  EXPECT_EQ(per_slot[0] + per_slot[1], static_cast<int>(n));
  EXPECT_GT(per_slot[1], 0);
}

TEST(ChunkApplierTest, RunsPostedTasksInOrder) {
  absl::Mutex mu;
  std::vector<std::pair<size_t, uint64_t>> seen;
  std::unique_ptr<ChunkApplier> applier =
      ChunkApplier::Start([&](size_t chunk, uint64_t epoch) {
        absl::MutexLock lock(&mu);
        seen.emplace_back(chunk, epoch);
      });
  for (size_t k = 0; k < 100; ++k) applier->Post(k, 7 + k % 3);
  {
    absl::MutexLock lock(&mu);
    auto all = [&] { return seen.size() == 100; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), kHang));
    for (size_t k = 0; k < 100; ++k) {
      EXPECT_EQ(seen[k], std::make_pair(k, uint64_t{7 + k % 3}));
    }
  }
}

TEST(ChunkApplierTest, DestructorLetsTheRunningTaskFinishAndRunsNothingAfter) {
  absl::Notification started, release;
  std::atomic<int> ran{0};
  std::unique_ptr<ChunkApplier> applier =
      ChunkApplier::Start([&](size_t chunk, uint64_t) {
        if (chunk == 0) {
          started.Notify();
          release.WaitForNotificationWithTimeout(kHang);
        }
        ran.fetch_add(1);
      });
  applier->Post(0, 1);
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kHang));
  for (size_t k = 1; k <= 10; ++k) applier->Post(k, 1);
  // Task 0 is running; the destructor must wait for it (it counts only
  // once released), then drop or run the rest, and join.
  std::thread releaser([&] { release.Notify(); });
  applier.reset();
  const int ran_at_return = ran.load();
  releaser.join();
  EXPECT_GE(ran_at_return, 1);
  EXPECT_LE(ran_at_return, 11);
  EXPECT_EQ(ran.load(), ran_at_return);  // the thread is gone
}

}  // namespace
}  // namespace pstrain
