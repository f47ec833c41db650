#include "coordinator/leases.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(LeaseTableTest, NothingExpiresBeforeItIsHeld) {
  LeaseTable t(2, 2, absl::Seconds(5));
  EXPECT_FALSE(t.Expired(kT0 + absl::Hours(1)).has_value());
}

TEST(LeaseTableTest, SilenceLongerThanTheLeaseIsDeath) {
  LeaseTable t(1, 2, absl::Seconds(5));
  t.Hold(LeaseHolder::kServer, 0, kT0, "ipv4:127.0.0.1:1");
  t.Hold(LeaseHolder::kWorker, 0, kT0, "ipv4:127.0.0.1:2");
  t.Hold(LeaseHolder::kWorker, 1, kT0, "ipv4:127.0.0.1:3");
  // Everyone but worker 1 keeps talking.
  for (int s = 1; s <= 7; ++s) {
    const absl::Time now = kT0 + absl::Seconds(s);
    t.Renew(LeaseHolder::kServer, 0, now);
    t.Renew(LeaseHolder::kWorker, 0, now, s);
    if (s <= 2) t.Renew(LeaseHolder::kWorker, 1, now, 10 + s);
  }
  // Worker 1 last spoke at kT0 + 2 s: alive at +7 s, dead after +7 s.
  EXPECT_FALSE(t.Expired(kT0 + absl::Seconds(7)).has_value());
  std::optional<ExpiredLease> dead =
      t.Expired(kT0 + absl::Seconds(7) + absl::Milliseconds(1));
  ASSERT_TRUE(dead.has_value());
  EXPECT_EQ(dead->holder, LeaseHolder::kWorker);
  EXPECT_EQ(dead->id, 1);
  EXPECT_EQ(dead->step, 12u);
  const std::string line = dead->Describe(t.lease());
  EXPECT_THAT(line, HasSubstr("worker 1 at ipv4:127.0.0.1:3 is dead"));
  EXPECT_THAT(line, HasSubstr("network.lease_s = 5"));
  EXPECT_THAT(line, HasSubstr("last step 12"));
  EXPECT_THAT(dead->Cause(t.lease()),
              testing::StartsWith("dead (at ipv4:127.0.0.1:3): silent for"));
}

TEST(LeaseTableTest, StepsOnlyMoveForwardAndAddressesStay) {
  LeaseTable t(0, 1, absl::Seconds(1));
  t.Hold(LeaseHolder::kWorker, 0, kT0, "a");
  t.Renew(LeaseHolder::kWorker, 0, kT0, 5);
  t.Renew(LeaseHolder::kWorker, 0, kT0, 3);
  std::optional<ExpiredLease> dead = t.Expired(kT0 + absl::Seconds(2));
  ASSERT_TRUE(dead.has_value());
  EXPECT_EQ(dead->step, 5u);
  EXPECT_EQ(dead->address, "a");
}

TEST(LeaseTableTest, ReleasedLeasesNeverExpire) {
  LeaseTable t(1, 1, absl::Seconds(1));
  t.Hold(LeaseHolder::kServer, 0, kT0, "s");
  t.Hold(LeaseHolder::kWorker, 0, kT0, "w");
  EXPECT_TRUE(t.Held(LeaseHolder::kWorker, 0));
  t.Release(LeaseHolder::kWorker, 0);
  EXPECT_FALSE(t.Held(LeaseHolder::kWorker, 0));
  // A finished worker that still says hello does not take its lease back.
  t.Renew(LeaseHolder::kWorker, 0, kT0 + absl::Seconds(1), 9);
  std::optional<ExpiredLease> dead = t.Expired(kT0 + absl::Seconds(3));
  ASSERT_TRUE(dead.has_value());
  EXPECT_EQ(dead->holder, LeaseHolder::kServer);
  EXPECT_THAT(dead->Describe(t.lease()), HasSubstr("server shard 0 at s"));
  t.ReleaseAll();
  EXPECT_FALSE(t.Expired(kT0 + absl::Seconds(3)).has_value());
}

TEST(LeaseTableTest, OutOfRangeIdsAreIgnored) {
  LeaseTable t(1, 1, absl::Seconds(1));
  t.Hold(LeaseHolder::kWorker, 7, kT0, "x");
  t.Hold(LeaseHolder::kServer, -1, kT0, "x");
  t.Renew(LeaseHolder::kWorker, 0, kT0, 1);  // never held
  EXPECT_FALSE(t.Expired(kT0 + absl::Seconds(3)).has_value());
}

}  // namespace
}  // namespace pstrain
