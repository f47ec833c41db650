// ps_path_bench's rounds with fake measurements: what each round measures
// and in which order (the early-apply settings alternating), failures left
// as NaN, and the report's medians and within-round ratios.
#include "tools/bench/ps_path_rounds.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain::bench {
namespace {

constexpr double kNaN = __builtin_nan("");

// Measures that record each call in `calls`: iperf3 10 + round GB/s, uploads
// 2 GB/s, downloads 4 GB/s (failing in round 1), pushes round + 1 GB/s and
// pulls twice that, each halved at commit.
struct Fakes {
  std::vector<std::string> calls;
  int round = -1;
  bool fail_push_pull = false;

  PsPathMeasures Measures() {
    PsPathMeasures m;
    m.iperf3 = [this]() -> absl::StatusOr<double> {
      ++round;  // iperf3 opens every round
      calls.push_back("iperf3");
      return 10e9 + round * 1e9;
    };
    m.upload = [this](uint64_t bytes) -> absl::StatusOr<double> {
      calls.push_back(absl::StrCat("up", bytes / 1000000));
      return 2e9;
    };
    m.download = [this](uint64_t bytes) -> absl::StatusOr<double> {
      calls.push_back(absl::StrCat("down", bytes / 1000000));
      if (round == 1) return absl::UnavailableError("stream broke");
      return 4e9;
    };
    m.push_pull =
        [this](uint64_t bytes, int s, int w,
               const ShardSetting& setting) -> absl::StatusOr<PsPathResult> {
      std::string tag = setting.suffix;
      if (!tag.empty()) tag[0] = '/';
      calls.push_back(absl::StrCat("ps", bytes / 1000000, "/", s, "/", w, tag));
      if (fail_push_pull) return absl::InternalError("shard down");
      PsPathResult r;
      r.push_bytes_per_s = (setting.early_apply ? 1e9 : 0.5e9) *
                           (setting.hold_first_term ? 1 : 0.25) *
                           (setting.apply_terms_on_arrival ? 1 : 0.8) *
                           (setting.push_streams == 2 ? 0.5 : 1) *
                           (setting.apply_in_blocks ? 1 : 0.9) *
                           (setting.apply_held_in_one_pass ? 1 : 0.8) *
                           (setting.reuse_op_threads ? 1 : 0.5) * (round + 1);
      r.pull_bytes_per_s = 2 * r.push_bytes_per_s;
      return r;
    };
    return m;
  }
};

// `rounds` rounds of one size (1 MB), one server and one worker.
PsPathRoundsOptions OneRow(int rounds) {
  PsPathRoundsOptions o;
  o.rounds = rounds;
  o.mb = {1};
  o.servers = {1};
  o.workers = {1};
  return o;
}

TEST(RunPsPathRounds, MeasuresEverySizeServersAndWorkersInEveryRound) {
  PsPathRoundsOptions o;
  o.rounds = 2;
  o.mb = {1, 8};
  o.servers = {2};
  o.workers = {1, 3};
  Fakes f;
  const PsPathRounds rounds = RunPsPathRounds(o, f.Measures());
  const std::vector<std::string> one_round = {"iperf3",  "up1",     "down1",
                                              "ps1/2/1", "ps1/2/3", "up8",
                                              "down8",   "ps8/2/1", "ps8/2/3"};
  std::vector<std::string> want = one_round;
  want.insert(want.end(), one_round.begin(), one_round.end());
  EXPECT_EQ(f.calls, want);
  // GB/s per round; round 1's failed downloads stay NaN.
  EXPECT_EQ(rounds.at("iperf3"), (std::vector<double>{10, 11}));
  EXPECT_EQ(rounds.at("grpc_upload_8MB"), (std::vector<double>{2, 2}));
  const std::vector<double>& down = rounds.at("grpc_download_1MB");
  ASSERT_EQ(down.size(), 2u);
  EXPECT_EQ(down[0], 4);
  EXPECT_TRUE(std::isnan(down[1]));
  EXPECT_EQ(rounds.at("push_8MB_2s_3w"), (std::vector<double>{1, 2}));
  EXPECT_EQ(rounds.at("pull_1MB_2s_1w"), (std::vector<double>{2, 4}));
  EXPECT_EQ(rounds.size(), 1u + 2 * 2 + 2 * 2 * 2);
}

TEST(RunPsPathRounds, EarlyApplyOnAndOffAlternateWhichGoesFirst) {
  PsPathRoundsOptions o = OneRow(2);
  o.compare_early_apply = true;
  Fakes f;
  const PsPathRounds rounds = RunPsPathRounds(o, f.Measures());
  EXPECT_EQ(f.calls,
            (std::vector<std::string>{"iperf3", "up1", "down1", "ps1/1/1",
                                      "ps1/1/1/atcommit", "iperf3", "up1",
                                      "down1", "ps1/1/1/atcommit", "ps1/1/1"}));
  EXPECT_EQ(rounds.at("push_1MB_1s_1w"), (std::vector<double>{1, 2}));
  EXPECT_EQ(rounds.at("push_1MB_1s_1w_atcommit"),
            (std::vector<double>{0.5, 1}));
}

TEST(RunPsPathRounds, EveryComparedSettingBesideTheShippedOneInTurn) {
  PsPathRoundsOptions o = OneRow(2);
  o.compare_early_apply = true;
  o.compare_hold_first_term = true;
  o.compare_apply_terms = true;
  o.compare_push_streams = true;
  o.compare_apply_block = true;
  Fakes f;
  const PsPathRounds rounds = RunPsPathRounds(o, f.Measures());
  EXPECT_EQ(f.calls,
            (std::vector<std::string>{
                "iperf3", "up1", "down1", "ps1/1/1", "ps1/1/1/atcommit",
                "ps1/1/1/noheld", "ps1/1/1/applier", "ps1/1/1/split",
                "ps1/1/1/wholechunk", "iperf3", "up1", "down1",
                "ps1/1/1/wholechunk", "ps1/1/1/split", "ps1/1/1/applier",
                "ps1/1/1/noheld", "ps1/1/1/atcommit", "ps1/1/1"}));
  EXPECT_EQ(rounds.at("push_1MB_1s_1w_noheld"),
            (std::vector<double>{0.25, 0.5}));
  const std::string report = PsPathReport(rounds);
  EXPECT_NE(report.find("held term / not held 4.00  rounds: 4.00 4.00\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("term applied on arrival / by the applier 1.25  "
                        "rounds: 1.25 1.25\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("one push stream / split over two 2.00  "
                        "rounds: 2.00 2.00\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("optimizer in blocks / whole chunks 1.11  "
                        "rounds: 1.11 1.11\n"),
            std::string::npos)
      << report;
}

TEST(ShardSettings, TheLinkSettingsAreComparedWithTheirTags) {
  PsPathRoundsOptions o = OneRow(1);
  o.compare_lookahead = 1 << 20;
  o.compare_worker_bdp = true;
  const std::vector<ShardSetting> s = ShardSettings(o);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].server_lookahead, 0);
  EXPECT_TRUE(s[0].worker_bdp_probe);
  EXPECT_EQ(s[1].suffix, "_lookahead");
  EXPECT_EQ(s[1].server_lookahead, 1 << 20);
  EXPECT_TRUE(s[1].worker_bdp_probe);
  EXPECT_EQ(s[2].suffix, "_wbdpoff");
  EXPECT_EQ(s[2].server_lookahead, 0);
  EXPECT_FALSE(s[2].worker_bdp_probe);
}

TEST(ShardSettings, PushMessagesAreComparedAndChunksApplyToEveryRow) {
  PsPathRoundsOptions o = OneRow(1);
  o.compare_push_message_kib = 4096;
  o.chunk_kib = 1024;
  const std::vector<ShardSetting> s = ShardSettings(o);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].push_message_bytes, 0u);
  EXPECT_EQ(s[1].suffix, "_pushmsg");
  EXPECT_EQ(s[1].push_message_bytes, 4u << 20);
  for (const ShardSetting& each : s) EXPECT_EQ(each.chunk_bytes, 1u << 20);
}

TEST(ShardSettings, PullMessagesAreCompared) {
  PsPathRoundsOptions o = OneRow(1);
  o.compare_pull_message_kib = 4096;
  const std::vector<ShardSetting> s = ShardSettings(o);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].pull_message_bytes, 0u);
  EXPECT_EQ(s[1].suffix, "_pullmsg");
  EXPECT_EQ(s[1].pull_message_bytes, 4u << 20);
  EXPECT_EQ(s[1].push_message_bytes, 0u);
}

TEST(ShardSettings, OtherChunksAreComparedInTheirOwnRowOnly) {
  PsPathRoundsOptions o = OneRow(1);
  o.compare_chunk_kib = 4096;
  o.compare_push_streams = true;
  const std::vector<ShardSetting> s = ShardSettings(o);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].chunk_bytes, 0u);  // a real job's automatic size
  EXPECT_EQ(s[1].chunk_bytes, 0u);
  EXPECT_EQ(s[2].suffix, "_chunks");
  EXPECT_EQ(s[2].chunk_bytes, 4u << 20);
}

TEST(ShardSettings, TheOtherParseIsComparedWithItsTag) {
  PsPathRoundsOptions o = OneRow(1);
  o.compare_parse = true;
  const std::vector<ShardSetting> s = ShardSettings(o);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].parse_in_place, kParsePushesInPlace);
  EXPECT_EQ(s[1].suffix, kParsePushesInPlace ? "_parsecopy" : "_inplace");
  EXPECT_EQ(s[1].parse_in_place, !kParsePushesInPlace);
}

TEST(ShardSettings, TheOnePassTermAndReusedThreadsAreComparedWithTheirTags) {
  PsPathRoundsOptions o = OneRow(1);
  o.compare_held_one_pass = true;
  o.compare_op_threads = true;
  const std::vector<ShardSetting> s = ShardSettings(o);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_TRUE(s[0].apply_held_in_one_pass);
  EXPECT_TRUE(s[0].reuse_op_threads);
  EXPECT_EQ(s[1].suffix, "_twopass");
  EXPECT_FALSE(s[1].apply_held_in_one_pass);
  EXPECT_TRUE(s[1].reuse_op_threads);
  EXPECT_EQ(s[2].suffix, "_ownthreads");
  EXPECT_TRUE(s[2].apply_held_in_one_pass);
  EXPECT_FALSE(s[2].reuse_op_threads);
}

TEST(ShardSettings, ShardsApartByDefaultAndInProcessWhenAsked) {
  PsPathRoundsOptions o = OneRow(1);
  o.compare_in_process = true;
  o.compare_parse = true;
  std::vector<ShardSetting> s = ShardSettings(o);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_FALSE(s[0].in_process);
  EXPECT_FALSE(s[1].in_process);  // the other parse, apart as well
  EXPECT_EQ(s[2].suffix, "_inproc");
  EXPECT_TRUE(s[2].in_process);
  // Every row in this process: no "_inproc" twin, the compared ones too.
  o.servers_in_process = true;
  s = ShardSettings(o);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(s[0].in_process);
  EXPECT_TRUE(s[1].in_process);
}

TEST(RunPsPathRounds, TheOnePassTermAndReusedThreadsPrintTheirRatios) {
  PsPathRoundsOptions o = OneRow(2);
  o.compare_held_one_pass = true;
  o.compare_op_threads = true;
  Fakes f;
  const std::string report = PsPathReport(RunPsPathRounds(o, f.Measures()));
  EXPECT_NE(report.find("push_1MB_1s_1w           one-worker term in one "
                        "pass / two passes 1.25  rounds: 1.25 1.25\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("pull_1MB_1s_1w           shard tasks on reused "
                        "threads / threads of their own 2.00  rounds: 2.00 "
                        "2.00\n"),
            std::string::npos)
      << report;
}

TEST(RunPsPathRounds, WithoutIperf3AndWithFailedPushesThereAreNoSuchRows) {
  const PsPathRoundsOptions o = OneRow(1);
  Fakes f;
  f.fail_push_pull = true;
  PsPathMeasures m = f.Measures();
  m.iperf3 = nullptr;
  const PsPathRounds rounds = RunPsPathRounds(o, m);
  EXPECT_EQ(rounds.count("iperf3"), 0u);
  EXPECT_EQ(rounds.count("push_1MB_1s_1w"), 0u);
  EXPECT_EQ(rounds.count("grpc_upload_1MB"), 1u);
}

// The bare stream's busy share comes from cpu_times read around it, the
// push's and pull's from PsPathResult; rows not measured have none.
TEST(RunPsPathRounds, CpuBusyRowsBesideTheMeasuredOnes) {
  const PsPathRoundsOptions o = OneRow(2);
  Fakes f;
  PsPathMeasures m = f.Measures();
  PsPathMeasures::PushPull fake_push_pull = m.push_pull;
  m.push_pull =
      [&](uint64_t bytes, int s, int w,
          const ShardSetting& setting) -> absl::StatusOr<PsPathResult> {
    absl::StatusOr<PsPathResult> r = fake_push_pull(bytes, s, w, setting);
    if (r.ok()) {
      r->push_cpu_busy = 0.5 + 0.25 * f.round;
      r->pull_cpu_busy = 0.25;
      r->pull_faults_per_step = 300 * f.round;
      r->copies_per_step = 2 * f.round;
    }
    return r;
  };
  CpuTimes clock;  // each read: 10 ticks later, 9 of them busy
  m.cpu_times = [&clock] {
    clock.busy += 9;
    clock.total += 10;
    return clock;
  };
  const PsPathRounds rounds = RunPsPathRounds(o, m);
  EXPECT_EQ(rounds.at("cpu_grpc_upload_1MB"), (std::vector<double>{0.9, 0.9}));
  // Round 1's download failed: no share for it.
  const std::vector<double>& down = rounds.at("cpu_grpc_download_1MB");
  ASSERT_EQ(down.size(), 2u);
  EXPECT_EQ(down[0], 0.9);
  EXPECT_TRUE(std::isnan(down[1]));
  EXPECT_EQ(rounds.at("cpu_push_1MB_1s_1w"), (std::vector<double>{0.5, 0.75}));
  EXPECT_EQ(rounds.at("cpu_pull_1MB_1s_1w"), (std::vector<double>{0.25, 0.25}));
  EXPECT_EQ(rounds.count("cpu_iperf3"), 0u);
  // Page faults per warm step beside the pull; the push measured none.
  EXPECT_EQ(rounds.at("flt_pull_1MB_1s_1w"), (std::vector<double>{0, 300}));
  EXPECT_EQ(rounds.count("flt_push_1MB_1s_1w"), 0u);
  // Chunks copied on write per warm step, beside the push only; the report
  // ends its ratio line with them and gives them no line of their own.
  EXPECT_EQ(rounds.at("cow_push_1MB_1s_1w"), (std::vector<double>{0, 2}));
  EXPECT_EQ(rounds.count("cow_pull_1MB_1s_1w"), 0u);
  const std::string report = PsPathReport(rounds);
  EXPECT_NE(report.find("chunks copied/step 1.0\n"), std::string::npos)
      << report;
  EXPECT_EQ(report.find("cow_"), std::string::npos) << report;
}

TEST(ShardSettings, PullStreamsAreComparedWithTheirTag) {
  PsPathRoundsOptions o = OneRow(1);
  o.compare_pull_streams = 2;
  const std::vector<ShardSetting> s = ShardSettings(o);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].pull_streams, 0);  // the job's
  EXPECT_EQ(s[1].suffix, "_pullstreams");
  EXPECT_EQ(s[1].pull_streams, 2);
}

// The CPUs' busy shares and the page faults per step end the ratio lines
// and get no lines of their own.
TEST(PsPathReport, CpuBusySharesEndTheRatioLinesOnly) {
  const PsPathRounds rounds = {
      {"grpc_upload_16MB", {2, 2}},
      {"cpu_grpc_upload_16MB", {0.9, 1.0}},
      {"push_16MB_1s_1w", {1, 1}},
      {"cpu_push_16MB_1s_1w", {0.96, 1.0}},
      {"push_16MB_1s_1w_noheld", {0.5, 0.5}},
      {"cpu_push_16MB_1s_1w_noheld", {0.5, 0.5}},
      {"flt_push_16MB_1s_1w", {10, 30}},
      {"flt_push_16MB_1s_1w_noheld", {0, 0}},
  };
  EXPECT_EQ(PsPathReport(rounds),
            "grpc_upload_16MB         median  2.000 GB/s  rounds: 2.000 2.000\n"
            "push_16MB_1s_1w          median  1.000 GB/s  rounds: 1.000 1.000\n"
            "push_16MB_1s_1w_noheld   median  0.500 GB/s  rounds: 0.500 0.500\n"
            "push_16MB_1s_1w          / iperf3 nan   / bare gRPC stream in one "
            "process 0.50"
            "   CPUs busy 0.98 (bare stream 0.95)   faults/step 20\n"
            "push_16MB_1s_1w_noheld   / iperf3 nan   / bare gRPC stream in one "
            "process 0.25"
            "   CPUs busy 0.50 (bare stream 0.95)   faults/step 0\n"
            "push_16MB_1s_1w          held term / not held 2.00  rounds: 2.00 "
            "2.00\n");
}

TEST(PsPathReport, MediansThenRatiosWithinEachRoundThenEarlyApply) {
  const PsPathRounds rounds = {
      {"iperf3", {10, 20, 40}},
      {"grpc_upload_16MB", {2, 4, kNaN}},
      {"push_16MB_1s_1w", {1, 1, 1}},
      {"push_16MB_1s_1w_atcommit", {0.5, 0.25, 1}},
  };
  EXPECT_EQ(PsPathReport(rounds),
            "grpc_upload_16MB         median  3.000 GB/s  rounds: 2.000 4.000 "
            "nan\n"
            "iperf3                   median 20.000 GB/s  rounds: 10.000 "
            "20.000 40.000\n"
            "push_16MB_1s_1w          median  1.000 GB/s  rounds: 1.000 1.000 "
            "1.000\n"
            "push_16MB_1s_1w_atcommit median  0.500 GB/s  rounds: 0.500 0.250 "
            "1.000\n"
            // push / iperf3: 0.1, 0.05, 0.025; push / upload: 0.5, 0.25, NaN;
            // at commit / upload: 0.25, 0.0625, NaN.
            "push_16MB_1s_1w          / iperf3 0.05   / bare gRPC stream in "
            "one process "
            "0.38\n"
            "push_16MB_1s_1w_atcommit / iperf3 0.03   / bare gRPC stream in "
            "one process "
            "0.16\n"
            "push_16MB_1s_1w          early apply / at commit 2.00  rounds: "
            "2.00 4.00 1.00\n");
}

TEST(PsPathReport, APushWithoutItsBareStreamRowHasNoRatioToIt) {
  const PsPathRounds rounds = {{"pull_64MB_2s_4w", {3, 5}}};
  EXPECT_EQ(PsPathReport(rounds),
            "pull_64MB_2s_4w          median  4.000 GB/s  rounds: 3.000 "
            "5.000\n"
            "pull_64MB_2s_4w          / iperf3 nan   / bare gRPC stream in one "
            "process nan\n");
}

TEST(ServerMemoryLine, PeakAgainstBoundAndThroughput) {
  ServerVariant v;
  v.name = "shipped";
  ServerMemory m;
  m.peak_rss_bytes = int64_t{300} << 20;
  m.bound_bytes = int64_t{200} << 20;
  m.push_bytes_per_s = 1.5e9;
  m.pull_bytes_per_s = 2.25e9;
  EXPECT_EQ(ServerMemoryLine(v, 16777216, 4, m),
            "server peak RSS [shipped], 16777216 params, N=4: 300 MiB / bound "
            "200 MiB = 1.50 (push 1.500 GB/s, pull 2.250 GB/s)\n");
}

}  // namespace
}  // namespace pstrain::bench
