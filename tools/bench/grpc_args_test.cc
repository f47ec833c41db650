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

// The server-API set differs only in the API: gRPC's defaults, 1 MiB
// messages, the synchronous handler first.
TEST(GrpcServerApiVariants, TheBaseIsTheSynchronousHandler) {
  const std::vector<GrpcArgsVariant> v = GrpcServerApiVariants();
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].stream.server_api, GrpcServerApi::kSync);
  EXPECT_EQ(v[1].stream.server_api, GrpcServerApi::kCallback);
  EXPECT_EQ(v[2].stream.server_api, GrpcServerApi::kCompletionQueue);
  for (const GrpcArgsVariant& x : v) {
    EXPECT_TRUE(x.stream.server_args.empty()) << x.name;
    EXPECT_TRUE(x.stream.client_args.empty()) << x.name;
    EXPECT_EQ(x.stream.message_bytes, GrpcStreamOptions{}.message_bytes);
  }
}

// Each server API serves whole transfers both ways: the upload's answer
// counts every byte sent, the download delivers exactly what was asked for
// (GrpcStream::Upload and Download fail otherwise), including a last short
// message, an empty transfer and many streams one after the other.
TEST(GrpcStream, EveryServerApiCarriesExactlyTheBytesAskedFor) {
  for (const GrpcArgsVariant& v : GrpcServerApiVariants()) {
    GrpcStreamOptions o = v.stream;
    o.message_bytes = 1000;
    absl::StatusOr<std::unique_ptr<GrpcStream>> s = GrpcStream::Start(o);
    ASSERT_TRUE(s.ok()) << v.name << ": " << s.status();
    for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{999},
                           uint64_t{1000}, uint64_t{12345}}) {
      EXPECT_TRUE((*s)->Upload(bytes).ok()) << v.name << " up " << bytes;
      EXPECT_TRUE((*s)->Download(bytes).ok()) << v.name << " down " << bytes;
    }
    absl::StatusOr<SteadyRate> up = (*s)->UploadSteady(100000, 3);
    ASSERT_TRUE(up.ok()) << v.name << ": " << up.status();
    absl::StatusOr<SteadyRate> down = (*s)->DownloadSteady(100000, 3);
    ASSERT_TRUE(down.ok()) << v.name << ": " << down.status();
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
  for (GrpcArgsVariant& v : GrpcServerApiVariants()) {
    v.name = "server API: " + v.name;
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
