#include "coordinator/recovery.h"

#include <utility>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(RecoveryTest, ALossStartsAGenerationThatEndsWithTheRollback) {
  Recovery r(/*max_restarts=*/3, absl::Seconds(10));
  EXPECT_FALSE(r.recovering());
  EXPECT_EQ(r.generation(), 0u);
  ASSERT_TRUE(r.Lost(LeaseHolder::kServer, 1, kT0).ok());
  EXPECT_TRUE(r.recovering());
  EXPECT_EQ(r.generation(), 1u);
  EXPECT_EQ(r.deadline(), kT0 + absl::Seconds(10));
  EXPECT_TRUE(r.Covers(LeaseHolder::kServer, 1));
  EXPECT_FALSE(r.Covers(LeaseHolder::kWorker, 1));
  EXPECT_FALSE(r.AllFilled());
  EXPECT_EQ(r.Missing(), "server shard 1");
  EXPECT_EQ(r.FirstMissing(), std::make_pair(LeaseHolder::kServer, 1));
  r.Filled(LeaseHolder::kServer, 1);
  EXPECT_TRUE(r.AllFilled());
  r.Done(20);
  EXPECT_FALSE(r.recovering());
  EXPECT_EQ(r.generation(), 1u);
  EXPECT_EQ(r.generation_step(), 20u);
  EXPECT_FALSE(r.Covers(LeaseHolder::kServer, 1));
  EXPECT_EQ(r.deadline(), absl::InfiniteFuture());
}

TEST(RecoveryTest, ASecondLossJoinsTheRecoveryAndMovesTheDeadline) {
  Recovery r(3, absl::Seconds(10));
  ASSERT_TRUE(r.Lost(LeaseHolder::kServer, 0, kT0).ok());
  r.Filled(LeaseHolder::kServer, 0);
  ASSERT_TRUE(r.Lost(LeaseHolder::kWorker, 1, kT0 + absl::Seconds(4)).ok());
  EXPECT_EQ(r.generation(), 2u);
  EXPECT_EQ(r.restarts(), 2);
  EXPECT_EQ(r.deadline(), kT0 + absl::Seconds(14));
  EXPECT_EQ(r.Missing(), "worker 1");
  // A replacement registering again awaits again (same restart).
  r.Refill(LeaseHolder::kServer, 0);
  EXPECT_EQ(r.Missing(), "server shard 0, worker 1");
  r.Filled(LeaseHolder::kServer, 0);
  r.Filled(LeaseHolder::kWorker, 1);
  EXPECT_TRUE(r.AllFilled());
}

TEST(RecoveryTest, RestartsAreBounded) {
  Recovery r(1, absl::Seconds(10));
  ASSERT_TRUE(r.Lost(LeaseHolder::kWorker, 0, kT0).ok());
  r.Filled(LeaseHolder::kWorker, 0);
  r.Done(0);
  const absl::Status st = r.Lost(LeaseHolder::kWorker, 0, kT0);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("training.max_restarts = 1"),
            absl::string_view::npos)
      << st;
  // Nothing changed.
  EXPECT_FALSE(r.recovering());
  EXPECT_EQ(r.generation(), 1u);
  Recovery none(0, absl::Seconds(1));
  EXPECT_FALSE(none.Lost(LeaseHolder::kServer, 0, kT0).ok());
  EXPECT_EQ(none.generation(), 0u);
}

}  // namespace
}  // namespace pstrain
