// Threads for tasks that may block, started once and reused: the server's
// RPC handlers that may block (the raw Pull's checks and its wait for the
// consistency rule, server/ps_service.h), so that they never run on gRPC's
// callback threads and never number more than a limit; the worker client's
// shard operations (worker/ps/ps_client.h), so that a step starts no thread.
//
// Admission, not a queue. TryRun either hands the task at once to a thread
// of its own (an idle one, or a new one while fewer than the limit exist)
// or refuses it (kFull), and the caller answers the call with a retryable
// status. No admitted task ever waits for another task, so the pool cannot
// deadlock whatever the limit: with a queue, a pull that SSP or BSP blocks
// until some worker's push could hold the last thread while that worker's
// own pull (which must return before it can compute and push) sits queued
// behind it, and the step would hang until the barrier timeout. A refused
// caller holds nothing and retries; the blocked tasks end by their own
// deadlines or when the step completes. The limit is sized so that a job's
// legitimate pulls all fit (ParameterServerService: a few per worker), so
// refusals are for overload, not for the normal case.
//
// Threads start on demand (the first time that many tasks run at once) and
// are kept for reuse until Stop; after a lowered limit, tasks above it are
// refused and the threads already started stay idle. Thread-safe. The
// destructor stops the pool and joins every thread, so it waits for the tasks
// running: a task must be bounded (every pull's wait is, by its call deadline
// and the barrier timeout).
#ifndef PSTRAIN_COMMON_CALL_POOL_H_
#define PSTRAIN_COMMON_CALL_POOL_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

class CallPool {
 public:
  // `max_threads` >= 1 (smaller is taken as 1). Starts no thread.
  explicit CallPool(int max_threads);
  ~CallPool();  // Stop(), then joins every thread (waits for running tasks)
  CallPool(const CallPool&) = delete;
  CallPool& operator=(const CallPool&) = delete;

  enum class Admission {
    kRunning,  // the task runs (or is about to) on a thread of its own
    kFull,     // limit tasks run already (or no thread could be started)
    kStopped,  // Stop was called
  };
  // Runs `task` on a thread of its own, or refuses it; a refused task is
  // dropped without running. `then`, if given, runs on the same thread after
  // the task, once the thread counts as idle again: a task started upon it
  // (TaskGroup::Wait returning) finds this thread free instead of starting
  // another.
  Admission TryRun(std::function<void()> task,
                   std::function<void()> then = nullptr);

  // The most tasks run at once from now on (>= 1).
  void SetLimit(int max_threads);
  // Refuses every TryRun from now on; admitted tasks still run, and each
  // thread exits once idle. Does not wait.
  void Stop();
  // Waits until no admitted task is left or until `deadline`; true when none
  // is left.
  bool AwaitIdle(absl::Time deadline);

  struct Counts {
    int busy = 0;     // admitted tasks not yet returned
    int threads = 0;  // threads started and not exited
    int limit = 0;
  };
  Counts counts() const;

 private:
  void Loop();

  mutable absl::Mutex mu_;
  int limit_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  int live_ ABSL_GUARDED_BY(mu_) = 0;  // threads whose Loop has not returned
  // Admitted tasks no thread has taken yet; never more than the idle
  // threads, so none waits for a busy one.
  struct Task {
    std::function<void()> run;
    std::function<void()> then;
  };
  std::deque<Task> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

// Tasks started together and waited for together: each runs at once on a
// thread of `pool` (CallPool::TryRun) or, when the pool refuses it (full,
// stopped, or null), on a thread of its own, so no task ever waits for
// another to start and the group cannot deadlock whatever the pool's limit.
// Wait() returns once every task started so far has returned; the
// destructor waits too. Run and Wait are for one thread at a time (a task
// may start a group of its own). The pool must outlive the group's tasks.
class TaskGroup {
 public:
  explicit TaskGroup(CallPool* pool) : pool_(pool) {}
  ~TaskGroup() { Wait(); }
  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;

  void Run(std::function<void()> task);
  void Wait();
  // Tasks that ran on threads of their own (the pool refused them).
  int unpooled() const { return unpooled_; }

 private:
  // Shared with the pooled tasks, which may still hold it for an instant
  // after Wait() returned and the group is gone.
  struct State {
    absl::Mutex mu;
    int pending ABSL_GUARDED_BY(mu) = 0;
  };
  CallPool* const pool_;
  const std::shared_ptr<State> state_ = std::make_shared<State>();
  std::vector<std::thread> threads_;  // the refused tasks'
  int unpooled_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CALL_POOL_H_
