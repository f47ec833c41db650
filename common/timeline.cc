#include "common/timeline.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {

Timeline::Timeline(const std::string& path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    std::fprintf(stderr, "timeline: cannot write %s: %s; no timeline\n",
                 path.c_str(), std::strerror(errno));
    return;
  }
  // Large writes, rarely: a mark must not add a system call to what it times.
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

Timeline::~Timeline() {
  if (file_ != nullptr) std::fclose(file_);
}

void Timeline::Mark(const char* tag, int64_t arg) {
  if (file_ == nullptr) return;
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const long tid = syscall(SYS_gettid);
  absl::MutexLock lock(&mu_);
  if (marks_ >= kMaxTimelineMarks) return;
  if (++marks_ == kMaxTimelineMarks) {
    std::fprintf(stderr, "timeline: %lld marks written; no more\n",
                 static_cast<long long>(kMaxTimelineMarks));
  }
  std::fprintf(file_, "%lld.%09ld %ld %s %lld\n",
               static_cast<long long>(ts.tv_sec), ts.tv_nsec, tid, tag,
               static_cast<long long>(arg));
  if (marks_ % 4096 == 0) std::fflush(file_);
}

void Timeline::Flush() {
  if (file_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  std::fflush(file_);
}

Timeline& ProcessTimeline() {
  static Timeline* const timeline = [] {
    const char* prefix = std::getenv("PSTRAIN_TIMELINE");
    auto* t = new Timeline(prefix == nullptr || *prefix == '\0'
                               ? std::string()
                               : absl::StrCat(prefix, ".", getpid()));
    // Never destroyed (marks may come from threads still running at exit);
    // flushed at exit.
    if (t->on()) std::atexit([] { ProcessTimeline().Flush(); });
    return t;
  }();
  return *timeline;
}

}  // namespace pstrain
