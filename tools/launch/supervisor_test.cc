#include "tools/launch/supervisor.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::launch {
namespace {

using ::testing::HasSubstr;
using Kind = Action::Kind;

constexpr Slot kCoordinator{Role::kCoordinator, 0};
constexpr Slot kServer1{Role::kServer, 1};
constexpr Slot kWorker2{Role::kWorker, 2};

// The plan of a job with 3 workers and 2 servers under `policy` ("fail",
// "restart" or "elastic"), as plan.env gives it.
LaunchPlan Plan(const std::string& policy, int max_restarts, int lease_s = 4) {
  absl::StatusOr<LaunchPlan> plan =
      ParseLaunchPlan(absl::StrCat("workers=3\nservers=2\nlease_s=", lease_s,
                                   "\non_failure=", policy,
                                   "\nmax_restarts=", max_restarts, "\n"),
                      "plan.env");
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.value_or(LaunchPlan{});
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
  std::string policy;
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
  Supervisor supervisor(Plan(row.policy, row.max_restarts), false);
  const Action action = supervisor.OnExit(row.slot, 42, row.status, row.facts);
  EXPECT_EQ(action.kind, row.want) << row.name;
  EXPECT_EQ(action.log, row.want_log) << row.name;
}

INSTANTIATE_TEST_SUITE_P(
    Rows, ExitTable,
    ::testing::Values(
        Row{"orderly worker exit", "restart", 3, kWorker2, 0, kLive,
            Kind::kNone, ""},
        Row{"coordinator exit 0 drains", "fail", 0, kCoordinator, 0, kLive,
            Kind::kDrain, ""},
        Row{"fail: a killed worker fails the job", "fail", 3, kWorker2, 137,
            kLive, Kind::kFailJob, ""},
        Row{"restart: a killed server restarts", "restart", 3, kServer1, 137,
            kLive, Kind::kRestart, ""},
        Row{"restart: exit 1 restarts", "restart", 3, kWorker2, 1, kLive,
            Kind::kRestart, ""},
        Row{"restart: exit 2 (bad config) fails", "restart", 3, kWorker2, 2,
            kLive, Kind::kFailJob, ""},
        Row{"restart: the coordinator is never restarted", "restart", 3,
            kCoordinator, 137, kLive, Kind::kFailJob, ""},
        Row{"restart: no restart left", "restart", 0, kServer1, 137, kLive,
            Kind::kFailJob,
            "server-1 (pid 42) exited with status 137; no restart left (0 of "
            "training.max_restarts = 0 used)"},
        Row{"restart: exit after the job failed", "restart", 3, kWorker2, 1,
            With(&JobFacts::job_failed, true), Kind::kFailJob, ""},
        Row{"restart: exit after summary.json", "restart", 3, kWorker2, 1,
            With(&JobFacts::job_over, true), Kind::kFailJob, ""},
        Row{"restart: exit with the coordinator gone", "restart", 3, kWorker2,
            137, With(&JobFacts::coordinator_alive, false), Kind::kFailJob, ""},
        Row{"restart: non-zero exit while draining", "restart", 3, kWorker2, 1,
            With(&JobFacts::draining, true), Kind::kFailJob, ""},
        Row{"elastic: a killed worker rejoins later", "elastic", 1, kWorker2,
            137, kLive, Kind::kRejoinLater,
            "worker-2 (pid 42) exited with status 137; starting it again in "
            "5 s, once its lease has run out (training.on_failure: elastic)"},
        Row{"elastic: no restart left, the job goes on", "elastic", 0, kWorker2,
            137, kLive, Kind::kGoOnWithout,
            "worker-2 (pid 42) exited with status 137; not restarted (0 of "
            "training.max_restarts = 0 used): the job goes on without it "
            "(training.on_failure: elastic)"},
        Row{"elastic: a server's death fails the job", "elastic", 3, kServer1,
            137, kLive, Kind::kFailJob, ""},
        Row{"elastic: exit after the job failed", "elastic", 3, kWorker2, 1,
            With(&JobFacts::job_failed, true), Kind::kFailJob, ""}),
    [](const ::testing::TestParamInfo<Row>& info) {
      std::string name;
      for (char c : info.param.name) {
        name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      }
      return name;
    });

TEST(SupervisorTest, RejoinWaitsForTheLeasePlusOneSecond) {
  Supervisor supervisor(Plan("elastic", 2, /*lease_s=*/7), false);
  const Action action = supervisor.OnExit(kWorker2, 10, 137, kLive);
  ASSERT_EQ(action.kind, Kind::kRejoinLater);
  EXPECT_EQ(action.delay, absl::Seconds(8));
  EXPECT_EQ(action.restart, 1);
  EXPECT_EQ(supervisor.StartedAgainLog(kWorker2, 10, 137, 11, action.restart),
            "worker-2 (pid 10) exited with status 137; restarted as pid 11 to "
            "rejoin its rank (restart 1 of 2, training.on_failure: elastic)");
}

TEST(SupervisorTest, RestartsAreCountedAcrossProcessesUpToTheMaximum) {
  Supervisor supervisor(Plan("restart", 2), false);
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
  Supervisor binaries(Plan("fail", 0), /*worker_cmd=*/false);
  Supervisor python(Plan("fail", 0), /*worker_cmd=*/true);
  EXPECT_EQ(binaries.OnExit(kCoordinator, 1, 0, kLive).delay,
            absl::Seconds(10));
  EXPECT_EQ(python.OnExit(kCoordinator, 1, 0, kLive).delay, absl::Seconds(30));
}

// A loss the coordinator declared beyond the deaths seen names a process
// that still runs (hung): it is ended. A loss that follows a death is that
// death's.
TEST(SupervisorTest, LossBeyondTheDeathsSeenEndsTheProcess) {
  Supervisor supervisor(Plan("restart", 3), false);
  EXPECT_TRUE(supervisor.OnLost(kWorker2));  // hung: end it
  ASSERT_EQ(supervisor.OnExit(kWorker2, 10, 137, kLive).kind, Kind::kRestart);
  ASSERT_EQ(supervisor.OnExit(kServer1, 20, 137, kLive).kind, Kind::kRestart);
  EXPECT_FALSE(supervisor.OnLost(kServer1));  // the death seen
  EXPECT_TRUE(supervisor.OnLost(kWorker2));   // a second hang
}

TEST(SupervisorTest, LossesAreIgnoredUnlessRestart) {
  Supervisor elastic(Plan("elastic", 3), false);
  Supervisor fail(Plan("fail", 3), false);
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
      "tcp_congestion_control=cubic\nresume_step=10\n",
      "out/plan.env");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->workers, 3);
  EXPECT_EQ(plan->servers, 2);
  EXPECT_EQ(plan->lease_s, 6);
  EXPECT_STREQ(Supervisor(*plan, false).policy().name(), "elastic");
  EXPECT_EQ(plan->training.max_restarts(), 4);
  EXPECT_EQ(plan->tcp_congestion_control, "cubic");
  auto host = ParseLaunchPlan("workers=1\nservers=1\ntcp_congestion_control=\n",
                              "out/plan.env");
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->tcp_congestion_control, "");
}

// The policy is the job's: the plan's mode and min_workers reach it (the
// ring's elastic policy hosts ranks; sync's stands in for them).
TEST(SupervisorTest, ThePlansModeAndMinWorkersReachThePolicy) {
  auto ring = ParseLaunchPlan(
      "workers=3\nservers=0\non_failure=elastic\nmax_restarts=2\n"
      "mode=allreduce\nmin_workers=2\n",
      "out/plan.env");
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->training.min_workers(), 2);
  Supervisor ring_supervisor(*ring, false);
  EXPECT_TRUE(ring_supervisor.policy().HostsRanks());
  ASSERT_TRUE(ring_supervisor.policy().Elastic(3).has_value());
  EXPECT_EQ(ring_supervisor.policy().Elastic(3)->min_workers, 2);
  auto sync = ParseLaunchPlan(
      "workers=3\nservers=1\non_failure=elastic\nmode=sync\n", "p.env");
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_TRUE(Supervisor(*sync, false).policy().StandsIn());
  EXPECT_FALSE(Supervisor(*sync, false).policy().HostsRanks());
  // psctl run decides alike in every mode: a lost worker rejoins its rank.
  const Action action = ring_supervisor.OnExit(kWorker2, 42, 137, kLive);
  EXPECT_EQ(action.kind, Kind::kRejoinLater);
  EXPECT_EQ(action.log,
            "worker-2 (pid 42) exited with status 137; starting it again in "
            "6 s, once its lease has run out (training.on_failure: elastic)");
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
  auto mode = ParseLaunchPlan("workers=1\nservers=1\nmode=bsp\n", "p.env");
  EXPECT_EQ(mode.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mode.status().message(), HasSubstr("p.env: mode: 'bsp'"));
  auto min = ParseLaunchPlan("workers=1\nservers=1\nmin_workers=x\n", "p.env");
  EXPECT_THAT(min.status().message(), HasSubstr("min_workers: 'x'"));
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
