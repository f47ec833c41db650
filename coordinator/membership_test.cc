#include "coordinator/membership.h"

#include <gtest/gtest.h>

#include <set>

namespace pstrain {
namespace {

TEST(MembershipTest, ServersGetRequestedOrLowestFreeShards) {
  Membership m(3, 1, false);
  EXPECT_EQ(*m.RegisterServer("a:1", 2), 2);
  EXPECT_EQ(*m.RegisterServer("b:1", -1), 0);
  EXPECT_FALSE(m.AllServersRegistered());
  EXPECT_EQ(*m.RegisterServer("c:1", -1), 1);
  EXPECT_TRUE(m.AllServersRegistered());
  EXPECT_EQ(m.server_addresses(),
            (std::vector<std::string>{"b:1", "c:1", "a:1"}));
  EXPECT_EQ(m.registered_servers(), 3);
}

TEST(MembershipTest, ServerConflictsHaveTheirOwnCodes) {
  Membership m(2, 1, false);
  ASSERT_TRUE(m.RegisterServer("a:1", 0).ok());
  absl::StatusOr<int> taken = m.RegisterServer("b:1", 0);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(taken.status().message().find("shard 0 is already held by a:1"),
            std::string::npos);
  EXPECT_EQ(m.RegisterServer("b:1", 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.RegisterServer("", -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.RegisterServer("b:1", -1).ok());
  EXPECT_EQ(m.RegisterServer("c:1", -1).status().code(),
            absl::StatusCode::kResourceExhausted);
  // The failed attempts changed nothing.
  EXPECT_EQ(m.server_addresses(), (std::vector<std::string>{"a:1", "b:1"}));
}

TEST(MembershipTest, ServerReRegistrationGetsItsShardBack) {
  Membership m(2, 1, false);
  ASSERT_EQ(*m.RegisterServer("a:1", 1), 1);
  EXPECT_EQ(*m.RegisterServer("a:1", -1), 1);
  EXPECT_EQ(*m.RegisterServer("a:1", 0), 1);  // its shard, not a second one
  EXPECT_EQ(m.registered_servers(), 1);
}

TEST(MembershipTest, ReadinessOnlyForRegisteredShards) {
  Membership m(2, 1, false);
  EXPECT_EQ(m.MarkServerReady(0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m.MarkServerReady(7).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(m.RegisterServer("a:1", 0).ok());
  ASSERT_TRUE(m.RegisterServer("b:1", 1).ok());
  ASSERT_TRUE(m.MarkServerReady(0).ok());
  EXPECT_FALSE(m.AllServersReady());
  ASSERT_TRUE(m.MarkServerReady(1).ok());
  EXPECT_TRUE(m.AllServersReady());
}

TEST(MembershipTest, WorkerRanksConflictsAndDone) {
  Membership m(0, 3, false);
  EXPECT_TRUE(m.AllServersReady());  // no servers: nothing to wait for
  EXPECT_EQ(*m.RegisterWorker(1, ""), 1);
  EXPECT_EQ(m.RegisterWorker(1, "").status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(m.RegisterWorker(3, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*m.RegisterWorker(-1, ""), 0);
  EXPECT_EQ(*m.RegisterWorker(-1, ""), 2);
  EXPECT_EQ(m.RegisterWorker(-1, "").status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(m.AllWorkersRegistered());
  EXPECT_EQ(m.live_workers(), 3);
  EXPECT_TRUE(m.CheckWorker(2).ok());
  EXPECT_EQ(m.CheckWorker(3).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m.CheckWorker(-1).code(), absl::StatusCode::kNotFound);
  m.MarkWorkerDone(0);
  m.MarkWorkerDone(0);
  m.MarkWorkerDone(9);  // unknown: ignored
  EXPECT_EQ(m.live_workers(), 2);
  EXPECT_FALSE(m.AllWorkersDone());
  m.MarkWorkerDone(1);
  m.MarkWorkerDone(2);
  EXPECT_TRUE(m.AllWorkersDone());
}

TEST(MembershipTest, UnregisteredWorkersAreUnknown) {
  Membership m(0, 2, false);
  EXPECT_EQ(m.CheckWorker(0).code(), absl::StatusCode::kNotFound);
}

TEST(MembershipTest, RingPeersRequiredAndRetriesIdempotent) {
  Membership m(0, 2, true);
  EXPECT_EQ(m.RegisterWorker(0, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*m.RegisterWorker(0, "p0:1"), 0);
  EXPECT_EQ(m.missing_peers(), std::vector<int>{1});
  // A retry from the same peer (its answer was lost) gets its rank back...
  EXPECT_EQ(*m.RegisterWorker(0, "p0:1"), 0);
  EXPECT_EQ(*m.RegisterWorker(-1, "p0:1"), 0);
  // ...another peer asking for that rank does not.
  EXPECT_EQ(m.RegisterWorker(0, "p9:1").status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(m.AllPeersKnown());
  EXPECT_EQ(*m.RegisterWorker(-1, "p1:1"), 1);
  EXPECT_TRUE(m.AllPeersKnown());
  EXPECT_EQ(m.peer_addresses(), (std::vector<std::string>{"p0:1", "p1:1"}));
}

TEST(MembershipTest, SessionIdsAreCheckedAndRenewedOnReRegistration) {
  uint64_t next = 100;
  Membership m(1, 2, false, [&next] { return next++; });
  EXPECT_EQ(m.CheckWorkerSession(0, 100, "Report").code(),
            absl::StatusCode::kNotFound);
  ASSERT_EQ(*m.RegisterServer("a:1", 0), 0);
  EXPECT_EQ(m.server_session(0), 100u);
  EXPECT_EQ(*m.RegisterWorker(-1, ""), 0);
  EXPECT_EQ(*m.RegisterWorker(-1, ""), 1);
  EXPECT_EQ(m.worker_sessions(), (std::vector<uint64_t>{101, 102}));
  EXPECT_TRUE(m.CheckWorkerSession(1, 102, "Report").ok());
  // Missing, another rank's, and made-up ids are refused; the message names
  // the rank but not the id it expected.
  for (uint64_t wrong : {uint64_t{0}, uint64_t{101}, uint64_t{7}}) {
    absl::Status st = m.CheckWorkerSession(1, wrong, "Report");
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << wrong;
    EXPECT_NE(st.message().find("Report: the session id for worker 1"),
              std::string::npos)
        << st.message();
    EXPECT_EQ(st.message().find("102"), std::string::npos) << st.message();
  }
  // A server registering again from its address (a restarted process, or
  // a retry) gets a new id; the old one is stale.
  ASSERT_EQ(*m.RegisterServer("a:1", -1), 0);
  EXPECT_EQ(m.server_session(0), 103u);
  EXPECT_EQ(m.CheckServerSession(0, 100, "ServerReady").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(m.CheckServerSession(0, 103, "ServerReady").ok());
  EXPECT_EQ(m.CheckServerSession(1, 103, "ServerReady").code(),
            absl::StatusCode::kNotFound);
}

TEST(MembershipTest, RingRetryKeepsItsSessionId) {
  uint64_t next = 1;
  Membership m(0, 2, true, [&next] { return next++; });
  ASSERT_EQ(*m.RegisterWorker(-1, "p0:1"), 0);
  ASSERT_EQ(*m.RegisterWorker(0, "p0:1"), 0);  // its answer was lost
  EXPECT_EQ(m.worker_session(0), 1u);
  ASSERT_EQ(*m.RegisterWorker(-1, "p1:1"), 1);
  EXPECT_EQ(m.worker_session(1), 2u);
}

TEST(MembershipTest, RandomSessionIdsDifferAndAreNeverZero) {
  Membership m(0, 64, false);
  std::set<uint64_t> seen;
  for (int r = 0; r < 64; ++r) {
    ASSERT_TRUE(m.RegisterWorker(r, "").ok());
    EXPECT_NE(m.worker_session(r), 0u);
    seen.insert(m.worker_session(r));
  }
  EXPECT_EQ(seen.size(), 64u);
}

}  // namespace
}  // namespace pstrain
