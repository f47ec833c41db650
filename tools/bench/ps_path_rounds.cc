#include "tools/bench/ps_path_rounds.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tcp_congestion.h"
#include "tools/bench/stats.h"

namespace pstrain::bench {
namespace {

constexpr double kNaN = __builtin_nan("");

// The row `name` of `rounds`, NaN in every round when it is missing.
std::vector<double> Row(const PsPathRounds& rounds, const std::string& name,
                        size_t n) {
  auto it = rounds.find(name);
  return it == rounds.end() ? std::vector<double>(n, kNaN) : it->second;
}

// A figure kept beside a measured row (RunPsPathRounds' set_beside), not a
// row of its own.
bool BesideARow(const std::string& name) {
  return absl::StartsWith(name, "cpu_") || absl::StartsWith(name, "flt_") ||
         absl::StartsWith(name, "cow_");
}

}  // namespace

PsPathMeasures RealPsPathMeasures(Iperf3* iperf3, GrpcStream* stream,
                                  const std::string& server_binary) {
  PsPathMeasures m;
  if (iperf3 != nullptr) m.iperf3 = [iperf3] { return iperf3->Measure(2); };
  // The bare stream's warm median, as the push and pull figures are.
  auto warm = [](absl::StatusOr<SteadyRate> r) -> absl::StatusOr<double> {
    if (!r.ok()) return r.status();
    return r->warm_bytes_per_s;
  };
  m.upload = [stream, warm](uint64_t bytes) {
    return warm(stream->UploadSteady(bytes, kSteadySteps));
  };
  m.download = [stream, warm](uint64_t bytes) {
    return warm(stream->DownloadSteady(bytes, kSteadySteps));
  };
  m.cpu_times = ReadCpuTimes;
  m.push_pull = [server_binary](uint64_t bytes, int servers, int workers,
                                const ShardSetting& setting) {
    PsPathSetting s = setting;
    if (!setting.in_process) s.server_binary = server_binary;
    return MeasurePsPath(bytes / sizeof(float), servers, workers, kSteadySteps,
                         s);
  };
  return m;
}

std::vector<ShardSetting> ShardSettings(const PsPathRoundsOptions& options) {
  ShardSetting shipped;
  shipped.in_process = options.servers_in_process;
  std::vector<ShardSetting> settings = {shipped};
  // A setting of its own, tagged `suffix`, changed from the shipped one by
  // `change`.
  auto compare = [&](bool on, const char* suffix,
                     const std::function<void(ShardSetting*)>& change) {
    if (!on) return;
    ShardSetting s = shipped;
    s.suffix = suffix;
    change(&s);
    settings.push_back(std::move(s));
  };
  compare(options.compare_early_apply, "_atcommit",
          [](ShardSetting* s) { s->early_apply = false; });
  compare(options.compare_hold_first_term, "_noheld",
          [](ShardSetting* s) { s->hold_first_term = false; });
  compare(options.compare_apply_terms, "_applier",
          [](ShardSetting* s) { s->apply_terms_on_arrival = false; });
  compare(options.compare_push_streams, "_split",
          [](ShardSetting* s) { s->push_streams = 2; });
  compare(
      options.compare_pull_streams > 0, "_pullstreams",
      [&](ShardSetting* s) { s->pull_streams = options.compare_pull_streams; });
  compare(options.compare_apply_block, "_wholechunk",
          [](ShardSetting* s) { s->apply_in_blocks = false; });
  compare(options.compare_lookahead > 0, "_lookahead", [&](ShardSetting* s) {
    s->server_lookahead = options.compare_lookahead;
  });
  compare(options.compare_worker_bdp, "_wbdpoff",
          [](ShardSetting* s) { s->worker_bdp_probe = false; });
  compare(options.compare_push_message_kib > 0, "_pushmsg",
          [&](ShardSetting* s) {
            s->push_message_bytes =
                static_cast<uint64_t>(options.compare_push_message_kib) << 10;
          });
  compare(options.compare_pull_message_kib > 0, "_pullmsg",
          [&](ShardSetting* s) {
            s->pull_message_bytes =
                static_cast<uint64_t>(options.compare_pull_message_kib) << 10;
          });
  compare(options.compare_parse,
          kParsePushesInPlace ? "_parsecopy" : "_inplace",
          [](ShardSetting* s) { s->parse_in_place = !kParsePushesInPlace; });
  compare(options.compare_held_one_pass, "_twopass",
          [](ShardSetting* s) { s->apply_held_in_one_pass = false; });
  compare(options.compare_op_threads, "_ownthreads",
          [](ShardSetting* s) { s->reuse_op_threads = false; });
  compare(options.compare_in_process && !options.servers_in_process, "_inproc",
          [](ShardSetting* s) { s->in_process = true; });
  for (ShardSetting& s : settings) {
    s.chunk_bytes = static_cast<uint64_t>(options.chunk_kib) << 10;
  }
  // The one row with other chunks.
  compare(options.compare_chunk_kib > 0, "_chunks", [&](ShardSetting* s) {
    s->chunk_bytes = static_cast<uint64_t>(options.compare_chunk_kib) << 10;
  });
  return settings;
}

PsPathRounds RunPsPathRounds(const PsPathRoundsOptions& options,
                             const PsPathMeasures& measures) {
  PsPathRounds v;
  auto set = [&](const std::string& name, int round,
                 const absl::StatusOr<double>& bytes_per_s) {
    if (!bytes_per_s.ok()) return;
    std::vector<double>& s = v[name];
    s.resize(options.rounds, kNaN);
    s[round] = *bytes_per_s / 1e9;
  };
  // A figure beside row `name` under prefix + name ("cpu_": the CPUs'
  // busy share, "flt_": page faults per warm step, "cow_": chunks the
  // servers copied on write per warm step).
  auto set_beside = [&](const std::string& prefix, const std::string& name,
                        int round, double value) {
    if (value != value) return;  // not measured
    std::vector<double>& s = v[prefix + name];
    s.resize(options.rounds, kNaN);
    s[round] = value;
  };
  auto set_cpu = [&](const std::string& name, int round, double busy) {
    set_beside("cpu_", name, round, busy);
  };
  // Measures the bare stream's `name` row, with the CPUs' busy share.
  auto stream_row = [&](const std::string& name, int round,
                        const std::function<absl::StatusOr<double>()>& run) {
    const CpuTimes before =
        measures.cpu_times ? measures.cpu_times() : CpuTimes{};
    const absl::StatusOr<double> rate = run();
    set(name, round, rate);
    if (measures.cpu_times && rate.ok()) {
      set_cpu(name, round,
              BusyShare(AddCpuDelta({}, before, measures.cpu_times())));
    }
  };
  for (int round = 0; round < options.rounds; ++round) {
    std::printf("round %d: loadavg %s, TCP congestion control %s\n", round,
                LoadAverage().c_str(), TcpCongestionControlName().c_str());
    std::fflush(stdout);
    if (measures.iperf3) set("iperf3", round, measures.iperf3());
    for (int mb : options.mb) {
      const uint64_t bytes = uint64_t{1000000} * mb;
      stream_row(absl::StrCat("grpc_upload_", mb, "MB"), round,
                 [&] { return measures.upload(bytes); });
      stream_row(absl::StrCat("grpc_download_", mb, "MB"), round,
                 [&] { return measures.download(bytes); });
      std::vector<ShardSetting> settings = ShardSettings(options);
      if (round % 2 == 1) std::reverse(settings.begin(), settings.end());
      for (int s : options.servers) {
        for (int w : options.workers) {
          for (const ShardSetting& setting : settings) {
            absl::StatusOr<PsPathResult> ps =
                measures.push_pull(bytes, s, w, setting);
            if (!ps.ok()) {
              std::printf("push/pull %dMB %ds %dw: %s\n", mb, s, w,
                          ps.status().ToString().c_str());
              continue;
            }
            const std::string tag =
                absl::StrCat(mb, "MB_", s, "s_", w, "w", setting.suffix);
            set("push_" + tag, round, ps->push_bytes_per_s);
            set("pull_" + tag, round, ps->pull_bytes_per_s);
            set_cpu("push_" + tag, round, ps->push_cpu_busy);
            set_cpu("pull_" + tag, round, ps->pull_cpu_busy);
            set_beside("flt_", "push_" + tag, round, ps->push_faults_per_step);
            set_beside("flt_", "pull_" + tag, round, ps->pull_faults_per_step);
            set_beside("cow_", "push_" + tag, round, ps->copies_per_step);
          }
        }
      }
    }
  }
  return v;
}

std::string PsPathReport(const PsPathRounds& rounds) {
  std::string out;
  for (const auto& [name, values] : rounds) {
    if (BesideARow(name)) continue;
    absl::StrAppendFormat(&out, "%-24s median %6.3f GB/s  rounds:", name,
                          Median(values));
    for (double x : values) absl::StrAppendFormat(&out, " %.3f", x);
    out += "\n";
  }
  // Ratios within each round, medians over rounds.
  for (const auto& [name, values] : rounds) {
    const bool push = absl::StartsWith(name, "push_");
    if (!push && !absl::StartsWith(name, "pull_")) continue;
    const std::string mb = name.substr(5, name.find("MB") - 5 + 2);
    const std::string bare_name =
        absl::StrCat(push ? "grpc_upload_" : "grpc_download_", mb);
    const std::vector<double> bare = Row(rounds, bare_name, values.size());
    const auto iperf3 = rounds.find("iperf3");
    std::vector<double> to_iperf, to_bare;
    for (size_t r = 0; r < values.size(); ++r) {
      if (iperf3 != rounds.end()) {
        to_iperf.push_back(values[r] / iperf3->second[r]);
      }
      to_bare.push_back(values[r] / bare[r]);
    }
    absl::StrAppendFormat(
        &out, "%-24s / iperf3 %.2f   / bare gRPC stream in one process %.2f",
        name, Median(to_iperf), Median(to_bare));
    const auto cpu = rounds.find("cpu_" + name);
    if (cpu != rounds.end()) {
      absl::StrAppendFormat(&out, "   CPUs busy %.2f", Median(cpu->second));
      const auto bare_cpu = rounds.find("cpu_" + bare_name);
      if (bare_cpu != rounds.end()) {
        absl::StrAppendFormat(&out, " (bare stream %.2f)",
                              Median(bare_cpu->second));
      }
    }
    const auto faults = rounds.find("flt_" + name);
    if (faults != rounds.end()) {
      absl::StrAppendFormat(&out, "   faults/step %.0f",
                            Median(faults->second));
    }
    const auto copies = rounds.find("cow_" + name);
    if (copies != rounds.end()) {
      absl::StrAppendFormat(&out, "   chunks copied/step %.1f",
                            Median(copies->second));
    }
    out += "\n";
  }
  // The shipped setting over each compared one, within each round.
  constexpr std::pair<const char*, const char*> kCompared[] = {
      {"_atcommit", "early apply / at commit"},
      {"_noheld", "held term / not held"},
      {"_applier", "term applied on arrival / by the applier"},
      {"_split", "one push stream / split over two"},
      {"_wholechunk", "optimizer in blocks / whole chunks"},
      {"_pushmsg", "shipped push messages / --compare_push_message_kib"},
      {"_pullmsg", "shipped pull messages / --compare_pull_message_kib"},
      {"_chunks", "--chunk_kib chunks / --compare_chunk_kib"},
      {"_parsecopy", "parsed in place / into a PushRequest"},
      {"_inplace", "parsed into a PushRequest / in place"},
      {"_twopass", "one-worker term in one pass / two passes"},
      {"_ownthreads", "shard tasks on reused threads / threads of their own"},
      {"_inproc", "shards apart / in the bench's process"},
      {"_pullstreams", "shipped pull streams / --compare_pull_streams"}};
  for (const auto& [suffix, label] : kCompared) {
    for (const auto& [name, values] : rounds) {
      const auto other = rounds.find(name + suffix);
      if (other == rounds.end() || BesideARow(name)) continue;
      std::vector<double> ratio;
      for (size_t r = 0; r < values.size(); ++r) {
        ratio.push_back(values[r] / other->second[r]);
      }
      absl::StrAppendFormat(&out, "%-24s %s %.2f  rounds:", name, label,
                            Median(ratio));
      for (double x : ratio) absl::StrAppendFormat(&out, " %.2f", x);
      out += "\n";
    }
  }
  return out;
}

std::string ServerMemoryLine(const ServerVariant& variant, uint64_t params,
                             int workers, const ServerMemory& memory) {
  return absl::StrFormat(
      "server peak RSS [%s], %d params, N=%d: %d MiB / bound %d MiB = %.2f "
      "(push %.3f GB/s, pull %.3f GB/s)\n",
      variant.name, params, workers, memory.peak_rss_bytes >> 20,
      memory.bound_bytes >> 20,
      static_cast<double>(memory.peak_rss_bytes) / memory.bound_bytes,
      memory.push_bytes_per_s / 1e9, memory.pull_bytes_per_s / 1e9);
}

int RunPsPathBench(const PsPathBenchOptions& options) {
  absl::StatusOr<std::unique_ptr<Iperf3>> iperf = Iperf3::Start(options.iperf3);
  if (!iperf.ok()) {
    std::printf("iperf3 unavailable: %s\n", iperf.status().ToString().c_str());
  }
  absl::StatusOr<std::unique_ptr<GrpcStream>> stream = GrpcStream::Start();
  if (!stream.ok()) {
    std::printf("gRPC stream: %s\n", stream.status().ToString().c_str());
    return 1;
  }
  const PsPathRounds rounds = RunPsPathRounds(
      options.rounds, RealPsPathMeasures(iperf.ok() ? iperf->get() : nullptr,
                                         stream->get(), options.self_path));
  std::printf("%s", PsPathReport(rounds).c_str());
  if (options.memory_params == 0) return 0;
  std::vector<ServerVariant> variants = ServerVariants();
  if (!options.all_variants) variants.resize(1);
  for (int n : options.memory_workers) {
    for (const ServerVariant& variant : variants) {
      absl::StatusOr<ServerMemory> m = MeasureServerMemory(
          options.self_path, options.memory_params, n, 3, variant);
      if (!m.ok()) {
        std::printf("memory N=%d: %s\n", n, m.status().ToString().c_str());
        continue;
      }
      std::printf(
          "%s",
          ServerMemoryLine(variant, options.memory_params, n, *m).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace pstrain::bench
