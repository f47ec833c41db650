// CallPool: admission up to the limit and refusal beyond it, no admitted
// task waiting for a blocked one, threads reused, Stop refusing, and the
// destructor joining running tasks.
#include "server/call_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace pstrain {
namespace {

// Generous: only a broken pool comes near it.
absl::Time Bound() { return absl::Now() + absl::Seconds(60); }

TEST(CallPoolTest, AdmitsUpToTheLimitRefusesBeyondAndReusesThreads) {
  CallPool pool(3);
  EXPECT_EQ(pool.counts().threads, 0);  // no thread before the first task
  absl::Notification release;
  std::atomic<int> ran{0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(pool.TryRun([&] {
      release.WaitForNotificationWithTimeout(absl::Seconds(60));
      ++ran;
    }),
              CallPool::Admission::kRunning);
  }
  EXPECT_EQ(pool.TryRun([&] { ran += 100; }), CallPool::Admission::kFull);
  EXPECT_EQ(pool.counts().busy, 3);
  release.Notify();
  ASSERT_TRUE(pool.AwaitIdle(Bound()));
  EXPECT_EQ(ran.load(), 3);  // the refused task never ran

  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(pool.TryRun([&] { ++ran; }), CallPool::Admission::kRunning);
    }
    ASSERT_TRUE(pool.AwaitIdle(Bound()));
  }
  EXPECT_EQ(ran.load(), 18);
  const CallPool::Counts c = pool.counts();
  EXPECT_EQ(c.busy, 0);
  EXPECT_EQ(c.threads, 3);  // reused, never more than the limit
  EXPECT_EQ(c.limit, 3);
}

// The shape of a BSP step: limit - 1 tasks wait for an event that only the
// last admitted task causes. A pool that queued tasks on fewer threads
// would never run that one.
TEST(CallPoolTest, NoAdmittedTaskWaitsBehindBlockedOnes) {
  constexpr int kLimit = 32;
  CallPool pool(kLimit);
  absl::Notification step_done;
  std::atomic<int> woken{0};
  for (int i = 0; i < kLimit - 1; ++i) {
    ASSERT_EQ(pool.TryRun([&] {
      if (step_done.WaitForNotificationWithTimeout(absl::Seconds(60))) {
        ++woken;
      }
    }),
              CallPool::Admission::kRunning);
  }
  ASSERT_EQ(pool.TryRun([&] { step_done.Notify(); }),
            CallPool::Admission::kRunning);
  ASSERT_TRUE(pool.AwaitIdle(Bound()));
  EXPECT_EQ(woken.load(), kLimit - 1);
}

TEST(CallPoolTest, RaisedLimitAdmitsMore) {
  CallPool pool(1);
  absl::Notification release;
  ASSERT_EQ(pool.TryRun([&] {
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
  }),
            CallPool::Admission::kRunning);
  EXPECT_EQ(pool.TryRun([] {}), CallPool::Admission::kFull);
  pool.SetLimit(2);
  EXPECT_EQ(pool.TryRun([] {}), CallPool::Admission::kRunning);
  release.Notify();
  ASSERT_TRUE(pool.AwaitIdle(Bound()));
  pool.SetLimit(0);  // taken as 1
  EXPECT_EQ(pool.counts().limit, 1);
}

TEST(CallPoolTest, AwaitIdleGivesUpAtItsDeadline) {
  CallPool pool(1);
  absl::Notification release;
  ASSERT_EQ(pool.TryRun([&] {
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
  }),
            CallPool::Admission::kRunning);
  EXPECT_FALSE(pool.AwaitIdle(absl::Now()));  // a deadline already past
  release.Notify();
  EXPECT_TRUE(pool.AwaitIdle(Bound()));
}

// Stop refuses new tasks but lets admitted ones finish; the destructor
// returns only after the running task has (it joins, never detaches).
TEST(CallPoolTest, StopRefusesAndTheDestructorJoinsRunningTasks) {
  auto pool = std::make_unique<CallPool>(4);
  absl::Notification started, release;
  std::atomic<bool> finished{false};
  ASSERT_EQ(pool->TryRun([&] {
    started.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
    finished = true;
  }),
            CallPool::Admission::kRunning);
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(60)));
  pool->Stop();
  EXPECT_EQ(pool->TryRun([] {}), CallPool::Admission::kStopped);
  EXPECT_EQ(pool->counts().busy, 1);
  std::thread releaser([&] { release.Notify(); });
  pool.reset();  // joins: the task has finished when this returns
  EXPECT_TRUE(finished.load());
  releaser.join();
}

}  // namespace
}  // namespace pstrain
