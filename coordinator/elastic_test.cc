#include "coordinator/elastic.h"

#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

using State = ElasticWorkers::State;

ElasticWorkers Make(int n, int min_workers, bool takeover) {
  ElasticOptions o;
  o.num_workers = n;
  o.min_workers = min_workers;
  o.takeover = takeover;
  return ElasticWorkers(o);
}

TEST(ElasticTest, SyncDeadRankIsTakenOverByALiveUnfinishedWorker) {
  ElasticWorkers e = Make(4, 1, /*takeover=*/true);
  const std::vector<bool> none(4, false);
  ASSERT_TRUE(e.Depart(2, none).ok());
  EXPECT_EQ(e.state(2), State::kDeparted);
  EXPECT_EQ(e.live_workers(), 3);
  // Live adopters {0, 1, 3}: rank 2 goes to the (2 mod 3)-th, rank 3.
  EXPECT_EQ(e.AdopterOf(2, none), 3);
  EXPECT_EQ(e.AdoptionsFor(3, none), std::vector<uint32_t>{2});
  EXPECT_TRUE(e.AdoptionsFor(0, none).empty());
  // A finished worker adopts nothing: {0, 1} remain, 2 mod 2 = 0.
  EXPECT_EQ(e.AdopterOf(2, {false, false, false, true}), 0);
  EXPECT_TRUE(e.Abandon(none).empty());
  // The adopter registers with adopt: a stand-in, not a live worker.
  ASSERT_EQ(e.RankFor(2, /*adopt=*/true).value(), 2);
  const uint64_t epoch = e.epoch();
  e.Registered(2, /*adopt=*/true);
  EXPECT_GT(e.epoch(), epoch);
  EXPECT_EQ(e.state(2), State::kStandIn);
  EXPECT_EQ(e.live_workers(), 3);
  EXPECT_TRUE(e.AdoptionsFor(3, none).empty());
}

TEST(ElasticTest, JoinersTakeDeadOrStandInRanksNeverLiveOnes) {
  ElasticWorkers e = Make(3, 1, true);
  const std::vector<bool> none(3, false);
  const std::vector<bool> all(3, true);
  EXPECT_EQ(e.RankFor(1, false).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(e.RankFor(3, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.RankFor(-1, false).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Before every rank registered, registrations are Membership's.
  EXPECT_FALSE(e.Handles(-1, {true, false, true}));
  EXPECT_FALSE(e.Handles(1, {true, false, true}));
  EXPECT_TRUE(e.Handles(0, {true, false, true}));
  EXPECT_TRUE(e.Handles(-1, all));

  ASSERT_TRUE(e.Depart(1, none).ok());
  // Adopting a live rank is refused; adopting the dead one works.
  EXPECT_EQ(e.RankFor(0, true).status().code(),
            absl::StatusCode::kAlreadyExists);
  e.Registered(1, /*adopt=*/true);
  EXPECT_EQ(e.RankFor(1, true).status().code(),
            absl::StatusCode::kAlreadyExists);
  // A joiner replaces the stand-in (any rank: the stand-in one).
  EXPECT_EQ(e.RankFor(-1, false).value(), 1);
  e.Registered(1, false);
  EXPECT_EQ(e.state(1), State::kLive);
  EXPECT_EQ(e.live_workers(), 3);
  // A departed rank comes before a stand-in one for "any".
  ASSERT_TRUE(e.Depart(2, none).ok());
  ASSERT_TRUE(e.Depart(0, none).ok());
  e.Registered(0, true);
  EXPECT_EQ(e.RankFor(-1, false).value(), 2);
}

TEST(ElasticTest, FailsBelowMinWorkers) {
  ElasticWorkers e = Make(3, 2, true);
  const std::vector<bool> none(3, false);
  EXPECT_TRUE(e.Depart(0, none).ok());
  const absl::Status st = e.Depart(2, none);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("1 live worker left"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("training.min_workers = 2"), std::string::npos);
}

TEST(ElasticTest, AsyncAbandonsDeadRanksAndSyncOnlyWithoutAdopters) {
  ElasticWorkers async = Make(2, 1, /*takeover=*/false);
  const std::vector<bool> none(2, false);
  ASSERT_TRUE(async.Depart(1, none).ok());
  EXPECT_EQ(async.AdopterOf(1, none), -1);
  EXPECT_TRUE(async.AdoptionsFor(0, none).empty());
  EXPECT_EQ(async.Abandon(none), std::vector<int>{1});
  EXPECT_TRUE(async.Abandon(none).empty());  // once
  EXPECT_TRUE(async.vacant(1));
  // A joiner takes the abandoned rank.
  EXPECT_EQ(async.RankFor(1, false).value(), 1);

  ElasticWorkers sync = Make(2, 1, true);
  ASSERT_TRUE(sync.Depart(1, none).ok());
  EXPECT_TRUE(sync.Abandon(none).empty());
  // Worker 0 finished: nobody is left to take rank 1 over.
  EXPECT_EQ(sync.Abandon({true, false}), std::vector<int>{1});
  EXPECT_EQ(sync.state(1), State::kAbandoned);
}

TEST(ElasticTest, SyncHandoverWaitsForTheStandInsRelease) {
  ElasticWorkers e = Make(3, 1, /*takeover=*/true);
  const std::vector<bool> none(3, false);
  ASSERT_TRUE(e.Depart(1, none).ok());
  e.Registered(1, /*adopt=*/true);
  ASSERT_EQ(e.state(1), State::kStandIn);
  // Nobody asked: the stand-in keeps the rank.
  EXPECT_FALSE(e.Ready(1));
  EXPECT_FALSE(e.ReleaseRequested(1));
  EXPECT_EQ(e.Release(1, 7).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(e.state(1), State::kStandIn);
  // A new worker asks: handover; not ready until the stand-in releases.
  ASSERT_EQ(e.RankFor(1, /*adopt=*/false).value(), 1);
  e.Want(1);
  EXPECT_EQ(e.state(1), State::kHandover);
  EXPECT_TRUE(e.ReleaseRequested(1));
  EXPECT_FALSE(e.Ready(1));
  EXPECT_EQ(e.RankFor(1, /*adopt=*/true).status().code(),
            absl::StatusCode::kAlreadyExists);
  // Wanting a live rank changes nothing.
  e.Want(0);
  EXPECT_EQ(e.state(0), State::kLive);
  const uint64_t epoch = e.epoch();
  ASSERT_TRUE(e.Release(1, 7).ok());
  EXPECT_GT(e.epoch(), epoch);
  EXPECT_EQ(e.state(1), State::kReleased);
  EXPECT_EQ(e.released_step(1), 7u);
  EXPECT_TRUE(e.Ready(1));
  EXPECT_FALSE(e.vacant(1));
  // Once only.
  EXPECT_EQ(e.Release(1, 8).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(e.released_step(1), 7u);
  // "Any rank" prefers the released one.
  ASSERT_TRUE(e.Depart(2, none).ok());
  EXPECT_EQ(e.RankFor(-1, false).value(), 1);
  e.Registered(1, /*adopt=*/false);
  EXPECT_EQ(e.state(1), State::kLive);
  EXPECT_EQ(e.live_workers(), 2);
  EXPECT_EQ(e.RankFor(1, false).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(ElasticTest, SyncHandoverOfADepartedRankFollowsItsTakeover) {
  ElasticWorkers e = Make(3, 1, true);
  const std::vector<bool> none(3, false);
  ASSERT_TRUE(e.Depart(2, none).ok());
  // A new worker wants rank 2 before anybody took it over: it is still
  // offered for takeover, and handed over as soon as it is taken.
  e.Want(2);
  EXPECT_EQ(e.state(2), State::kDeparted);
  EXPECT_FALSE(e.Ready(2));
  EXPECT_GE(e.AdopterOf(2, none), 0);
  e.Registered(2, /*adopt=*/true);
  EXPECT_EQ(e.state(2), State::kHandover);
  // The stand-in dies in the handover: the rank departs, the new worker
  // still waits, and the next stand-in is asked at once.
  ASSERT_TRUE(e.Depart(2, none).ok());
  EXPECT_EQ(e.state(2), State::kDeparted);
  e.Registered(2, true);
  EXPECT_EQ(e.state(2), State::kHandover);
  ASSERT_TRUE(e.Release(2, 12).ok());
  // The new worker never came (its lease for the released rank ran out):
  // the rank departs and its next takeover is an ordinary one.
  ASSERT_TRUE(e.Depart(2, none).ok());
  e.Registered(2, true);
  EXPECT_EQ(e.state(2), State::kStandIn);
}

TEST(ElasticTest, StandInDyingDepartsItsOwnAndItsAdoptedRanks) {
  // Rank 2 taken over by rank 0; then rank 0 dies: both its rank and the
  // one it stood in for go to rank 1, the only live worker left.
  ElasticWorkers e = Make(3, 1, true);
  const std::vector<bool> none(3, false);
  ASSERT_TRUE(e.Depart(2, none).ok());
  ASSERT_EQ(e.AdopterOf(2, none), 0);
  e.Registered(2, true);
  ASSERT_TRUE(e.Depart(0, none).ok());
  ASSERT_TRUE(e.Depart(2, none).ok());
  EXPECT_EQ(e.AdoptionsFor(1, none), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(e.live_workers(), 1);
  // With training.min_workers = 2 the second death fails the job.
  ElasticWorkers strict = Make(3, 2, true);
  ASSERT_TRUE(strict.Depart(2, none).ok());
  strict.Registered(2, true);
  EXPECT_EQ(strict.Depart(0, none).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ElasticTest, AsyncNeedsNoHandover) {
  ElasticWorkers e = Make(2, 1, /*takeover=*/false);
  ASSERT_TRUE(e.Depart(1, {false, false}).ok());
  EXPECT_TRUE(e.Ready(1));
  e.Want(1);
  EXPECT_EQ(e.state(1), State::kDeparted);
}

}  // namespace
}  // namespace pstrain
