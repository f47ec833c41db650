#include "tools/bench/raw_tcp.h"

#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/bench/floor_ps_testing.h"
#include "tools/bench/subprocess.h"

namespace pstrain::bench {
namespace {

// This test's own binary: with --serve_raw_tcp=N it is the child server
// (main below), as ps_bench is.
std::string SelfPath() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "";
}

// Chunks of 64: the SGD rule is applied chunk by chunk, the last one short.
TEST(RawTcpPsTest, PullReturnsTheWeightsTheSgdPushesMade) {
  absl::StatusOr<std::unique_ptr<RawTcpPs>> ps = RawTcpPs::Start(1000, 64);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ExpectPullReturnsTheWeightsTheSgdPushesMade(**ps, 1000);
}

TEST(RawTcpPsTest, RejectsBadSizesAndChangesNothing) {
  EXPECT_EQ(RawTcpPs::Start(0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RawTcpPs::Start(10, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RawTcpPs::Connect(0, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RawTcpPs::Connect(1234, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<RawTcpPs>> ps = RawTcpPs::Start(10);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ExpectAPushOfTheWrongSizeChangesNothing(**ps);
  absl::Status s = (*ps)->Upload(std::vector<float>(9, 1.0f));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "upload of 9 values")) << s;
}

// An upload carries the push's bytes and applies nothing: the weights a
// pull returns are those of the pushes alone.
TEST(RawTcpPsTest, AnUploadLeavesTheWeights) {
  absl::StatusOr<std::unique_ptr<RawTcpPs>> ps = RawTcpPs::Start(100, 7);
  ASSERT_TRUE(ps.ok()) << ps.status();
  const std::vector<float> grad(100, 0.5f);
  ASSERT_TRUE((*ps)->Push(grad).ok());
  std::vector<float> after_push, after_upload;
  ASSERT_TRUE((*ps)->Pull(&after_push).ok());
  ASSERT_TRUE((*ps)->Upload(std::vector<float>(100, 7.0f)).ok());
  ASSERT_TRUE((*ps)->Pull(&after_upload).ok());
  EXPECT_EQ(after_upload, after_push);
  EXPECT_NE(after_push, std::vector<float>(100, 0.0f));
}

TEST(RawTcpPsTest, MeasureTimesEveryStep) {
  ExpectEveryStepTimed(MeasureRawTcpPs(1 << 16, 4), 4);
}

// The server in a process of its own (this binary as the child): the same
// SGD, applied in chunks of RawTcpApartChunkElems (the last one short).
TEST(RawTcpPsApartTest, AChildServesTheSameRule) {
  const uint64_t elems = RawTcpApartChunkElems() + 1000;
  absl::StatusOr<Child> child =
      Child::Start({SelfPath(), absl::StrCat("--serve_raw_tcp=", elems)},
                   /*pipe_stdio=*/true);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<std::string> line =
      child->ReadLine(absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(line.ok()) << line.status();
  ASSERT_TRUE(absl::StartsWith(*line, "port ")) << *line;
  {
    absl::StatusOr<std::unique_ptr<RawTcpPs>> ps =
        RawTcpPs::Connect(std::stoi(line->substr(5)), elems);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ExpectPullReturnsTheWeightsTheSgdPushesMade(**ps, elems);
  }  // closing the connection ends the child
  absl::StatusOr<Finished> done = child->Wait(absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
}

TEST(RawTcpPsApartTest, TheChildRefusesABadCountAndGivesUpWithoutAParent) {
  for (const char* bad : {"0", "-3", "many", ""}) {
    absl::StatusOr<Child> child =
        Child::Start({SelfPath(), absl::StrCat("--serve_raw_tcp=", bad)}, true);
    ASSERT_TRUE(child.ok()) << child.status();
    absl::StatusOr<Finished> done =
        child->Wait(absl::Now() + absl::Seconds(60));
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->exit_code, 2) << bad;
  }
  // Its stdin closed before any client: it stops (status 1), not serving.
  absl::StatusOr<Child> child =
      Child::Start({SelfPath(), "--serve_raw_tcp=10"}, true);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE(child->ReadLine(absl::Now() + absl::Seconds(60)).ok());
  child->CloseStdin();
  absl::StatusOr<Finished> done = child->Wait(absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 1);
}

TEST(RawTcpPsApartTest, MeasureTimesEveryStepOfEachKind) {
  absl::StatusOr<RawApartSeconds> s =
      MeasureRawTcpPsApart(SelfPath(), 1 << 16, 4, /*cpus=*/{});
  ASSERT_TRUE(s.ok()) << s.status();
  for (const std::vector<double>* v : {&s->pull_s, &s->push_s, &s->upload_s}) {
    ASSERT_EQ(v->size(), 1u + kSettleSteps + 4);
    for (double x : *v) EXPECT_GT(x, 0);
  }
  // A binary that prints no port: UNAVAILABLE, naming it.
  absl::StatusOr<RawApartSeconds> none =
      MeasureRawTcpPsApart("/bin/true", 10, 1, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(none.status().message(), "/bin/true"));
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  constexpr char kServe[] = "--serve_raw_tcp=";
  if (argc == 2 && std::strncmp(argv[1], kServe, sizeof(kServe) - 1) == 0) {
    return pstrain::bench::ServeRawTcpPs(argv[1] + sizeof(kServe) - 1);
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
