// CallPool: admission up to the limit and refusal beyond it, no admitted
// task waiting for a blocked one, threads reused, Stop refusing, and the
// destructor joining running tasks; TaskGroup: tasks on the pool's threads,
// reused by the next group, refused ones on threads of their own, Wait.
#include "common/call_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <set>
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

// `then` runs after the task, on its thread, once the pool counts the
// thread idle: a task admitted from `then` reuses it.
TEST(CallPoolTest, ThenRunsOnceTheThreadIsIdleAgain) {
  CallPool pool(4);
  absl::Notification then_done;
  std::thread::id task_thread, then_thread;
  int busy_in_then = -1;
  ASSERT_EQ(pool.TryRun([&] { task_thread = std::this_thread::get_id(); },
                        [&] {
                          then_thread = std::this_thread::get_id();
                          busy_in_then = pool.counts().busy;
                          then_done.Notify();
                        }),
            CallPool::Admission::kRunning);
  ASSERT_TRUE(then_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(then_thread, task_thread);
  EXPECT_EQ(busy_in_then, 0);
  absl::Notification second;
  ASSERT_EQ(pool.TryRun([&] { second.Notify(); }),
            CallPool::Admission::kRunning);
  ASSERT_TRUE(second.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(pool.counts().threads, 1);
}

// Runs `n` tasks in `group`, each recording its thread and then waiting for
// `release`; true once all n run at the same time (bounded wait).
bool RunConcurrently(TaskGroup* group, int n, absl::Notification* release,
                     absl::Mutex* mu, std::set<std::thread::id>* ids) {
  auto running = std::make_shared<std::atomic<int>>(0);
  for (int i = 0; i < n; ++i) {
    group->Run([=] {
      {
        absl::MutexLock lock(mu);
        ids->insert(std::this_thread::get_id());
      }
      ++*running;
      release->WaitForNotificationWithTimeout(absl::Seconds(60));
    });
  }
  const absl::Time end = Bound();
  while (running->load() < n && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return running->load() == n;
}

// A group's tasks run at once on the pool's threads, and the next group
// gets the same threads: no thread is started for it.
TEST(TaskGroupTest, RunsTasksOnThePoolAndTheNextGroupReusesItsThreads) {
  CallPool pool(8);
  absl::Mutex mu;
  std::set<std::thread::id> first, second;
  {
    TaskGroup group(&pool);
    absl::Notification release;
    EXPECT_TRUE(RunConcurrently(&group, 3, &release, &mu, &first));
    release.Notify();
    group.Wait();
    EXPECT_EQ(group.unpooled(), 0);
  }
  EXPECT_EQ(first.size(), 3u);
  EXPECT_EQ(pool.counts().threads, 3);
  {
    TaskGroup group(&pool);
    absl::Notification release;
    EXPECT_TRUE(RunConcurrently(&group, 3, &release, &mu, &second));
    release.Notify();
  }  // the destructor waits
  EXPECT_EQ(second, first);
  EXPECT_EQ(pool.counts().threads, 3);
  EXPECT_TRUE(pool.AwaitIdle(Bound()));
}

// Beyond the pool's limit (and without a pool) a task runs on a thread of
// its own at once: all run together, none waits for another to finish.
TEST(TaskGroupTest, TasksThePoolRefusesRunOnThreadsOfTheirOwn) {
  CallPool pool(1);
  absl::Mutex mu;
  std::set<std::thread::id> ids;
  TaskGroup group(&pool);
  absl::Notification release;
  EXPECT_TRUE(RunConcurrently(&group, 3, &release, &mu, &ids));
  EXPECT_EQ(group.unpooled(), 2);
  EXPECT_EQ(pool.counts().threads, 1);
  release.Notify();
  group.Wait();
  EXPECT_EQ(ids.size(), 3u);

  TaskGroup alone(/*pool=*/nullptr);
  absl::Notification release2;
  std::set<std::thread::id> ids2;
  EXPECT_TRUE(RunConcurrently(&alone, 2, &release2, &mu, &ids2));
  EXPECT_EQ(alone.unpooled(), 2);
  release2.Notify();
}

// Wait returns only after every task returned, and a group can be waited
// for again after more tasks; a task may run a group of its own on the
// same pool, even a full one.
TEST(TaskGroupTest, WaitReturnsAfterEveryTaskAndGroupsNest) {
  CallPool pool(2);
  std::atomic<int> done{0};
  TaskGroup group(&pool);
  for (int i = 0; i < 4; ++i) {
    group.Run([&] {
      TaskGroup inner(&pool);
      for (int j = 0; j < 3; ++j) {
        inner.Run([&] {
          absl::SleepFor(absl::Milliseconds(1));
          ++done;
        });
      }
      inner.Wait();
      ++done;
    });
  }
  group.Wait();
  EXPECT_EQ(done.load(), 16);
  group.Run([&] { ++done; });
  group.Wait();
  EXPECT_EQ(done.load(), 17);
  EXPECT_TRUE(pool.AwaitIdle(Bound()));
}

}  // namespace
}  // namespace pstrain
