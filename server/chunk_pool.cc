#include "server/chunk_pool.h"

namespace pstrain {

std::unique_ptr<ChunkPool> ChunkPool::Start(int threads) {
  std::unique_ptr<ChunkPool> pool(new ChunkPool(threads));
  for (int slot = 1; slot < threads; ++slot) {
    pool->helpers_.emplace_back([p = pool.get(), slot] { p->Loop(slot); });
  }
  return pool;
}

ChunkPool::~ChunkPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : helpers_) t.join();
}

void ChunkPool::ParallelFor(size_t n,
                            const std::function<void(size_t, int)>& fn) {
  {
    absl::MutexLock lock(&mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0, std::memory_order_relaxed);
    running_ = static_cast<int>(helpers_.size());
    ++generation_;
  }
  RunTasks(0);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &running_));
  fn_ = nullptr;
}

void ChunkPool::Loop(int slot) {
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || generation_ != seen;
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      seen = generation_;
    }
    RunTasks(slot);
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

void ChunkPool::RunTasks(int slot) {
  // fn_ and n_ were published under mu_ before this round started.
  for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) {
    (*fn_)(i, slot);
  }
}

std::unique_ptr<ChunkApplier> ChunkApplier::Start(
    std::function<void(size_t, uint64_t)> fn) {
  std::unique_ptr<ChunkApplier> a(new ChunkApplier(std::move(fn)));
  a->thread_ = std::thread([p = a.get()] { p->Loop(); });
  return a;
}

ChunkApplier::~ChunkApplier() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ChunkApplier::Post(size_t chunk, uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  queue_.emplace_back(chunk, epoch);
}

void ChunkApplier::Loop() {
  while (true) {
    std::pair<size_t, uint64_t> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      task = queue_.front();
      queue_.pop_front();
    }
    fn_(task.first, task.second);
  }
}

}  // namespace pstrain
