// ps_path_bench: ps_bench's push, pull and server-memory rows alone, for
// work on the parameter server's data path (README "Performance"). In each
// of R interleaved rounds: /proc/loadavg, iperf3 -l 1M on loopback, a bare
// gRPC stream of the same bytes (upload and download), then pstrain push and
// pull for every size x servers x workers (tools/bench/ps_path.h). After the
// rounds, the shipped shard server's peak RSS for N workers (a child
// process, as ps_bench measures it). Prints every per-round value and the
// median ratios; no goal is asserted.
//
//   ps_path_bench [--rounds 3] [--mb 16,64] [--ps_servers 1,2]
//                 [--ps_workers 1,4]
//                 [--memory_params 16777216] [--memory_workers 1,4,16]
//                 [--all_variants] [--iperf3 iperf3] [--compare_early_apply]
//
// --compare_early_apply: every push/pull row also with ShardOptions
// .early_apply off (rows tagged "_atcommit": the whole step applied at its
// commit), in the same round right after (before, in odd rounds) the
// shipped setting, and the ratio of the two per round.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "tools/bench/ps_path.h"
#include "tools/bench/stats.h"
#include "tools/bench/wire.h"

ABSL_FLAG(int, rounds, 3, "interleaved rounds");
ABSL_FLAG(std::vector<std::string>, mb, std::vector<std::string>({"16", "64"}),
          "tensor sizes in decimal MB");
ABSL_FLAG(std::vector<std::string>, ps_servers,
          std::vector<std::string>({"1", "2"}), "shard counts");
ABSL_FLAG(std::vector<std::string>, ps_workers,
          std::vector<std::string>({"1", "4"}), "worker counts");
ABSL_FLAG(uint64_t, memory_params, 16 << 20,
          "parameters of the memory run (0: skip it)");
ABSL_FLAG(std::vector<std::string>, memory_workers,
          std::vector<std::string>({"1", "4", "16"}),
          "worker counts of the memory run");
ABSL_FLAG(bool, all_variants, false,
          "memory run: every server variant (ps_path.h), interleaved per N");
ABSL_FLAG(std::string, iperf3, "iperf3", "iperf3 binary");
ABSL_FLAG(bool, compare_early_apply, false,
          "also measure every push/pull row with ShardOptions.early_apply "
          "off, side by side");
ABSL_FLAG(bool, serve_shard, false, "internal: serve one shard (child role)");
ABSL_FLAG(uint64_t, elems, 0, "internal: --serve_shard tensor elements");
ABSL_FLAG(int, workers, 1, "internal: --serve_shard workers");
ABSL_FLAG(bool, bdp_probe, false, "internal: --serve_shard HTTP/2 BDP probe");
ABSL_FLAG(int64_t, mmap_threshold, 0, "internal: --serve_shard mmap threshold");
ABSL_FLAG(int, max_concurrent_pushes, -1,
          "internal: --serve_shard push streams summed at once (-1: default)");
ABSL_FLAG(int, malloc_arena_max, 0,
          "internal: --serve_shard glibc M_ARENA_MAX (0: default)");
ABSL_FLAG(bool, grpc_tcp_read_chunks, true,
          "internal: --serve_shard gRPC tcp_read_chunks experiment");

namespace pstrain::bench {
namespace {

std::vector<int> Ints(const std::vector<std::string>& v) {
  std::vector<int> out;
  for (const std::string& s : v) out.push_back(std::stoi(s));
  return out;
}

int Main(const std::string& self) {
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const std::vector<int> mbs = Ints(absl::GetFlag(FLAGS_mb));
  const std::vector<int> servers = Ints(absl::GetFlag(FLAGS_ps_servers));
  const std::vector<int> workers = Ints(absl::GetFlag(FLAGS_ps_workers));
  absl::StatusOr<std::unique_ptr<Iperf3>> iperf =
      Iperf3::Start(absl::GetFlag(FLAGS_iperf3));
  if (!iperf.ok()) {
    std::printf("iperf3 unavailable: %s\n", iperf.status().ToString().c_str());
  }
  absl::StatusOr<std::unique_ptr<GrpcStream>> stream = GrpcStream::Start();
  if (!stream.ok()) {
    std::printf("gRPC stream: %s\n", stream.status().ToString().c_str());
    return 1;
  }
  // name -> per-round GB/s
  std::map<std::string, std::vector<double>> v;
  auto set = [&](const std::string& name, int round, double gbps) {
    auto& s = v[name];
    s.resize(rounds, __builtin_nan(""));
    s[round] = gbps;
  };
  for (int round = 0; round < rounds; ++round) {
    std::printf("round %d: loadavg %s\n", round, LoadAverage().c_str());
    std::fflush(stdout);
    if (iperf.ok()) {
      absl::StatusOr<double> bps = (*iperf)->Measure(2);
      if (bps.ok()) set("iperf3", round, *bps / 1e9);
    }
    for (int mb : mbs) {
      const uint64_t bytes = uint64_t{1000000} * mb;
      absl::StatusOr<double> up = (*stream)->Upload(bytes);
      absl::StatusOr<double> down = (*stream)->Download(bytes);
      if (up.ok())
        set(absl::StrCat("grpc_upload_", mb, "MB"), round, *up / 1e9);
      if (down.ok()) {
        set(absl::StrCat("grpc_download_", mb, "MB"), round, *down / 1e9);
      }
      for (int s : servers) {
        for (int w : workers) {
          std::vector<bool> settings = {true};
          if (absl::GetFlag(FLAGS_compare_early_apply)) {
            settings = round % 2 == 0 ? std::vector<bool>{true, false}
                                      : std::vector<bool>{false, true};
          }
          for (bool early : settings) {
            absl::StatusOr<PsPathResult> ps = MeasurePsPath(
                bytes / sizeof(float), s, w, 2, pstrain::v1::DTYPE_F32, early);
            if (!ps.ok()) {
              std::printf("push/pull %dMB %ds %dw: %s\n", mb, s, w,
                          ps.status().ToString().c_str());
              continue;
            }
            const std::string tag = absl::StrCat(mb, "MB_", s, "s_", w, "w",
                                                 early ? "" : "_atcommit");
            set("push_" + tag, round, ps->push_bytes_per_s / 1e9);
            set("pull_" + tag, round, ps->pull_bytes_per_s / 1e9);
          }
        }
      }
    }
  }
  for (const auto& [name, values] : v) {
    std::printf("%-24s median %6.3f GB/s  rounds:", name.c_str(),
                Median(values));
    for (double x : values) std::printf(" %.3f", x);
    std::printf("\n");
  }
  // Ratios within each round, medians over rounds.
  for (const auto& [name, values] : v) {
    const bool push = name.rfind("push_", 0) == 0;
    if (!push && name.rfind("pull_", 0) != 0) continue;
    const std::string mb = name.substr(5, name.find("MB") - 5 + 2);
    const std::string bare =
        absl::StrCat(push ? "grpc_upload_" : "grpc_download_", mb);
    std::vector<double> to_iperf, to_bare;
    for (int r = 0; r < rounds; ++r) {
      if (v.count("iperf3")) to_iperf.push_back(values[r] / v["iperf3"][r]);
      to_bare.push_back(values[r] / v[bare][r]);
    }
    std::printf("%-24s / iperf3 %.2f   / bare gRPC stream %.2f\n", name.c_str(),
                Median(to_iperf), Median(to_bare));
  }
  // Early apply on / off, within each round.
  for (const auto& [name, values] : v) {
    const auto at_commit = v.find(name + "_atcommit");
    if (at_commit == v.end()) continue;
    std::vector<double> ratio;
    for (int r = 0; r < rounds; ++r) {
      ratio.push_back(values[r] / at_commit->second[r]);
    }
    std::printf("%-24s early apply / at commit %.2f  rounds:", name.c_str(),
                Median(ratio));
    for (double x : ratio) std::printf(" %.2f", x);
    std::printf("\n");
  }
  const uint64_t params = absl::GetFlag(FLAGS_memory_params);
  if (params > 0) {
    std::vector<ServerVariant> variants = ServerVariants();
    if (!absl::GetFlag(FLAGS_all_variants)) variants.resize(1);
    for (int n : Ints(absl::GetFlag(FLAGS_memory_workers))) {
      for (const ServerVariant& variant : variants) {
        absl::StatusOr<ServerMemory> m =
            MeasureServerMemory(self, params, n, 3, variant);
        if (!m.ok()) {
          std::printf("memory N=%d: %s\n", n, m.status().ToString().c_str());
          continue;
        }
        std::printf(
            "server peak RSS [%s], %llu params, N=%d: %lld MiB / bound %lld "
            "MiB "
            "= %.2f (push %.3f GB/s, pull %.3f GB/s)\n",
            variant.name.c_str(), static_cast<unsigned long long>(params), n,
            static_cast<long long>(m->peak_rss_bytes >> 20),
            static_cast<long long>(m->bound_bytes >> 20),
            static_cast<double>(m->peak_rss_bytes) / m->bound_bytes,
            m->push_bytes_per_s / 1e9, m->pull_bytes_per_s / 1e9);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_serve_shard)) {
    pstrain::bench::ServerVariant variant;
    variant.bdp_probe = absl::GetFlag(FLAGS_bdp_probe);
    variant.mmap_threshold = absl::GetFlag(FLAGS_mmap_threshold);
    variant.max_concurrent_pushes = absl::GetFlag(FLAGS_max_concurrent_pushes);
    variant.malloc_arena_max = absl::GetFlag(FLAGS_malloc_arena_max);
    variant.grpc_tcp_read_chunks = absl::GetFlag(FLAGS_grpc_tcp_read_chunks);
    return pstrain::bench::ServeShardMain(
        absl::GetFlag(FLAGS_elems), absl::GetFlag(FLAGS_workers), variant);
  }
  return pstrain::bench::Main(argv[0]);
}
