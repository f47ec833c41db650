// ps_path_bench's flags: what they give by default, the compared settings,
// and a bad list naming its flag.
#include "tools/bench/ps_path_bench_flags.h"

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, mb);
ABSL_DECLARE_FLAG(bool, compare_apply_terms);
ABSL_DECLARE_FLAG(bool, compare_push_streams);
ABSL_DECLARE_FLAG(bool, compare_apply_block);
ABSL_DECLARE_FLAG(int32_t, compare_chunk_kib);
ABSL_DECLARE_FLAG(int32_t, compare_pull_message_kib);
ABSL_DECLARE_FLAG(int32_t, compare_pull_streams);

namespace pstrain::bench {
namespace {

class PsPathBenchFlagsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    absl::SetFlag(&FLAGS_mb, "16,64");
    absl::SetFlag(&FLAGS_compare_apply_terms, false);
    absl::SetFlag(&FLAGS_compare_push_streams, false);
    absl::SetFlag(&FLAGS_compare_apply_block, false);
    absl::SetFlag(&FLAGS_compare_chunk_kib, 0);
    absl::SetFlag(&FLAGS_compare_pull_message_kib, 0);
    absl::SetFlag(&FLAGS_compare_pull_streams, 0);
  }
};

TEST_F(PsPathBenchFlagsTest, DefaultsAndTheComparedSetting) {
  absl::SetFlag(&FLAGS_compare_apply_terms, true);
  absl::StatusOr<PsPathBenchOptions> o = PsPathBenchOptionsFromFlags("self");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rounds.mb, (std::vector<int>{16, 64}));
  EXPECT_EQ(o->rounds.servers, (std::vector<int>{1, 2}));
  EXPECT_EQ(o->rounds.workers, (std::vector<int>{1, 4}));
  EXPECT_TRUE(o->rounds.compare_apply_terms);
  EXPECT_FALSE(o->rounds.compare_early_apply);
  EXPECT_FALSE(o->rounds.compare_push_streams);
  EXPECT_FALSE(o->rounds.compare_apply_block);
  absl::SetFlag(&FLAGS_compare_push_streams, true);
  absl::SetFlag(&FLAGS_compare_apply_block, true);
  o = PsPathBenchOptionsFromFlags("self");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->rounds.compare_push_streams);
  EXPECT_TRUE(o->rounds.compare_apply_block);
  EXPECT_EQ(o->memory_workers, (std::vector<int>{1, 4, 16}));
  EXPECT_EQ(o->self_path, "self");
}

TEST_F(PsPathBenchFlagsTest, ABadListNamesItsFlag) {
  absl::SetFlag(&FLAGS_mb, "16,0");
  absl::StatusOr<PsPathBenchOptions> o = PsPathBenchOptionsFromFlags("self");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o.status().message(),
            "--mb: expected positive integers, got '16,0'");
}

TEST_F(PsPathBenchFlagsTest, CompareChunkKibIsTakenAndBoundedByName) {
  absl::StatusOr<PsPathBenchOptions> o = PsPathBenchOptionsFromFlags("self");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rounds.compare_chunk_kib, 0);
  absl::SetFlag(&FLAGS_compare_chunk_kib, 4096);
  o = PsPathBenchOptionsFromFlags("self");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rounds.compare_chunk_kib, 4096);
  absl::SetFlag(&FLAGS_compare_chunk_kib, 4097);
  o = PsPathBenchOptionsFromFlags("self");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().message(),
            "--compare_chunk_kib: must be in [0, 4096], got 4097");
}

TEST_F(PsPathBenchFlagsTest, ComparePullMessageKibIsTakenAndBoundedByName) {
  absl::StatusOr<PsPathBenchOptions> o = PsPathBenchOptionsFromFlags("self");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rounds.compare_pull_message_kib, 0);
  absl::SetFlag(&FLAGS_compare_pull_message_kib, 4096);
  o = PsPathBenchOptionsFromFlags("self");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rounds.compare_pull_message_kib, 4096);
  absl::SetFlag(&FLAGS_compare_pull_message_kib, -1);
  o = PsPathBenchOptionsFromFlags("self");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().message(),
            "--compare_pull_message_kib: must be in [0, 4096], got -1");
}

TEST_F(PsPathBenchFlagsTest, ComparePullStreamsIsTakenAndBoundedByName) {
  absl::StatusOr<PsPathBenchOptions> o = PsPathBenchOptionsFromFlags("self");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rounds.compare_pull_streams, 0);
  absl::SetFlag(&FLAGS_compare_pull_streams, 2);
  o = PsPathBenchOptionsFromFlags("self");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rounds.compare_pull_streams, 2);
  absl::SetFlag(&FLAGS_compare_pull_streams, 9);
  o = PsPathBenchOptionsFromFlags("self");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().message(),
            "--compare_pull_streams: must be in [0, 8], got 9");
}

}  // namespace
}  // namespace pstrain::bench
