// Which HTTP/2 settings move gRPC's own ceiling on this machine? The bench's
// bare stream (tools/bench/wire.h) with one setting changed at a time, every
// variant in every round (interleaved), warm: each variant keeps one
// long-lived stream, and each figure is the median of `steps` transfers
// after a cold one and the settling ones (GrpcStream::UploadSteady). A
// measuring instrument for docs/performance.md ("What gRPC's settings
// move"), not a product path.
#ifndef PSTRAIN_TOOLS_BENCH_GRPC_ARGS_H_
#define PSTRAIN_TOOLS_BENCH_GRPC_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/process_memory.h"
#include "tools/bench/subprocess.h"
#include "tools/bench/wire.h"

namespace pstrain::bench {

struct GrpcArgsVariant {
  std::string name;
  GrpcStreamOptions stream;
  // The variant this one's ratios are to (an index into the same list, at
  // most its own): the first unless a set pairs its variants.
  size_t base = 0;
};

// gRPC's defaults first (the ratios' base), then one change each: the BDP
// probe off, lookaheads, ps_server's settings (server/ps_service.h
// PsServerChannelArgs), the workers' channels without the probe, larger
// frames, smaller messages.
std::vector<GrpcArgsVariant> GrpcArgsVariants();

// The transport's own settings on a stream without the BDP probe (the
// first, the ratios' base): HTTP/2's largest frame, a larger write buffer,
// TCP reads of 1 MiB, MSG_ZEROCOPY sends, 4 MiB messages.
std::vector<GrpcArgsVariant> GrpcTransportVariants();

// gRPC's server APIs with gRPC's default settings, the synchronous one
// first (the bench's anchor, the ratios' base), then the callback API (as
// ps_server's push and pull) and the completion-queue API with one polling
// thread of its own (GrpcServerApi, tools/bench/wire.h).
std::vector<GrpcArgsVariant> GrpcServerApiVariants();

// A call per transfer against one call across transfers (a session,
// GrpcStreamOptions::session), on the synchronous handler (the first, the
// ratios' base) and on the callback API, the latter also with ps_server's
// settings: what a push or pull whose call spans steps would save. Each
// session's ratios are to its call-per-transfer twin, the one before it.
std::vector<GrpcArgsVariant> GrpcSessionVariants();

// The variants of grpc_args_bench's --set `name`: http2
// (GrpcArgsVariants), transport, server_api or session; any other name is
// InvalidArgument naming the flag and the names it takes. With --only
// `only` >= 0, that variant alone (OnlyVariant).
absl::StatusOr<std::vector<GrpcArgsVariant>> GrpcArgsVariantSet(
    absl::string_view name, int only = -1);

// grpc_args_bench's --only `k`: the variant k (0-based, in the set's order)
// of `set` alone, its own base (e.g. for a timeline of that variant only,
// PSTRAIN_TIMELINE); -1: the whole set. Any other k is InvalidArgument
// naming the flag and the set's range.
absl::StatusOr<std::vector<GrpcArgsVariant>> OnlyVariant(
    std::vector<GrpcArgsVariant> set, int k);

// "4,16,64" -> {4, 16, 64}: --sizes_mb, decimal MB, each at least 1; an
// error names the flag and the bad item.
absl::StatusOr<std::vector<int>> ParseSizesMb(absl::string_view list);

// A stream's server side as one argument ("callback;key=value;..."): its
// API (sync, callback or queue) and server_args, for a server in a process
// of its own; ParseServerSpec reads it back (InvalidArgument naming the bad
// part).
std::string ServerSpec(const GrpcStreamOptions& options);
absl::StatusOr<GrpcStreamOptions> ParseServerSpec(absl::string_view spec);

// The process settings of a bare stream's server in a process of its own,
// as ps_server's (server/process_memory.h) but for two: gRPC's
// tcp_read_chunks experiment is off only where `server` bounds the read
// chunks as ps_server's settings do (PsServerChannelArgs; without that bound,
// reads with the experiment off measured 0.2 GB/s), and freed heap stays
// mapped for reuse (worker/allreduce/heap_reuse.h's thresholds, not
// ps_server's 1 MiB mmap threshold): the bare server allocates a message's
// buffer per call (a Blob's payload read, a download's serialized message),
// where ps_server reads pushes into buffers kept from earlier pushes and
// sends pulls from the weights in place, so with ps_server's threshold every
// call faulted fresh pages in (a 4 MB transfer at 0.2-0.9 GB/s instead of
// about 3; docs/performance-log.md, "One call across steps").
ProcessMemoryOptions BareServerMemory(const GrpcStreamOptions& server);

// grpc_args_bench --serve SPEC (and ps_bench --serve SPEC): serves a bare
// stream (GrpcStream::Serve) as SPEC says, in a process set up by
// BareServerMemory, prints "port N" on stdout, and serves until stdin closes
// (or a signal ends the process); the exit code (2: a bad SPEC). Call first
// in main.
int ServeBareStream(absl::string_view spec);

// Starts `binary --serve ServerSpec(*options)` (a binary whose main calls
// ServeBareStream for --serve), points options->server_address at the port
// it prints (waiting at most 30 s) and keeps the child in `children` (it
// exits when its Child is destroyed: its stdin closes). Non-empty `cpus`:
// the child runs on those CPUs only (Child::Start).
absl::Status ServeInChild(const std::string& binary, GrpcStreamOptions* options,
                          std::vector<Child>* children,
                          const std::vector<int>& cpus = {});

// The bare stream a push and a pull are held against across processes: the
// callback API with ps_server's channel arguments (PsServerChannelArgs) on
// the server, gRPC's defaults on the client (as a worker's channel), 1 MiB
// messages, a call per transfer; its server meant for a process of its own
// (ServeInChild), as ps_server runs apart from ps_worker.
GrpcStreamOptions SeparateProcessAnchor();

struct GrpcArgsBenchOptions {
  int rounds = 3;
  int steps = 20;
  std::vector<int> sizes_mb = {4, 16, 64};
  bool download = false;  // server -> client instead of client -> server
  // An iperf3 binary: each round also measures iperf3 -l 1M on loopback
  // (2 s), and the table adds every variant's ratio to it. Empty: none.
  std::string iperf3;
  // A binary answering --serve SPEC (ServeBareStream; grpc_args_bench):
  // each variant's server then runs in a process of its own, as ps_server
  // does, instead of in this one. Empty: in this process.
  std::string server_binary;
};

// Runs the rounds over `variants` (the first is the base) and returns the
// table: per variant and size the median GB/s over rounds and the median
// of the per-round ratios to the base (and to iperf3, with
// options.iperf3), with the load average.
absl::StatusOr<std::string> RunGrpcArgsBench(
    const GrpcArgsBenchOptions& options,
    const std::vector<GrpcArgsVariant>& variants);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_GRPC_ARGS_H_
