#include "tools/bench/grpc_args.h"

#include <gtest/gtest.h>

namespace pstrain::bench {
namespace {

TEST(GrpcArgsVariants, TheBaseIsGrpcsDefaultsAndEveryOtherChangesSomething) {
  const std::vector<GrpcArgsVariant> v = GrpcArgsVariants();
  ASSERT_GT(v.size(), 1u);
  EXPECT_TRUE(v[0].stream.server_args.empty());
  EXPECT_TRUE(v[0].stream.client_args.empty());
  EXPECT_EQ(v[0].stream.message_bytes, GrpcStreamOptions{}.message_bytes);
  for (size_t i = 1; i < v.size(); ++i) {
    EXPECT_TRUE(!v[i].stream.server_args.empty() ||
                !v[i].stream.client_args.empty() ||
                v[i].stream.message_bytes != GrpcStreamOptions{}.message_bytes)
        << v[i].name;
  }
}

// Every variant really carries bytes both ways (a setting that broke the
// stream would fail the run, naming the variant).
TEST(RunGrpcArgsBench, EveryVariantHasARowInBothDirections) {
  GrpcArgsBenchOptions o;
  o.rounds = 1;
  o.steps = 1;
  o.sizes_mb = {1};
  const std::vector<GrpcArgsVariant> variants = GrpcArgsVariants();
  for (bool download : {false, true}) {
    o.download = download;
    absl::StatusOr<std::string> table = RunGrpcArgsBench(o, variants);
    ASSERT_TRUE(table.ok()) << table.status();
    EXPECT_NE(table->find(download ? "gRPC download" : "gRPC upload"),
              std::string::npos);
    for (const GrpcArgsVariant& v : variants) {
      EXPECT_NE(table->find(v.name), std::string::npos) << v.name;
    }
    EXPECT_NE(table->find("(1.00x)"), std::string::npos) << *table;
  }
}

TEST(RunGrpcArgsBench, BadOptionsAreRefusedBeforeAnythingStarts) {
  GrpcArgsBenchOptions o;
  o.rounds = 0;
  EXPECT_EQ(RunGrpcArgsBench(o, GrpcArgsVariants()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunGrpcArgsBench(GrpcArgsBenchOptions{}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain::bench
