#include "server/worker_sessions.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace pstrain {
namespace {

TEST(WorkerSessionsTest, FixedTableChecksRankAndId) {
  auto s = WorkerSessions::Fixed({11, 22});
  EXPECT_TRUE(s->Check(0, 11, "Push").ok());
  EXPECT_TRUE(s->Check(1, 22, "Push").ok());
  for (uint64_t wrong : {uint64_t{0}, uint64_t{11}, uint64_t{23}}) {
    absl::Status st = s->Check(1, wrong, "Push");
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << wrong;
    EXPECT_NE(st.message().find("Push: the session id for worker 1"),
              std::string::npos)
        << st.message();
    EXPECT_EQ(st.message().find("22"), std::string::npos) << st.message();
  }
  absl::Status unknown = s->Check(2, 11, "Push");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("unknown worker 2"), std::string::npos);
}

// The coordinator's table, as a test fake.
struct FakeCoordinator {
  absl::Mutex mu;
  std::vector<uint64_t> ids ABSL_GUARDED_BY(mu);
  absl::Status error ABSL_GUARDED_BY(mu);
  std::atomic<int> calls{0};

  WorkerSessions::Fetch fetch() {
    return [this](absl::Time) -> absl::StatusOr<std::vector<uint64_t>> {
      ++calls;
      absl::MutexLock lock(&mu);
      if (!error.ok()) return error;
      return ids;
    };
  }
  void Set(std::vector<uint64_t> v) {
    absl::MutexLock lock(&mu);
    ids = std::move(v);
  }
};

// Elastic workers: the coordinator ended a dead rank's session; the
// server refreshes on its heartbeat's membership epoch, and from then on
// the dead process's pushes are refused without any pull of its own.
TEST(WorkerSessionsTest, RefreshOnDemandEndsADeadRanksSession) {
  FakeCoordinator coord;
  coord.Set({5, 6});
  WorkerSessions s(2, coord.fetch(), absl::Milliseconds(1));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  ASSERT_TRUE(s.CheckOrRefresh(1, 6, "Pull", deadline).ok());
  coord.Set({5, 0});
  EXPECT_TRUE(s.Check(1, 6, "Push").ok());  // not known yet
  EXPECT_TRUE(s.Refresh(deadline).ok());
  EXPECT_EQ(s.Check(1, 6, "Push").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(s.Check(0, 5, "Push").ok());
  {
    absl::MutexLock lock(&coord.mu);
    coord.error = absl::UnavailableError("coordinator down");
  }
  EXPECT_EQ(s.Refresh(deadline).code(), absl::StatusCode::kUnavailable);
}

TEST(WorkerSessionsTest, UnknownIdsRefreshAndReplacedIdsAreRefused) {
  FakeCoordinator coord;
  coord.Set({0, 0});
  WorkerSessions s(2, coord.fetch(), absl::Milliseconds(1));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  // Rank 0 not registered yet: refused after a refresh.
  EXPECT_EQ(s.CheckOrRefresh(0, 5, "Pull", deadline).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(coord.calls.load(), 1);
  // Registered: its first pull fetches the id.
  coord.Set({5, 6});
  EXPECT_TRUE(s.CheckOrRefresh(0, 5, "Pull", deadline).ok());
  EXPECT_EQ(coord.calls.load(), 2);
  // Known ids cost nothing.
  EXPECT_TRUE(s.CheckOrRefresh(1, 6, "Pull", deadline).ok());
  EXPECT_TRUE(s.Check(0, 5, "Push").ok());
  EXPECT_EQ(coord.calls.load(), 2);
  // Rank 0 is registered again by a new process: the new id is learnt on
  // its pull, and the old process is refused from then on.
  coord.Set({7, 6});
  EXPECT_TRUE(s.CheckOrRefresh(0, 7, "Pull", deadline).ok());
  EXPECT_EQ(s.Check(0, 5, "Push").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.CheckOrRefresh(0, 5, "Pull", deadline).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(WorkerSessionsTest, AFailedRefreshIsNamedAndChangesNothing) {
  FakeCoordinator coord;
  coord.Set({5});
  WorkerSessions s(1, coord.fetch(), absl::Milliseconds(1));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  ASSERT_TRUE(s.CheckOrRefresh(0, 5, "Pull", deadline).ok());
  {
    absl::MutexLock lock(&coord.mu);
    coord.error = absl::UnavailableError("coordinator gone");
  }
  absl::Status st = s.CheckOrRefresh(0, 8, "Pull", deadline);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("coordinator gone"), std::string::npos) << st;
  EXPECT_TRUE(s.Check(0, 5, "Push").ok());
  // A table of the wrong size is not taken either.
  {
    absl::MutexLock lock(&coord.mu);
    coord.error = absl::OkStatus();
    coord.ids = {8, 9};
  }
  EXPECT_EQ(s.CheckOrRefresh(0, 8, "Pull", deadline).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(s.Check(0, 5, "Push").ok());
}

// Made-up ids cannot make the shard hammer the coordinator: refreshes are
// serialised and spaced, and concurrent callers share them.
TEST(WorkerSessionsTest, RefreshesAreSpacedAndShared) {
  FakeCoordinator coord;
  coord.Set({5, 6});
  const absl::Duration interval = absl::Milliseconds(50);
  WorkerSessions s(2, coord.fetch(), interval);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  std::atomic<int> denied{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        const absl::Status st = s.CheckOrRefresh(
            t % 2, 1000 + t, "Pull", absl::Now() + absl::Seconds(5));
        denied += st.code() == absl::StatusCode::kPermissionDenied;
      }
    });
  }
  for (auto& th : threads) th.join();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(denied.load(), 40);
  // 40 denied calls, but refreshes at most one per interval (plus the first).
  EXPECT_LE(coord.calls.load(), took / interval + 1)
      << coord.calls.load() << " fetches in " << took;
  EXPECT_LT(coord.calls.load(), 40);
  // A caller whose deadline comes before the next allowed refresh is refused
  // at once instead of waiting.
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(s.CheckOrRefresh(0, 1, "Pull", absl::Now() + absl::Milliseconds(1))
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
}

}  // namespace
}  // namespace pstrain
