#include "tools/bench/grpc_args.h"

#include <grpc/grpc.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/allreduce/heap_reuse.h"

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

// The session set alternates a call per transfer and one call across
// transfers, the first a call per transfer on the synchronous handler; each
// pair differs in the session alone, and a session's ratios are to its
// twin.
TEST(GrpcSessionVariants, EachPairDiffersInTheSessionAlone) {
  const std::vector<GrpcArgsVariant> v = GrpcSessionVariants();
  ASSERT_EQ(v.size() % 2, 0u);
  ASSERT_GE(v.size(), 4u);
  EXPECT_EQ(v[0].stream.server_api, GrpcServerApi::kSync);
  for (size_t i = 0; i < v.size(); i += 2) {
    EXPECT_FALSE(v[i].stream.session) << v[i].name;
    EXPECT_TRUE(v[i + 1].stream.session) << v[i + 1].name;
    EXPECT_EQ(v[i].base, 0u) << v[i].name;
    EXPECT_EQ(v[i + 1].base, i) << v[i + 1].name;
    EXPECT_EQ(v[i].stream.server_api, v[i + 1].stream.server_api);
    EXPECT_EQ(v[i].stream.server_args, v[i + 1].stream.server_args);
    EXPECT_EQ(v[i].stream.client_args, v[i + 1].stream.client_args);
    EXPECT_EQ(v[i].stream.message_bytes, v[i + 1].stream.message_bytes);
  }
}

TEST(GrpcStream, ASessionOnTheCompletionQueueIsRefusedBeforeItStarts) {
  GrpcStreamOptions o;
  o.session = true;
  o.server_api = GrpcServerApi::kCompletionQueue;
  EXPECT_EQ(GrpcStream::Start(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.server_address = "127.0.0.1:1";  // its server elsewhere: the same
  EXPECT_EQ(GrpcStream::Start(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Each server API serves whole transfers both ways: the upload's answer
// counts every byte sent, the download delivers exactly what was asked for
// (GrpcStream::Upload and Download fail otherwise), including a last short
// message, an empty transfer and many streams one after the other; and so
// does one call across transfers (a session), where each transfer's end is
// its message marked last.
TEST(GrpcStream, EveryServerApiCarriesExactlyTheBytesAskedFor) {
  std::vector<GrpcArgsVariant> variants = GrpcServerApiVariants();
  for (GrpcArgsVariant& v : GrpcSessionVariants()) {
    if (v.stream.session) variants.push_back(std::move(v));
  }
  for (const GrpcArgsVariant& v : variants) {
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
  for (GrpcArgsVariant& v : GrpcSessionVariants()) {
    v.name = "session: " + v.name;
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

// With an iperf3 binary every round measures it once and the table adds a
// row of it and each variant's ratio to it. A stand-in iperf3 (a script
// answering 8 Gbit/s as iperf3 -J does) keeps the test off the wire's
// speed; a binary that cannot run fails the bench, naming it.
TEST(RunGrpcArgsBench, AnIperf3AnchorAddsItsRowAndTheRatiosToIt) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(tmp, nullptr);
  const std::string fake = std::string(tmp) + "/fake_iperf3";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\n"
         "case \" $* \" in *' -s '*) exec sleep 600;; esac\n"
         "echo '{\"end\": {\"sum_received\": {\"bits_per_second\": 8e9}}}'\n";
  }
  ASSERT_EQ(chmod(fake.c_str(), 0755), 0);
  GrpcArgsBenchOptions o;
  o.rounds = 2;
  o.steps = 1;
  o.sizes_mb = {1};
  o.iperf3 = fake;
  absl::StatusOr<std::string> table =
      RunGrpcArgsBench(o, GrpcSessionVariants());
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_NE(table->find("iperf3 -l 1M: median 1.00 GB/s, rounds: 1.00 1.00"),
            std::string::npos)
      << *table;
  const size_t ratios = table->find("variant / iperf3 (per-round ratios)");
  ASSERT_NE(ratios, std::string::npos) << *table;
  for (const GrpcArgsVariant& v : GrpcSessionVariants()) {
    EXPECT_NE(table->find(v.name, ratios), std::string::npos) << v.name;
  }
  o.iperf3 = std::string(tmp) + "/no_such_iperf3";
  EXPECT_FALSE(RunGrpcArgsBench(o, GrpcSessionVariants()).ok());
}

TEST(GrpcArgsVariantSet, EachNameGivesItsSetAndAnOtherNameIsRefused) {
  EXPECT_EQ(GrpcArgsVariantSet("http2")->size(), GrpcArgsVariants().size());
  EXPECT_EQ(GrpcArgsVariantSet("transport")->size(),
            GrpcTransportVariants().size());
  EXPECT_EQ(GrpcArgsVariantSet("server_api")->size(),
            GrpcServerApiVariants().size());
  EXPECT_EQ(GrpcArgsVariantSet("session")->size(),
            GrpcSessionVariants().size());
  EXPECT_EQ(GrpcArgsVariantSet("session", 5)->size(), 1u);
  EXPECT_EQ(GrpcArgsVariantSet("session", 99).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<GrpcArgsVariant>> bad = GrpcArgsVariantSet("tcp");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--set: 'tcp'"), std::string::npos);
}

TEST(OnlyVariant, OneVariantAloneItsOwnBaseOrTheWholeSet) {
  const std::vector<GrpcArgsVariant> set = GrpcSessionVariants();
  ASSERT_GT(set.size(), 5u);
  ASSERT_NE(set[5].base, 0u);
  absl::StatusOr<std::vector<GrpcArgsVariant>> one = OnlyVariant(set, 5);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].name, set[5].name);
  EXPECT_EQ((*one)[0].stream.session, set[5].stream.session);
  EXPECT_EQ((*one)[0].base, 0u);
  EXPECT_EQ(OnlyVariant(set, -1)->size(), set.size());
  for (int bad : {-2, static_cast<int>(set.size())}) {
    absl::StatusOr<std::vector<GrpcArgsVariant>> s = OnlyVariant(set, bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("--only"), std::string::npos);
  }
}

TEST(ParseSizesMb, PositiveWholeMbOnlyAndTheErrorNamesTheItem) {
  EXPECT_EQ(*ParseSizesMb("4,16,64"), (std::vector<int>{4, 16, 64}));
  EXPECT_EQ(*ParseSizesMb("1"), (std::vector<int>{1}));
  for (const char* bad : {"", "4,,16", "0", "-4", "4.5", "4,x"}) {
    absl::StatusOr<std::vector<int>> s = ParseSizesMb(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("--sizes_mb"), std::string::npos);
  }
}

// Every variant's server side survives the trip to a server process and
// back; a bad spec is refused, naming the flag.
TEST(ServerSpec, EveryVariantsServerSideReadsBackAndBadSpecsAreRefused) {
  std::vector<GrpcArgsVariant> all = GrpcArgsVariants();
  for (auto* set :
       {&GrpcTransportVariants, &GrpcServerApiVariants, &GrpcSessionVariants}) {
    for (GrpcArgsVariant& v : (*set)()) all.push_back(std::move(v));
  }
  for (const GrpcArgsVariant& v : all) {
    absl::StatusOr<GrpcStreamOptions> back =
        ParseServerSpec(ServerSpec(v.stream));
    ASSERT_TRUE(back.ok()) << v.name << ": " << back.status();
    EXPECT_EQ(back->server_api, v.stream.server_api) << v.name;
    EXPECT_EQ(back->server_args, v.stream.server_args) << v.name;
  }
  for (const char* bad :
       {"", "epoll", "sync;x", "sync;=1", "callback;a=b", "queue;grpc.x=1.5"}) {
    absl::StatusOr<GrpcStreamOptions> o = ParseServerSpec(bad);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(o.status().message().find("--serve"), std::string::npos);
  }
}

// A bare server in a process of its own keeps ps_server's arena but its freed
// heap mapped for reuse (it allocates per call what ps_server reuses), and
// turns tcp_read_chunks off exactly where its spec carries ps_server's read
// bound.
TEST(BareServerMemory, HeapKeptForReuseAndReadChunksOffOnlyWithTheReadBound) {
  int with_bound = 0;
  for (const GrpcArgsVariant& v : GrpcSessionVariants()) {
    const ProcessMemoryOptions m = BareServerMemory(v.stream);
    EXPECT_EQ(m.mmap_threshold_bytes,
              static_cast<int64_t>(kRingMmapThresholdBytes))
        << v.name;
    EXPECT_EQ(m.trim_threshold_bytes,
              static_cast<int64_t>(kRingTrimThresholdBytes))
        << v.name;
    EXPECT_EQ(m.malloc_arena_max, ProcessMemoryOptions().malloc_arena_max);
    bool bound = false;
    for (const auto& [key, value] : v.stream.server_args) {
      bound = bound || key == GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE;
    }
    with_bound += bound;
    EXPECT_EQ(m.grpc_tcp_read_chunks, !bound) << v.name;
  }
  EXPECT_GT(with_bound, 0);  // the set has ps_server's settings
}

// A served stream (Serve) answers a client that Start points at it, calls
// and sessions alike; the server-only stream has no client of its own.
TEST(GrpcStream, AServedStreamCarriesAnotherStreamsTransfers) {
  for (const GrpcArgsVariant& v : GrpcSessionVariants()) {
    absl::StatusOr<std::unique_ptr<GrpcStream>> server =
        GrpcStream::Serve(v.stream);
    ASSERT_TRUE(server.ok()) << v.name << ": " << server.status();
    ASSERT_GT((*server)->port(), 0);
    EXPECT_EQ((*server)->Upload(10).status().code(),
              absl::StatusCode::kFailedPrecondition);
    GrpcStreamOptions client = v.stream;
    client.message_bytes = 1000;
    client.server_address = absl::StrCat("127.0.0.1:", (*server)->port());
    absl::StatusOr<std::unique_ptr<GrpcStream>> s = GrpcStream::Start(client);
    ASSERT_TRUE(s.ok()) << v.name << ": " << s.status();
    for (uint64_t bytes : {uint64_t{0}, uint64_t{999}, uint64_t{12345}}) {
      EXPECT_TRUE((*s)->Upload(bytes).ok()) << v.name << " up " << bytes;
      EXPECT_TRUE((*s)->Download(bytes).ok()) << v.name << " down " << bytes;
    }
  }
}

// With a server binary every variant's server is a process of its own
// (grpc_args_bench --serve), and the table says so.
TEST(RunGrpcArgsBench, ServersInProcessesOfTheirOwn) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  ASSERT_NE(srcdir, nullptr);
  GrpcArgsBenchOptions o;
  o.rounds = 1;
  o.steps = 1;
  o.sizes_mb = {1};
  o.server_binary =
      std::string(srcdir) + "/pstrain/tools/bench/grpc_args_bench";
  for (bool download : {false, true}) {
    o.download = download;
    absl::StatusOr<std::string> table =
        RunGrpcArgsBench(o, GrpcSessionVariants());
    ASSERT_TRUE(table.ok()) << table.status();
    EXPECT_NE(table->find("servers in processes of their own"),
              std::string::npos)
        << *table;
  }
  o.server_binary = "/bin/true";  // prints no port
  EXPECT_EQ(RunGrpcArgsBench(o, GrpcSessionVariants()).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(RunGrpcArgsBench, BadOptionsAreRefusedBeforeAnythingStarts) {
  GrpcArgsBenchOptions o;
  o.rounds = 0;
  EXPECT_EQ(RunGrpcArgsBench(o, GrpcArgsVariants()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunGrpcArgsBench(GrpcArgsBenchOptions{}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<GrpcArgsVariant> later_base = GrpcSessionVariants();
  later_base[1].base = 2;
  EXPECT_EQ(
      RunGrpcArgsBench(GrpcArgsBenchOptions{}, later_base).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain::bench
