// grpc_args_bench: gRPC's bare upload or download with one HTTP/2 setting
// changed at a time (tools/bench/grpc_args.h; the variant sets under --set;
// usage in docs/performance.md, "grpc_args_bench").
//
//   bazel run -c opt //tools/bench:grpc_args_bench -- --rounds 5 --steps 20
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "tools/bench/bench_heap.h"
#include "tools/bench/grpc_args.h"

ABSL_FLAG(int, rounds, 3, "interleaved rounds (every variant once each)");
ABSL_FLAG(int, steps, 20, "warm transfers per variant and size per round");
ABSL_FLAG(std::string, sizes_mb, "4,16,64", "transfer sizes in decimal MB");
ABSL_FLAG(bool, download, false,
          "downloads (server to client) instead of uploads");
ABSL_FLAG(std::string, set, "http2",
          "which variants: http2 (gRPC's defaults first, then the BDP probe, "
          "lookaheads, frames, messages), transport (the BDP probe off "
          "first, then frames, write buffer, TCP reads, zerocopy, messages) "
          "server_api (the synchronous handler first, then a callback "
          "reactor and a completion queue with one polling thread) or "
          "session (a call per transfer first, then one call across "
          "transfers, on the synchronous and callback APIs)");
ABSL_FLAG(int, only, -1,
          "measure only the set's variant with this index (0-based, in the "
          "order the table lists them), alone: e.g. for a timeline of it "
          "(PSTRAIN_TIMELINE); -1: every variant");
ABSL_FLAG(bool, separate_processes, false,
          "each variant's server in a process of its own (this binary with "
          "--serve), as ps_server runs apart from ps_worker");
ABSL_FLAG(std::string, serve, "",
          "internal (--separate_processes): serve one bare stream as this "
          "spec says, print its port, serve until stdin closes");
ABSL_FLAG(std::string, iperf3, "",
          "an iperf3 binary: each round also measures iperf3 -l 1M on "
          "loopback and the table adds every variant's ratio to it (empty: "
          "none)");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "grpc_args_bench: %s\n",
               std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_serve).empty()) {
    return pstrain::bench::ServeBareStream(absl::GetFlag(FLAGS_serve));
  }
  pstrain::bench::KeepBenchHeapForReuse("grpc_args_bench");
  pstrain::bench::GrpcArgsBenchOptions options;
  options.rounds = absl::GetFlag(FLAGS_rounds);
  options.steps = absl::GetFlag(FLAGS_steps);
  options.download = absl::GetFlag(FLAGS_download);
  options.iperf3 = absl::GetFlag(FLAGS_iperf3);
  if (absl::GetFlag(FLAGS_separate_processes)) {
    options.server_binary = "/proc/self/exe";
  }
  absl::StatusOr<std::vector<int>> sizes =
      pstrain::bench::ParseSizesMb(absl::GetFlag(FLAGS_sizes_mb));
  if (!sizes.ok()) return Fail(sizes.status());
  options.sizes_mb = *sizes;
  absl::StatusOr<std::vector<pstrain::bench::GrpcArgsVariant>> variants =
      pstrain::bench::GrpcArgsVariantSet(absl::GetFlag(FLAGS_set),
                                         absl::GetFlag(FLAGS_only));
  if (!variants.ok()) return Fail(variants.status());
  absl::StatusOr<std::string> table =
      pstrain::bench::RunGrpcArgsBench(options, *variants);
  if (!table.ok()) return Fail(table.status());
  std::fputs(table->c_str(), stdout);
  return 0;
}
