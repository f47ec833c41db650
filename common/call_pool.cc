#include "common/call_pool.h"

#include <algorithm>
#include <system_error>
#include <utility>

namespace pstrain {

CallPool::CallPool(int max_threads) : limit_(std::max(max_threads, 1)) {}

CallPool::~CallPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    threads.swap(threads_);  // TryRun adds none once stopped
  }
  for (std::thread& t : threads) t.join();
}

CallPool::Admission CallPool::TryRun(std::function<void()> task,
                                     std::function<void()> then) {
  absl::MutexLock lock(&mu_);
  if (stop_) return Admission::kStopped;
  if (busy_ >= limit_) return Admission::kFull;
  // Every admitted task has a thread: an idle one, or a new one.
  if (live_ <= busy_) {
    try {
      threads_.emplace_back([this] { Loop(); });
    } catch (const std::system_error&) {
      return Admission::kFull;
    }
    ++live_;
  }
  ready_.push_back(Task{std::move(task), std::move(then)});
  ++busy_;
  return Admission::kRunning;
}

void CallPool::SetLimit(int max_threads) {
  absl::MutexLock lock(&mu_);
  limit_ = std::max(max_threads, 1);
}

void CallPool::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

bool CallPool::AwaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return busy_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

CallPool::Counts CallPool::counts() const {
  absl::MutexLock lock(&mu_);
  return {busy_, live_, limit_};
}

void CallPool::Loop() {
  auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !ready_.empty();
  };
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&wake));
      if (ready_.empty()) {  // stopped, and nothing admitted is left
        --live_;
        return;
      }
      task = std::move(ready_.front());
      ready_.pop_front();
    }
    task.run();
    task.run = nullptr;  // what it captured goes before it counts as done
    {
      absl::MutexLock lock(&mu_);
      --busy_;
    }
    if (task.then) {
      task.then();
      task.then = nullptr;
    }
  }
}

void TaskGroup::Run(std::function<void()> task) {
  auto shared = std::make_shared<std::function<void()>>(std::move(task));
  if (pool_ != nullptr) {
    {
      absl::MutexLock lock(&state_->mu);
      ++state_->pending;
    }
    // Counted done only once the pool counts its thread idle again, so
    // that a task started when Wait returns reuses that thread.
    const CallPool::Admission admitted = pool_->TryRun(
        [shared]() mutable {
          (*shared)();
          shared.reset();  // what the task captured goes first
        },
        [state = state_] {
          absl::MutexLock lock(&state->mu);
          --state->pending;
        });
    if (admitted == CallPool::Admission::kRunning) return;
    absl::MutexLock lock(&state_->mu);
    --state_->pending;
  }
  ++unpooled_;
  threads_.emplace_back([shared] { (*shared)(); });
}

void TaskGroup::Wait() {
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  State* const state = state_.get();
  auto done = [state]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->mu) {
    return state->pending == 0;
  };
  absl::MutexLock lock(&state->mu);
  state->mu.Await(absl::Condition(&done));
}

}  // namespace pstrain
