// Timelines of pushes and pulls for performance work (docs/performance.md,
// "timeline.py"; docs/performance-log.md, "Where a 4 MB push's time goes"):
// with PSTRAIN_TIMELINE=PREFIX in a process's environment, every
// TimelineMark appends one line
//
//   <CLOCK_REALTIME seconds.nanoseconds> <thread id> <tag> <arg>
//
// to the file PREFIX.<pid>, so that the marks of a worker and a server on the
// same machine merge into one timeline (tools/bench/timeline.py). Without the
// variable a mark costs a call and a flag check. A process writes at most
// kMaxTimelineMarks lines (then says so on stderr and stops), buffered, and
// flushed every 4096 marks, at a normal exit and by ExitNow
// (common/process.h, how ps_worker and ps_server end); a process killed by
// a signal leaves its last lines out, and timeline.py says so where a file
// ends in a cut-off line.
#ifndef PSTRAIN_COMMON_TIMELINE_H_
#define PSTRAIN_COMMON_TIMELINE_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

inline constexpr int64_t kMaxTimelineMarks = int64_t{1} << 20;

// One timeline file. Thread-safe.
class Timeline {
 public:
  // Writes to `path` (created or truncated); empty: off. If the file cannot
  // be opened, says why on stderr and stays off.
  explicit Timeline(const std::string& path);
  ~Timeline();  // closes (and so flushes) the file
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  bool on() const { return file_ != nullptr; }
  void Mark(const char* tag, int64_t arg);
  void Flush();

 private:
  std::FILE* file_ = nullptr;
  absl::Mutex mu_;
  int64_t marks_ ABSL_GUARDED_BY(mu_) = 0;
};

// The process's timeline: PSTRAIN_TIMELINE's, read at the first call.
Timeline& ProcessTimeline();

// Marks `tag` (a string literal; no spaces) with `arg` on the process's
// timeline when PSTRAIN_TIMELINE is set.
inline void TimelineMark(const char* tag, int64_t arg = -1) {
  Timeline& t = ProcessTimeline();
  if (t.on()) t.Mark(tag, arg);
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TIMELINE_H_
