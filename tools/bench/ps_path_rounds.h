// ps_path_bench's measuring loop and report (docs/performance.md): in each
// of R interleaved rounds, /proc/loadavg, iperf3 on loopback, a bare gRPC
// stream of every size (upload and download), then pstrain push and pull
// for every size x servers x workers (tools/bench/ps_path.h), GB/s kept per
// round; then every row's per-round values and median, and ratios taken
// within each round with their medians over rounds; then the server memory
// run. ps_path_bench_main.cc parses flags into PsPathBenchOptions and calls
// RunPsPathBench.
#ifndef PSTRAIN_TOOLS_BENCH_PS_PATH_ROUNDS_H_
#define PSTRAIN_TOOLS_BENCH_PS_PATH_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/bench/ps_path.h"
#include "tools/bench/stats.h"
#include "tools/bench/wire.h"

namespace pstrain::bench {

struct PsPathRoundsOptions {
  int rounds = 3;                     // interleaved rounds, >= 1
  std::vector<int> mb = {16, 64};     // tensor sizes in decimal MB
  std::vector<int> servers = {1, 2};  // shard counts
  std::vector<int> workers = {1, 4};  // worker counts
  // Every push/pull row also with ShardOptions.early_apply off (rows tagged
  // "_atcommit": the whole step applied at its commit) and/or with
  // ShardOptions.hold_first_term off (tagged "_noheld": a one-worker term
  // goes through the fixed-point sum), in the same round as the shipped
  // setting: shipped first in even rounds, last in odd ones.
  bool compare_early_apply = false;
  bool compare_hold_first_term = false;
  // And with ShardOptions.apply_terms_on_arrival off (tagged "_applier": a
  // one-worker term held for the shard's applier thread).
  bool compare_apply_terms = false;
  // And with every push split over two streams per shard (tagged "_split":
  // PsClientOptions.push_streams 2; the job's default is one stream).
  bool compare_push_streams = false;
  // And with every pull over this many streams at any size (tagged
  // "_pullstreams"; PsClientOptions.pull_streams; 0: not compared).
  int compare_pull_streams = 0;
  // And with the optimizer over whole chunks (tagged "_wholechunk":
  // ShardOptions.apply_block 0, where the shipped shard goes in blocks).
  bool compare_apply_block = false;
  // And with the servers' HTTP/2 stream lookahead at this many bytes
  // (tagged "_lookahead"; 0: not compared).
  int compare_lookahead = 0;
  // And with the workers' channels without the HTTP/2 BDP probe (tagged
  // "_wbdpoff").
  bool compare_worker_bdp = false;
  // And with the workers' push messages at this many KiB (tagged "_pushmsg";
  // PsClientOptions.push_message_bytes; 0: not compared).
  int compare_push_message_kib = 0;
  // And with the servers' pull messages at this many KiB (tagged
  // "_pullmsg"; PsServiceOptions::pull_message_bytes; 0: not compared).
  int compare_pull_message_kib = 0;
  // And with the servers parsing push messages the other way than shipped
  // (PsServiceOptions::parse_pushes_in_place: tagged "_inplace" when the
  // shipped parse is into a PushRequest, "_parsecopy" otherwise).
  bool compare_parse = false;
  // And with a one-worker term applied in two passes, converted to a float
  // gradient and then applied (tagged "_twopass":
  // ShardOptions.apply_held_in_one_pass off).
  bool compare_held_one_pass = false;
  // And with each operation's shard tasks on threads started for it (tagged
  // "_ownthreads": PsClientOptions.reuse_op_threads off).
  bool compare_op_threads = false;
  // The shards of every row in the bench's process (else each in a process
  // of its own, as ps_server runs apart from its workers), and a row
  // "_inproc" beside each with them in the bench's process.
  bool servers_in_process = false;
  bool compare_in_process = false;
  // And with the shard map's chunks at this many KiB (tagged "_chunks";
  // 0: not compared).
  int compare_chunk_kib = 0;
  // The shard map's chunks for every row, in KiB (0: a real job's,
  // AutoChunkElems: about eight per shard, at most 1 MiB).
  int chunk_kib = 0;
};

// A setting push/pull rows are measured under, and the suffix of their
// names: "" (shipped), "_atcommit", ...
struct ShardSetting : PsPathSetting {
  std::string suffix;
  // The shards in the bench's process (else each in a process of its own
  // where the measures know the binary: RealPsPathMeasures).
  bool in_process = false;
};

// The shipped setting, then each one the options compare it with.
std::vector<ShardSetting> ShardSettings(const PsPathRoundsOptions& options);

// What a round measures, in bytes per second (fakes in tests).
struct PsPathMeasures {
  std::function<absl::StatusOr<double>()> iperf3;  // empty: not measured
  std::function<absl::StatusOr<double>(uint64_t bytes)> upload;
  std::function<absl::StatusOr<double>(uint64_t bytes)> download;
  using PushPull = std::function<absl::StatusOr<PsPathResult>(
      uint64_t bytes, int servers, int workers, const ShardSetting& setting)>;
  PushPull push_pull;
  // Read before and after each upload and download, for the share of the
  // CPUs busy meanwhile (empty: not measured).
  std::function<CpuTimes()> cpu_times;
};

// Iperf3::Measure(2) (none when `iperf3` is null), the stream's warm
// UploadSteady and DownloadSteady, and MeasurePsPath of bytes / 4 fp32
// elements, each over kSteadySteps warm steps on one connection (cluster),
// its shards in processes of their own (`server_binary`, this benchmark's
// binary, as PsPathSetting::server_binary) unless the setting says
// in_process or `server_binary` is empty. The pointers must outlive the
// measures.
PsPathMeasures RealPsPathMeasures(Iperf3* iperf3, GrpcStream* stream,
                                  const std::string& server_binary = "");

// Row name -> GB/s per round (NaN where a round did not measure it):
// "iperf3", "grpc_upload_16MB", "grpc_download_16MB", "push_16MB_2s_4w",
// "pull_16MB_2s_4w" (and "push_16MB_2s_4w_atcommit", "..._noheld"); and
// for each measured row but iperf3 the share of the CPUs busy while it ran
// (PsPathResult, BusyShare), as "cpu_" + its name; and for each push and
// pull row this process's page faults per warm step, as "flt_" + its name.
using PsPathRounds = std::map<std::string, std::vector<double>>;

// Runs options.rounds rounds; in each, iperf3, then for every size the
// upload, the download, and push/pull for every servers x workers (and
// shard setting). Prints "round K: loadavg ..." on stdout at the start
// of each round, and a line for each failed push/pull (a failed iperf3 or
// stream measurement leaves its NaN).
PsPathRounds RunPsPathRounds(const PsPathRoundsOptions& options,
                             const PsPathMeasures& measures);

// The report, one line per row in name order, in three groups: each row's
// median and per-round values; each push (pull) row's median over rounds of
// its ratio to iperf3 and to the bare stream's upload (download) of its
// size in the same round; each row also measured under a compared setting,
// its shipped / compared ratio per round ("early apply / at commit", "held
// term / not held", "term applied on arrival / by the applier") and their
// median. The ratio lines end with the median
// share of the CPUs busy during the row and during its bare stream
// ("CPUs busy 0.98 (bare stream 0.97)") and the median page faults per
// warm step ("faults/step 12") where they were measured.
std::string PsPathReport(const PsPathRounds& rounds);

// The line of one server memory measurement: peak RSS against its bound,
// and the throughput.
std::string ServerMemoryLine(const ServerVariant& variant, uint64_t params,
                             int workers, const ServerMemory& memory);

struct PsPathBenchOptions {
  PsPathRoundsOptions rounds;
  std::string iperf3 = "iperf3";  // the binary; unavailable: no iperf3 row
  // The memory run: the shipped server (every ServerVariants() with
  // all_variants) for each worker count, `memory_params` parameters (0: no
  // memory run), `self_path` (this binary) as the shard server child.
  uint64_t memory_params = 16 << 20;
  std::vector<int> memory_workers = {1, 4, 16};
  bool all_variants = false;
  std::string self_path;
};

// Everything ps_path_bench does, printed on stdout: the rounds against
// iperf3 and a bare gRPC stream, their report, then the memory run (for
// every worker count, every variant: MeasureServerMemory over 3 steps, its
// line or why it failed). Its exit status: 1 when the bare gRPC stream
// cannot start, else 0 (no goal is asserted).
int RunPsPathBench(const PsPathBenchOptions& options);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_PS_PATH_ROUNDS_H_
