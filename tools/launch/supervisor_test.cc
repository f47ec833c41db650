#include "tools/launch/supervisor.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::launch {
namespace {

using ::testing::HasSubstr;
using Kind = Action::Kind;
using OnFailure = LaunchPlan::OnFailure;

constexpr Slot kCoordinator{Role::kCoordinator, 0};
constexpr Slot kServer1{Role::kServer, 1};
constexpr Slot kWorker2{Role::kWorker, 2};

LaunchPlan Plan(OnFailure on_failure, int max_restarts, int lease_s = 4) {
  LaunchPlan plan;
  plan.workers = 3;
  plan.servers = 2;
  plan.lease_s = lease_s;
  plan.on_failure = on_failure;
  plan.max_restarts = max_restarts;
  return plan;
}

const JobFacts kLive;  // coordinator running, job neither over nor failed

JobFacts With(bool JobFacts::*fact, bool value) {
  JobFacts facts = kLive;
  facts.*fact = value;
  return facts;
}

// One row of today's behaviour: a process exiting with a status, under a
// policy and facts, gets an action (and its log line, when it has one).
struct Row {
  std::string name;
  OnFailure on_failure;
  int max_restarts;
  Slot slot;
  int status;
  JobFacts facts;
  Kind want;
  std::string want_log;  // "" = no line
};

class ExitTable : public ::testing::TestWithParam<Row> {};

TEST_P(ExitTable, DecidesAsPsctlDid) {
  const Row& row = GetParam();
  Supervisor supervisor(Plan(row.on_failure, row.max_restarts), false);
  const Action action = supervisor.OnExit(row.slot, 42, row.status, row.facts);
  EXPECT_EQ(action.kind, row.want) << row.name;
  EXPECT_EQ(action.log, row.want_log) << row.name;
}

INSTANTIATE_TEST_SUITE_P(
    Rows, ExitTable,
    ::testing::Values(
        Row{"orderly worker exit", OnFailure::kRestart, 3, kWorker2, 0, kLive,
            Kind::kNone, ""},
        Row{"coordinator exit 0 drains", OnFailure::kFail, 0, kCoordinator, 0,
            kLive, Kind::kDrain, ""},
        Row{"fail: a killed worker fails the job", OnFailure::kFail, 3,
            kWorker2, 137, kLive, Kind::kFailJob, ""},
        Row{"restart: a killed server restarts", OnFailure::kRestart, 3,
            kServer1, 137, kLive, Kind::kRestart, ""},
        Row{"restart: exit 1 restarts", OnFailure::kRestart, 3, kWorker2, 1,
            kLive, Kind::kRestart, ""},
        Row{"restart: exit 2 (bad config) fails", OnFailure::kRestart, 3,
            kWorker2, 2, kLive, Kind::kFailJob, ""},
        Row{"restart: the coordinator is never restarted", OnFailure::kRestart,
            3, kCoordinator, 137, kLive, Kind::kFailJob, ""},
        Row{"restart: no restart left", OnFailure::kRestart, 0, kServer1, 137,
            kLive, Kind::kFailJob,
            "server-1 (pid 42) exited with status 137; no restart left (0 of "
            "training.max_restarts = 0 used)"},
        Row{"restart: exit after the job failed", OnFailure::kRestart, 3,
            kWorker2, 1, With(&JobFacts::job_failed, true), Kind::kFailJob, ""},
        Row{"restart: exit after summary.json", OnFailure::kRestart, 3,
            kWorker2, 1, With(&JobFacts::job_over, true), Kind::kFailJob, ""},
        Row{"restart: exit with the coordinator gone", OnFailure::kRestart, 3,
            kWorker2, 137, With(&JobFacts::coordinator_alive, false),
            Kind::kFailJob, ""},
        Row{"restart: non-zero exit while draining", OnFailure::kRestart, 3,
            kWorker2, 1, With(&JobFacts::draining, true), Kind::kFailJob, ""},
        Row{"elastic: a killed worker rejoins later", OnFailure::kElastic, 1,
            kWorker2, 137, kLive, Kind::kRejoinLater,
            "worker-2 (pid 42) exited with status 137; starting it again in "
            "5 s, once its lease has run out (training.on_failure: elastic)"},
        Row{"elastic: no restart left, the job goes on", OnFailure::kElastic, 0,
            kWorker2, 137, kLive, Kind::kGoOnWithout,
            "worker-2 (pid 42) exited with status 137; not restarted (0 of "
            "training.max_restarts = 0 used): the job goes on without it "
            "(training.on_failure: elastic)"},
        Row{"elastic: a server's death fails the job", OnFailure::kElastic, 3,
            kServer1, 137, kLive, Kind::kFailJob, ""},
        Row{"elastic: exit after the job failed", OnFailure::kElastic, 3,
            kWorker2, 1, With(&JobFacts::job_failed, true), Kind::kFailJob,
            ""}),
    [](const ::testing::TestParamInfo<Row>& info) {
      std::string name;
      for (char c : info.param.name) {
        name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      }
      return name;
    });

TEST(SupervisorTest, RejoinWaitsForTheLeasePlusOneSecond) {
  Supervisor supervisor(Plan(OnFailure::kElastic, 2, /*lease_s=*/7), false);
  const Action action = supervisor.OnExit(kWorker2, 10, 137, kLive);
  ASSERT_EQ(action.kind, Kind::kRejoinLater);
  EXPECT_EQ(action.delay, absl::Seconds(8));
  EXPECT_EQ(action.restart, 1);
  EXPECT_EQ(supervisor.StartedAgainLog(kWorker2, 10, 137, 11, action.restart),
            "worker-2 (pid 10) exited with status 137; restarted as pid 11 to "
            "rejoin its rank (restart 1 of 2, training.on_failure: elastic)");
}

TEST(SupervisorTest, RestartsAreCountedAcrossProcessesUpToTheMaximum) {
  Supervisor supervisor(Plan(OnFailure::kRestart, 2), false);
  const Action first = supervisor.OnExit(kServer1, 10, 137, kLive);
  const Action second = supervisor.OnExit(kWorker2, 12, 137, kLive);
  const Action third = supervisor.OnExit(kServer1, 11, 1, kLive);
  EXPECT_EQ(first.kind, Kind::kRestart);
  EXPECT_EQ(second.kind, Kind::kRestart);
  EXPECT_EQ(third.kind, Kind::kFailJob);
  EXPECT_EQ(supervisor.restarts_used(), 2);
  EXPECT_EQ(supervisor.StartedAgainLog(kWorker2, 12, 137, 13, second.restart),
            "worker-2 (pid 12) exited with status 137; restarted as pid 13 "
            "(restart 2 of 2, training.on_failure: restart)");
  EXPECT_EQ(third.log,
            "server-1 (pid 11) exited with status 1; no restart left (2 of "
            "training.max_restarts = 2 used)");
}

TEST(SupervisorTest, DrainIsLongerForPythonWorkers) {
  Supervisor binaries(Plan(OnFailure::kFail, 0), /*worker_cmd=*/false);
  Supervisor python(Plan(OnFailure::kFail, 0), /*worker_cmd=*/true);
  EXPECT_EQ(binaries.OnExit(kCoordinator, 1, 0, kLive).delay,
            absl::Seconds(10));
  EXPECT_EQ(python.OnExit(kCoordinator, 1, 0, kLive).delay, absl::Seconds(30));
}

// A loss the coordinator declared beyond the deaths seen names a process
// that still runs (hung): it is ended. A loss that follows a death is that
// death's.
TEST(SupervisorTest, LossBeyondTheDeathsSeenEndsTheProcess) {
  Supervisor supervisor(Plan(OnFailure::kRestart, 3), false);
  EXPECT_TRUE(supervisor.OnLost(kWorker2));  // hung: end it
  ASSERT_EQ(supervisor.OnExit(kWorker2, 10, 137, kLive).kind, Kind::kRestart);
  ASSERT_EQ(supervisor.OnExit(kServer1, 20, 137, kLive).kind, Kind::kRestart);
  EXPECT_FALSE(supervisor.OnLost(kServer1));  // the death seen
  EXPECT_TRUE(supervisor.OnLost(kWorker2));   // a second hang
}

TEST(SupervisorTest, LossesAreIgnoredUnlessRestart) {
  Supervisor elastic(Plan(OnFailure::kElastic, 3), false);
  Supervisor fail(Plan(OnFailure::kFail, 3), false);
  EXPECT_FALSE(elastic.OnLost(kWorker2));
  EXPECT_FALSE(fail.OnLost(kWorker2));
}

TEST(SupervisorTest, ParsesLostLines) {
  Slot slot;
  ASSERT_TRUE(ParseLostLine("lost 3 worker 1", &slot));
  EXPECT_EQ(slot, (Slot{Role::kWorker, 1}));
  ASSERT_TRUE(ParseLostLine("lost 1 server 0", &slot));
  EXPECT_EQ(slot, (Slot{Role::kServer, 0}));
  EXPECT_FALSE(ParseLostLine("failed", &slot));
  EXPECT_FALSE(ParseLostLine("lost 1 coordinator 0", &slot));
  EXPECT_FALSE(ParseLostLine("lost 1 worker x", &slot));
  EXPECT_FALSE(ParseLostLine("lost 1 worker 1 extra", &slot));
  // The coordinator's recovery-event notes (coordinator/supervision_notes.h)
  // are no losses.
  for (const char* line :
       {"dead worker 1", "dead server 0", "taken over worker 1 from step 4",
        "hosted worker 1", "dropped worker 1 from step 3",
        "released worker 1 before step 6", "rejoined worker 1 from step 6",
        "rolled back generation 2 to step 8"}) {
    EXPECT_FALSE(ParseLostLine(line, &slot)) << line;
  }
}

// Whether a worker started again (when the notes had `from` lines) has
// registered, from the coordinator's notes: never from its log.
struct RegisteredRow {
  std::string name;
  std::string notes;
  size_t from;
  int rank;
  bool want;
};

class RegisteredTable : public ::testing::TestWithParam<RegisteredRow> {};

TEST_P(RegisteredTable, ReadsTheCoordinatorsNotes) {
  const RegisteredRow& row = GetParam();
  EXPECT_EQ(RegisteredSince(row.notes, row.from, row.rank), row.want)
      << row.name;
}

INSTANTIATE_TEST_SUITE_P(
    Rows, RegisteredTable,
    ::testing::Values(
        RegisteredRow{"no notes yet", "", 0, 1, false},
        RegisteredRow{"registered after the start",
                      "registered worker 0\nregistered worker 1\n", 1, 1, true},
        RegisteredRow{"only the earlier process registered",
                      "registered worker 1\nlost 1 worker 1\n", 1, 1, false},
        RegisteredRow{"another rank registered",
                      "registered worker 1\nregistered worker 2\n", 1, 1,
                      false},
        RegisteredRow{"rank 1 is not rank 10",
                      "registered worker 1\nregistered worker 10\n", 1, 1,
                      false},
        RegisteredRow{"an incomplete line does not count",
                      "failed\nregistered worker 1", 1, 1, false},
        RegisteredRow{"recovery events are no registrations",
                      "dead worker 1\ntaken over worker 1 from step 4\n"
                      "released worker 1 before step 6\n"
                      "rejoined worker 1 from step 6\nhosted worker 1\n"
                      "dropped worker 1 from step 3\n"
                      "rolled back generation 1 to step 4\n",
                      0, 1, false},
        RegisteredRow{"among other notes",
                      "registered worker 1\nlost 2 worker 1\nregistered "
                      "worker 1\nfailed\n",
                      2, 1, true}),
    [](const ::testing::TestParamInfo<RegisteredRow>& info) {
      std::string name;
      for (char c : info.param.name) {
        name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      }
      return name;
    });

TEST(SupervisorTest, CountsCompleteLines) {
  EXPECT_EQ(CompleteLines(""), 0u);
  EXPECT_EQ(CompleteLines("failed\n"), 1u);
  EXPECT_EQ(CompleteLines("registered worker 0\nregistered wor"), 1u);
}

TEST(SupervisorTest, ParsesThePlan) {
  auto plan = ParseLaunchPlan(
      "workers=3\nservers=2\nlease_s=6\non_failure=elastic\nmax_restarts=4\n"
      "resume_step=10\n",
      "out/plan.env");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->workers, 3);
  EXPECT_EQ(plan->servers, 2);
  EXPECT_EQ(plan->lease_s, 6);
  EXPECT_EQ(plan->on_failure, OnFailure::kElastic);
  EXPECT_EQ(plan->max_restarts, 4);
}

TEST(SupervisorTest, RejectsABadPlanNamingFileAndKey) {
  auto missing = ParseLaunchPlan("servers=2\n", "out/plan.env");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("out/plan.env"));
  EXPECT_THAT(missing.status().message(), HasSubstr("workers"));
  auto policy =
      ParseLaunchPlan("workers=1\nservers=1\non_failure=retry\n", "p.env");
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(policy.status().message(), HasSubstr("on_failure: 'retry'"));
  auto count = ParseLaunchPlan("workers=-1\nservers=1\n", "p.env");
  EXPECT_THAT(count.status().message(), HasSubstr("workers: '-1'"));
}

TEST(SupervisorTest, CoordinatorFate) {
  EXPECT_EQ(CoordinatorExitCause(137),
            "the coordinator process was killed by SIGKILL");
  EXPECT_EQ(CoordinatorExitCause(3),
            "the coordinator process exited with status 3");
  EXPECT_EQ(CoordinatorFate("worker-1 (pid 5) exited with status 137", 'T', -1),
            "the coordinator was stopped (SIGSTOP) and answered no one; psctl "
            "ended it");
  EXPECT_EQ(
      CoordinatorFate("worker-1 (pid 5) exited with status 137", '\0', 143),
      "the coordinator process was killed by SIGTERM");
  EXPECT_EQ(CoordinatorFate("worker-1 (pid 5) exited with status 137", 'S', -1),
            "the coordinator recorded no cause within network.lease_s + 2 s "
            "of: worker-1 (pid 5) exited with status 137; psctl ended it");
}

TEST(SupervisorTest, FirstFailure) {
  EXPECT_EQ(FirstFailure("worker 1: training diverged", "x", "s.json"),
            "worker 1: training diverged");
  EXPECT_EQ(FirstFailure("coordinator: coordinator stopped by signal",
                         "server-0 (pid 9) exited with status 137", "s.json"),
            "server-0 (pid 9) exited with status 137 (no cause recorded; see "
            "its log)");
  EXPECT_EQ(
      FirstFailure("coordinator: coordinator stopped by signal", "", "s.json"),
      "coordinator: coordinator stopped by signal");
  EXPECT_EQ(FirstFailure("", "x", "out/summary.json"),
            "none recorded in out/summary.json");
}

}  // namespace
}  // namespace pstrain::launch
