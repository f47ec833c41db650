// TensorGate: open, wait, deadline, abort, reset.
#include "worker/ps/tensor_gate.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(TensorGateTest, WaitReturnsOnceOpenedFromAnotherThread) {
  TensorGate gate(3);
  EXPECT_FALSE(gate.IsOpen(1));
  std::thread opener([&] {
    absl::SleepFor(absl::Milliseconds(20));
    gate.Open(1);
  });
  EXPECT_TRUE(gate.Wait(1, absl::Now() + absl::Seconds(10)).ok());
  opener.join();
  EXPECT_TRUE(gate.IsOpen(1));
  EXPECT_FALSE(gate.IsOpen(0));
  EXPECT_NE(gate.last_open(), absl::InfinitePast());
}

TEST(TensorGateTest, DeadlineAbortAndReset) {
  TensorGate gate(2);
  absl::Status late = gate.Wait(0, absl::Now() + absl::Milliseconds(10));
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
  EXPECT_EQ(gate.Wait(5, absl::Now()).code(),
            absl::StatusCode::kInvalidArgument);
  gate.Abort(absl::UnavailableError("shard 1 is gone"));
  absl::Status aborted = gate.Wait(0, absl::Now() + absl::Seconds(10));
  EXPECT_EQ(aborted.code(), absl::StatusCode::kUnavailable) << aborted;
  gate.OpenAll();
  EXPECT_TRUE(gate.Wait(1, absl::Now()).ok());  // open wins over the abort
  gate.Reset();
  EXPECT_FALSE(gate.IsOpen(1));
  EXPECT_EQ(gate.last_open(), absl::InfinitePast());
  EXPECT_EQ(gate.Wait(1, absl::Now()).code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace pstrain
