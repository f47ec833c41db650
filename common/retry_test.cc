#include "common/retry.h"

#include <atomic>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(RetryTest, RetriesUnavailableUntilOk) {
  int calls = 0;
  absl::Status st = RetryUntil(absl::Now() + absl::Seconds(10), "peer", [&] {
    return ++calls < 3 ? absl::UnavailableError("down") : absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(calls, 3);
}

TEST(RetryTest, OtherErrorsReturnAtOnce) {
  int calls = 0;
  absl::Status st = RetryUntil(absl::Now() + absl::Seconds(10), "peer", [&] {
    ++calls;
    return absl::FailedPreconditionError("over");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(calls, 1);
}

// SIGTERM while waiting for a peer that never comes: the wait ends within
// one 50 ms poll, long before the deadline.
TEST(RetryTest, StopEndsTheWait) {
  std::atomic<int> calls{0};
  const absl::Time start = absl::Now();
  absl::Status st = RetryUntil(
      absl::Now() + absl::Seconds(60), "the coordinator",
      [&] {
        ++calls;
        return absl::UnavailableError("down");
      },
      [&] { return absl::Now() - start > absl::Milliseconds(300); });
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  EXPECT_NE(st.message().find("stopped while waiting for the coordinator"),
            std::string::npos)
      << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_GE(calls.load(), 2);
}

}  // namespace
}  // namespace pstrain
