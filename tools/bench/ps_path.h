// pstrain's own data path, measured through the public pieces a job uses:
// Shard + ParameterServerService behind real gRPC servers on 127.0.0.1 port
// 0, and one PsClient per worker (each over its own connections, as separate
// worker processes would be). One tensor, sync mode.
#ifndef PSTRAIN_TOOLS_BENCH_PS_PATH_H_
#define PSTRAIN_TOOLS_BENCH_PS_PATH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"
#include "server/ps_service.h"

namespace pstrain::bench {

// A sync job of one fp32 tensor of `elems` elements over `servers` shards
// (chunks of `chunk_bytes`; 0: AutoChunkElems, a real job's) for `workers`
// workers, with optimizer `kind` (lr 0.01), whose chunks travel as
// `wire_dtype` (network.wire_dtype).
absl::StatusOr<pstrain::v1::JobSpec> OneTensorJob(
    uint64_t elems, int servers, int workers,
    pstrain::v1::OptimizerConfig::Kind kind,
    pstrain::v1::DType wire_dtype = pstrain::v1::DTYPE_F32,
    uint64_t chunk_bytes = 0);

// The warm steps every push and pull figure of ps_bench and ps_path_bench
// is the median of (issue 26: a steady state, as a real job's steps are).
inline constexpr int kSteadySteps = 20;

struct PsPathResult {
  // All workers together: the median over the warm steps of each step's
  // bytes / seconds of the phase.
  double push_bytes_per_s = 0;
  double pull_bytes_per_s = 0;
  // The same of the first step, on fresh connections and pages (cold).
  double cold_push_bytes_per_s = __builtin_nan("");
  double cold_pull_bytes_per_s = __builtin_nan("");
  int warm_steps = 0;
  // The share of the CPUs' time this process (the workers and shards of
  // the row all run in it) used during the warm push (pull) phases
  // (ReadCpuTimes, BusyShare): near 1, the machine's cores, not the wire,
  // bound the rate. NaN when not measured.
  double push_cpu_busy = __builtin_nan("");
  double pull_cpu_busy = __builtin_nan("");
  // This process's minor page faults per warm step during the push (pull)
  // phases (ReadMinorFaults): buffers landing in fresh pages. NaN when not
  // measured.
  double push_faults_per_step = __builtin_nan("");
  double pull_faults_per_step = __builtin_nan("");
  // Chunk buffers the servers copied per warm step because a pull still
  // held them when the step's update came (ShardStats.
  // chunks_copied_on_write). NaN when not measured.
  double copies_per_step = __builtin_nan("");
};

// How a push/pull measurement's shards, servers and workers are set up:
// every field's default is what a real job of the tensor gets.
struct PsPathSetting {
  // network.wire_dtype: bytes are counted as the fp32 model whatever this
  // carries them as (a bf16 wire moving the model twice as fast shows twice
  // the rate).
  pstrain::v1::DType wire_dtype = pstrain::v1::DTYPE_F32;
  // ShardOptions of every shard: early_apply (chunks applied as they become
  // final, or the whole step at its commit), hold_first_term,
  // apply_terms_on_arrival, apply_held_in_one_pass; apply_in_blocks false:
  // apply_block 0 (the optimizer over whole chunks).
  bool early_apply = true;
  bool hold_first_term = true;
  bool apply_terms_on_arrival = true;
  bool apply_held_in_one_pass = true;
  bool apply_in_blocks = true;
  // PsClientOptions.push_streams of every worker, each part on a connection
  // of its own (0: the job's default, PushStreams in common/job_config.h).
  int push_streams = 0;
  // > 0: PsClientOptions.pull_streams of every worker, split at any size
  // (0: the job's, PullStreams in common/job_config.h).
  int pull_streams = 0;
  // > 0: the servers' HTTP/2 stream lookahead (grpc.http2.lookahead_bytes,
  // a push stream's initial window) beside PsServerChannelArgs().
  int server_lookahead = 0;
  // false: the workers' channels with the HTTP/2 BDP probe off (a pull's
  // receiver).
  bool worker_bdp_probe = true;
  // > 0: the workers' PsClientOptions.push_message_bytes (0: the default).
  uint64_t push_message_bytes = 0;
  // > 0: the servers' PsServiceOptions::pull_message_bytes (0: the default).
  uint64_t pull_message_bytes = 0;
  // > 0: the shard map's chunks (0: AutoChunkElems, a real job's).
  uint64_t chunk_bytes = 0;
  // The servers' PsServiceOptions::parse_pushes_in_place.
  bool parse_in_place = kParsePushesInPlace;
  // The workers' PsClientOptions.reuse_op_threads.
  bool reuse_op_threads = true;
  // Non-empty: every shard's server runs in a process of its own, as a real
  // job's ps_server does apart from its workers: this benchmark's binary at
  // this path as a --serve_shard child (ServeShardMain) with ps_server's
  // process settings (ServerVariants()[0]) and the server side of this
  // setting. Empty: the shards run in this process.
  std::string server_binary;
};

// Starts the shards (in this process, or each in a child process of its own:
// setting.server_binary) and the workers' connections once, then runs
// StepsTimed(`steps`) sync steps on them: every worker pulls (concurrently;
// the pull phase is timed), then every worker pushes its gradient (timed).
// Step 0 is the cold step, reported apart, the next kSettleSteps count
// nowhere; the figures are medians over the `steps` warm ones
// (SettledRateOf, stats.h), and the share of the CPUs busy in their phases.
// Bytes are counted as the fp32 model (elems * 4 per worker).
absl::StatusOr<PsPathResult> MeasurePsPath(uint64_t elems, int servers,
                                           int workers, int steps,
                                           const PsPathSetting& setting = {});

struct SparsePathResult {
  // All workers together, the median over the warm steps of each step's
  // rows / seconds of the phase, and the same as bytes of row values
  // (rows * dim * 4; the ids travel too and are not counted).
  double pull_rows_per_s = 0;
  double push_rows_per_s = 0;
  double pull_bytes_per_s = 0;
  double push_bytes_per_s = 0;
  int warm_steps = 0;
};

// Row-sparse tensors (docs/sparse.md) on the same path: a sync job of one
// row-sparse table [table_rows, dim] (SGD) over `servers` shards for
// `workers` workers, started once; then StepsTimed(`steps`) steps, in each of
// which every worker pulls (PsClient::StartPullRows, concurrently; timed) and
// then pushes the gradient of (StartPushRows; timed) `unique_rows` distinct row
// ids drawn from a Zipf law of exponent 1.1 over the table (hot ids
// repeat, so a step's ids differ per worker and step but overlap). Step 0
// and the settling steps are dropped (SettledRateOf). fp32 wire.
absl::StatusOr<SparsePathResult> MeasureSparsePath(uint64_t unique_rows,
                                                   int dim, int servers,
                                                   int workers, int steps,
                                                   uint64_t table_rows);

// Seconds of one optimizer step of a sync Shard (1 worker, one tensor of
// `elems` elements in 4 MiB chunks, optimizer `kind`) applied by `threads`
// apply threads (ShardOptions.apply_threads): PushResult.apply_seconds, the
// fixed-point sum turned into the gradient and the rule applied, chunk by
// chunk across the threads (ShardOptions.early_apply off, so the whole
// step is applied there). Best of `repeats` steps after one warm-up.
// `in_blocks` false: ShardOptions.apply_block 0 (the rule over whole
// chunks instead of the shipped blocks).
absl::StatusOr<double> ShardApplySeconds(
    uint64_t elems, pstrain::v1::OptimizerConfig::Kind kind, int threads,
    int repeats, bool in_blocks = true);

// How the memory benchmark's shard server runs: the transport and
// allocator settings whose effect on peak memory (and throughput) is
// measured side by side.
struct ServerVariant {
  std::string name;
  // gRPC's HTTP/2 BDP probe (grpc.http2.bdp_probe): on, flow-control windows
  // grow, and a push stream waiting for admission is buffered up to its
  // window; off, windows stay at their initial size.
  bool bdp_probe = true;
  // glibc's M_MMAP_THRESHOLD in bytes (0: glibc's dynamic default): with a
  // fixed threshold, freed large buffers go back to the kernel at once.
  int64_t mmap_threshold = 0;
  // glibc's M_TRIM_THRESHOLD in bytes (0: glibc's; 128 KiB once the mmap
  // threshold is fixed): free heap at the top beyond it goes back to the
  // kernel at once.
  int64_t trim_threshold = 0;
  // PsServiceOptions.max_concurrent_pushes (push streams summed at once);
  // -1: the service's default.
  int max_concurrent_pushes = -1;
  // glibc's M_ARENA_MAX (0: glibc's default, 8 per core): fewer per-thread
  // malloc arenas keep less freed memory.
  int malloc_arena_max = 0;
  // gRPC's tcp_read_chunks experiment (on: gRPC 1.51's default; off: each
  // connection's read buffer is bounded by
  // grpc.experimental.tcp_max_read_chunk_size).
  bool grpc_tcp_read_chunks = true;
};

// The variants measured; the first is the parameter server as shipped
// (PsServerChannelArgs(), server/ps_service.h, and ps_server's
// ProcessMemoryOptions, server/process_memory.h), the others each change
// one thing of it, and one is the server before process_memory.h.
std::vector<ServerVariant> ServerVariants();

// What one --serve_shard child serves: shard `shard` of OneTensorJob(elems,
// servers, workers, optimizer, setting.wire_dtype, setting.chunk_bytes),
// with the server side of `setting` (its ShardOptions, the stream lookahead
// and PsServiceOptions it names) and the process settings of `variant`.
struct ServeShardSpec {
  uint64_t elems = 0;
  int workers = 1;
  int servers = 1;
  int shard = 0;
  pstrain::v1::OptimizerConfig::Kind optimizer =
      pstrain::v1::OptimizerConfig::MOMENTUM;
  PsPathSetting setting;
  ServerVariant variant;
};

// The child's command line: `self` --serve_shard and the flags
// tools/bench/serve_shard_flags.cc turns back into `spec`.
std::vector<std::string> ServeShardArgv(const std::string& self,
                                        const ServeShardSpec& spec);

// Child role (the memory benchmark, and MeasurePsPath with
// setting.server_binary): serves `spec` on 127.0.0.1 port 0
// (PsServerChannelArgs() with the variant's BDP probe; the process settings
// through ConfigureProcessMemory, so call it first in the process), prints the
// port on stdout, and exits 0 when stdin closes (or on SIGTERM, or after 30
// minutes).
int ServeShardMain(const ServeShardSpec& spec);

struct ServerMemory {
  int64_t peak_rss_bytes = 0;  // the server process's VmHWM
  int64_t bound_bytes = 0;     // weights + slots + 8 B/param + 64 MiB
  // All workers together, over the steps after the first.
  double push_bytes_per_s = 0;
  double pull_bytes_per_s = 0;
};

// Runs `self` (this binary) as a shard server child (ServeShardMain via
// --serve_shard) in `variant`, drives `workers` workers through `steps`
// sync steps (pull then push each; steps >= 2) and returns the child's peak
// RSS and the throughput of the steps after the first.
absl::StatusOr<ServerMemory> MeasureServerMemory(const std::string& self,
                                                 uint64_t elems, int workers,
                                                 int steps,
                                                 const ServerVariant& variant);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_PS_PATH_H_
