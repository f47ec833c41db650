// "Ready" flags between the trainer and PsClient, for overlapping communication
// with computation (docs/architecture.md, "Worker: overlap chunk by chunk"):
// PsClient uses one per chunk of the shard map. A push sends a chunk only once
// backward has opened it (last layer first), and a pull opens each chunk as
// soon as it has arrived, so forward can start on the first rows of the first
// layer while the rest still streams in.
#ifndef PSTRAIN_WORKER_PS_TENSOR_GATE_H_
#define PSTRAIN_WORKER_PS_TENSOR_GATE_H_

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

// Thread-safe. Entries are indices 0..size-1 (for PsClient: ShardMap.chunks()
// order).
class TensorGate {
 public:
  explicit TensorGate(int size) : size_(size), open_(size, false) {}
  int size() const { return size_; }

  // Closes every entry and clears an abort (before each use).
  void Reset();
  // Opens one entry (out of range: ignored) or all; waiters wake up.
  void Open(int tensor);
  void OpenAll();
  // Wakes every waiter with `status` (not OK), now and until Reset: the
  // producer failed and will never open the rest.
  void Abort(absl::Status status);

  bool IsOpen(int tensor) const;
  // When the last Open or OpenAll happened (InfinitePast before any).
  absl::Time last_open() const;
  // Blocks until `tensor` is open (OK), the gate is aborted (its status) or
  // `deadline` passes (DEADLINE_EXCEEDED naming the entry).
  absl::Status Wait(int tensor, absl::Time deadline) const;

 private:
  const int size_;
  mutable absl::Mutex mu_;
  std::vector<bool> open_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  absl::Time last_open_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PS_TENSOR_GATE_H_
