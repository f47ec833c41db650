#include "common/timeline.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace pstrain {
namespace {

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Every mark is one line: time, thread, tag, argument, times in order per
// thread.
TEST(Timeline, EveryMarkIsOneLineWithTimeThreadTagAndArgument) {
  const std::string path = TempPath("timeline_marks");
  {
    Timeline t(path);
    ASSERT_TRUE(t.on());
    t.Mark("push.start", 7);
    std::thread other([&] { t.Mark("srv.read", 1048576); });
    other.join();
    t.Mark("push.end", -1);
    t.Flush();
    const std::vector<std::string> lines = Lines(path);
    ASSERT_EQ(lines.size(), 3u);
    std::vector<double> times;
    std::vector<long> tids;
    std::vector<std::string> tags;
    std::vector<long long> args;
    for (const std::string& line : lines) {
      std::istringstream in(line);
      double time = 0;
      long tid = 0;
      std::string tag;
      long long arg = 0;
      ASSERT_TRUE(in >> time >> tid >> tag >> arg) << line;
      times.push_back(time);
      tids.push_back(tid);
      tags.push_back(tag);
      args.push_back(arg);
    }
    EXPECT_EQ(tags,
              (std::vector<std::string>{"push.start", "srv.read", "push.end"}));
    EXPECT_EQ(args, (std::vector<long long>{7, 1048576, -1}));
    EXPECT_EQ(tids[0], tids[2]);
    EXPECT_NE(tids[0], tids[1]);
    EXPECT_LE(times[0], times[2]);
    EXPECT_GT(times[0], 1.6e9);  // seconds since 1970
  }
}

TEST(Timeline, OffWithoutAPathAndWhenTheFileCannotBeOpened) {
  Timeline off("");
  EXPECT_FALSE(off.on());
  off.Mark("x", 1);  // nothing to write to
  off.Flush();
  Timeline bad(TempPath("no/such/dir/timeline"));
  EXPECT_FALSE(bad.on());
}

// Without PSTRAIN_TIMELINE (the test's environment) the process's timeline
// is off.
TEST(Timeline, TheProcessTimelineIsOffWithoutTheVariable) {
  ASSERT_EQ(std::getenv("PSTRAIN_TIMELINE"), nullptr);
  EXPECT_FALSE(ProcessTimeline().on());
  TimelineMark("x");
}

}  // namespace
}  // namespace pstrain
