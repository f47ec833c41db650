#include "coordinator/supervision_notes.h"

#include <cstdlib>
#include <fstream>
#include <string>

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
  notes.TakenOver(1, 12);
  notes.Hosted(2);
  notes.Dropped(3, 7);
  notes.Released(1, 15);
  notes.Rejoined(1, 15);
  notes.RolledBack(2, 40);
  EXPECT_EQ(Read(path),
            "dead worker 1\n"
            "dead server 0\n"
            "taken over worker 1 from step 12\n"
            "hosted worker 2\n"
            "dropped worker 3 from step 7\n"
            "released worker 1 before step 15\n"
            "rejoined worker 1 from step 15\n"
            "rolled back generation 2 to step 40\n");
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
