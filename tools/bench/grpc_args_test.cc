#include "tools/bench/grpc_args.h"

#include <grpc/grpc.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

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

// The transport set's base is a stream without the BDP probe both ways, and
// every other variant keeps that and changes one thing more.
TEST(GrpcTransportVariants, TheBaseIsBdpOffAndEveryOtherAddsOneSetting) {
  const std::vector<GrpcArgsVariant> v = GrpcTransportVariants();
  ASSERT_GT(v.size(), 1u);
  const std::vector<std::pair<std::string, int>> bdp_off = {
      {GRPC_ARG_HTTP2_BDP_PROBE, 0}};
  EXPECT_EQ(v[0].stream.server_args, bdp_off);
  EXPECT_EQ(v[0].stream.client_args, bdp_off);
  for (size_t i = 1; i < v.size(); ++i) {
    for (const auto* args :
         {&v[i].stream.server_args, &v[i].stream.client_args}) {
      ASSERT_FALSE(args->empty()) << v[i].name;
      EXPECT_EQ(args->front(), bdp_off[0]) << v[i].name;
    }
    EXPECT_TRUE(v[i].stream.server_args.size() > 1 ||
                v[i].stream.message_bytes != v[0].stream.message_bytes)
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
  std::vector<GrpcArgsVariant> variants = GrpcArgsVariants();
  for (GrpcArgsVariant& v : GrpcTransportVariants()) {
    v.name = "transport: " + v.name;
    variants.push_back(std::move(v));
  }
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
