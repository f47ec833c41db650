#include "tests/stranger/stranger_cli.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace stranger {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

StrangerFlags GoodFlags() {
  StrangerFlags f;
  f.targets = "127.0.0.1:4000,localhost:4001";
  f.seconds = 2.5;
  f.max_streams = 8;
  f.rate = 50;
  f.seed = 7;
  return f;
}

TEST(StrangerOptionsFromFlagsTest, TakesTheFlagsAsGiven) {
  absl::StatusOr<StrangerOptions> o = StrangerOptionsFromFlags(GoodFlags());
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->targets.size(), 2u);
  EXPECT_EQ(o->targets[1].given, "localhost:4001");
  EXPECT_EQ(o->duration, absl::Milliseconds(2500));
  EXPECT_EQ(o->max_streams_per_target, 8);
  EXPECT_EQ(o->actions_per_second, 50);
  EXPECT_EQ(o->seed, 7u);
  EXPECT_EQ(o->token, "");
  EXPECT_EQ(StartLine(*o), "ps_stranger: 2 target(s), 2.5 s, seed 7, no token");
}

TEST(StrangerOptionsFromFlagsTest, SeedZeroDrawsOne) {
  StrangerFlags f = GoodFlags();
  f.seed = 0;
  // std::random_device()() is 32 bits; two draws of 0 in a row would be a
  // broken device.
  absl::StatusOr<StrangerOptions> a = StrangerOptionsFromFlags(f);
  absl::StatusOr<StrangerOptions> b = StrangerOptionsFromFlags(f);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->seed != 0 || b->seed != 0);
}

TEST(StrangerOptionsFromFlagsTest, ReadsTheTokenFile) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/job.token";
  const std::string token(32, 'a');
  std::ofstream(path) << token << "\n";
  StrangerFlags f = GoodFlags();
  f.token_file = path;
  absl::StatusOr<StrangerOptions> o = StrangerOptionsFromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->token, token);
  EXPECT_THAT(StartLine(*o), HasSubstr(", with the job token"));
}

TEST(StrangerOptionsFromFlagsTest, BadValuesAreNamedByFlag) {
  struct Case {
    void (*edit)(StrangerFlags*);
    const char* error;
  };
  const Case cases[] = {
      {[](StrangerFlags* f) { f->targets = "10.0.0.1:80"; }, "--targets"},
      {[](StrangerFlags* f) { f->targets = ""; }, "--targets"},
      {[](StrangerFlags* f) { f->seconds = 0; },
       "--seconds: must be in (0, 3600], got 0"},
      {[](StrangerFlags* f) { f->seconds = 3600.5; }, "--seconds: "},
      {[](StrangerFlags* f) { f->seconds = -1; }, "--seconds: "},
      {[](StrangerFlags* f) { f->max_streams = 0; },
       "--max_streams: must be 1..1024, got 0"},
      {[](StrangerFlags* f) { f->max_streams = 1025; }, "--max_streams: "},
      {[](StrangerFlags* f) { f->rate = 0; },
       "--rate: must be 1..10000, got 0"},
      {[](StrangerFlags* f) { f->rate = 10001; }, "--rate: "},
      {[](StrangerFlags* f) { f->token_file = "/nonexistent/job.token"; },
       "--token_file: "},
  };
  for (const Case& c : cases) {
    StrangerFlags f = GoodFlags();
    c.edit(&f);
    absl::StatusOr<StrangerOptions> o = StrangerOptionsFromFlags(f);
    ASSERT_FALSE(o.ok()) << c.error;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(o.status().message()), StartsWith(c.error));
  }
  // NaN is out of range too.
  StrangerFlags f = GoodFlags();
  f.seconds = std::nan("");
  EXPECT_FALSE(StrangerOptionsFromFlags(f).ok());
}

TEST(JudgeTallyTest, CleanRunExitsZeroSayingNothing) {
  StrangerTally t;
  t.by_code["UNAUTHENTICATED"] = 100;
  const StrangerVerdict v = JudgeTally(t, /*with_token=*/false);
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.lines, "");
}

TEST(JudgeTallyTest, BreachesAndUnfinishedCallsFailNamingEach) {
  StrangerTally t;
  t.breaches = {"/pstrain.v1.Coordinator/Report",
                "/pstrain.v1.ParameterServer/Push"};
  t.unfinished = 3;
  StrangerVerdict v = JudgeTally(t, /*with_token=*/false);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.lines,
            "ps_stranger: BREACH: /pstrain.v1.Coordinator/Report returned OK "
            "to a stranger without the token\n"
            "ps_stranger: BREACH: /pstrain.v1.ParameterServer/Push returned "
            "OK to a stranger without the token\n"
            "ps_stranger: 3 call(s) did not end after the cancel\n");
  t.breaches.clear();
  v = JudgeTally(t, /*with_token=*/true);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.lines, "ps_stranger: 3 call(s) did not end after the cancel\n");
  t.unfinished = 0;
  t.breaches = {"/pstrain.v1.ParameterServer/Rollback"};
  EXPECT_EQ(JudgeTally(t, /*with_token=*/true).lines,
            "ps_stranger: BREACH: /pstrain.v1.ParameterServer/Rollback "
            "returned OK to a stranger with the token\n");
}

}  // namespace
}  // namespace stranger
}  // namespace pstrain
