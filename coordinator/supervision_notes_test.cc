#include "coordinator/supervision_notes.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/run_record.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

std::string Read(const std::string& path) {
  return ReadFileText(path).value_or("");
}
TEST(SupervisionNotesTest, AppendsOneLineEachInOrder) {
  const std::string path = TempPath("notes");
  std::ofstream(path) << "lost 1 worker 0\n";  // an earlier coordinator's
  SupervisionNotes notes(path);
  notes.Registered(2);
  notes.Lost(3, /*server=*/true, 1);
  notes.Lost(4, /*server=*/false, 2);
  notes.Failed();
  EXPECT_EQ(Read(path),
            "lost 1 worker 0\n"
            "registered worker 2\n"
            "lost 3 server 1\n"
            "lost 4 worker 2\n"
            "failed\n");
}

TEST(SupervisionNotesTest, RecoveryEventsFollowTheirGrammar) {
  const std::string path = TempPath("events");
  SupervisionNotes notes(path);
  notes.Dead(/*server=*/false, 1);
  notes.Dead(/*server=*/true, 0);
  notes.TakenOver(1, 12, 0);
  notes.TakenOver(3, 5, std::nullopt);
  notes.Hosted(2, 3);
  notes.Hosted(0, std::nullopt);
  notes.Dropped(3, 7);
  notes.Released(1, 15);
  notes.Rejoined(1, 15);
  notes.RolledBack(2, 40);
  notes.WorkerResumed(0, 2, 40);
  EXPECT_EQ(Read(path),
            "dead worker 1\n"
            "dead server 0\n"
            "taken over worker 1 from step 12 by worker 0\n"
            "taken over worker 3 from step 5\n"
            "hosted worker 2 by worker 3\n"
            "hosted worker 0\n"
            "dropped worker 3 from step 7\n"
            "released worker 1 before step 15\n"
            "rejoined worker 1 from step 15\n"
            "rolled back generation 2 to step 40\n"
            "resumed worker 0 in generation 2 at step 40\n");
}

TEST(SupervisionNotesTest, DoneCarriesTheWeightsFingerprintInFixedHex) {
  const std::string path = TempPath("done");
  SupervisionNotes notes(path);
  notes.Done(2, std::nullopt);
  notes.Done(0, 0x0123456789abcdefULL);
  notes.Done(1, 0xa5ULL);  // zero-padded to 16 digits
  EXPECT_EQ(Read(path),
            "done worker 2\n"
            "done worker 0 weights 0123456789abcdef\n"
            "done worker 1 weights 00000000000000a5\n");
}

TEST(SupervisionNotesTest, CheckpointsNamePathsAsTheRestOfTheLine) {
  const std::string path = TempPath("checkpoints");
  SupervisionNotes notes(path);
  notes.Resumed(20, "/runs/a b/ckpt/step-000000000020");
  notes.CheckpointSaved(30, "/runs/a b/ckpt/step-000000000030");
  // A path with a newline (a worker's report) stays on its line.
  notes.CheckpointSaved(40, "/x\nfailed");
  EXPECT_EQ(Read(path),
            "resumed from step 20 in /runs/a b/ckpt/step-000000000020\n"
            "saved checkpoint of step 30 in /runs/a b/ckpt/step-000000000030\n"
            "saved checkpoint of step 40 in /x\\nfailed\n");
}

TEST(SupervisionNotesTest, TwoWritersOnOneFileKeepWholeLines) {
  const std::string path = TempPath("two_writers");
  SupervisionNotes a(path), b(path);
  const std::string long_path(5000, 'p');  // beyond a stream's buffer
  std::thread ta([&] {
    for (int i = 0; i < 200; ++i) a.CheckpointSaved(i, long_path);
  });
  std::thread tb([&] {
    for (int i = 0; i < 200; ++i) b.Registered(i);
  });
  ta.join();
  tb.join();
  std::istringstream lines(Read(path));
  std::string line;
  int saved = 0, registered = 0;
  while (std::getline(lines, line)) {
    if (line == absl::StrCat("registered worker ", registered)) {
      ++registered;
    } else if (line == absl::StrCat("saved checkpoint of step ", saved, " in ",
                                    long_path)) {
      ++saved;
    } else {
      ADD_FAILURE() << "a broken line: " << line.substr(0, 80);
    }
  }
  EXPECT_EQ(saved, 200);
  EXPECT_EQ(registered, 200);
}

TEST(SupervisionNotesTest, NoPathWritesNothingAndAnUnwritableOneIsNotFatal) {
  SupervisionNotes none("");
  none.Failed();
  const std::string dir = TempPath("no_such_dir");
  SupervisionNotes unwritable(dir + "/notes");
  unwritable.Registered(0);
  EXPECT_FALSE(std::ifstream(dir + "/notes").good());
}

}  // namespace
}  // namespace pstrain
