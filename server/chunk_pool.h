// The shard's two kinds of helper threads (server/shard.h): a ChunkPool
// that runs one parallel loop over chunks at a time, and a ChunkApplier
// that runs queued (chunk, epoch) tasks on a thread of its own, so that the
// threads reading push streams only sum.
#ifndef PSTRAIN_SERVER_CHUNK_POOL_H_
#define PSTRAIN_SERVER_CHUNK_POOL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

// A fixed set of helper threads that, with the caller, run the tasks of one
// ParallelFor at a time. Threads start in Start and stop in the destructor
// (which must not run during a ParallelFor).
class ChunkPool {
 public:
  // `threads` >= 1 counts the caller: threads - 1 helpers are started.
  static std::unique_ptr<ChunkPool> Start(int threads);
  ~ChunkPool();

  int threads() const { return threads_; }

  // Runs fn(task, slot) once for every task in [0, n) and returns when all
  // have returned; slot < threads() names the thread running it (0: the
  // caller), so per-slot scratch needs no lock. One call at a time; `fn`
  // must not call ParallelFor.
  void ParallelFor(size_t n, const std::function<void(size_t, int)>& fn);

 private:
  explicit ChunkPool(int threads) : threads_(threads) {}
  void Loop(int slot);
  void RunTasks(int slot) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  const int threads_;
  std::vector<std::thread> helpers_;
  absl::Mutex mu_;
  const std::function<void(size_t, int)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t n_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> next_{0};
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

// The thread that applies chunks on arrival (Shard::ApplyOnArrival). Tasks
// are (chunk, sum epoch), run one at a time in the order posted; the shard
// queues one per chunk and step at most. Starts in Start; the destructor lets a
// running task finish, drops what is still queued and joins. Post is
// thread-safe.
class ChunkApplier {
 public:
  static std::unique_ptr<ChunkApplier> Start(
      std::function<void(size_t, uint64_t)> fn);
  ~ChunkApplier();

  void Post(size_t chunk, uint64_t epoch);

 private:
  explicit ChunkApplier(std::function<void(size_t, uint64_t)> fn)
      : fn_(std::move(fn)) {}
  void Loop();

  const std::function<void(size_t, uint64_t)> fn_;
  std::thread thread_;
  absl::Mutex mu_;
  std::deque<std::pair<size_t, uint64_t>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHUNK_POOL_H_
