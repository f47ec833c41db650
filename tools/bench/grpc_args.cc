#include "tools/bench/grpc_args.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/process_memory.h"
#include "server/ps_service.h"
#include "tools/bench/stats.h"
#include "tools/bench/subprocess.h"
#include "worker/allreduce/heap_reuse.h"

namespace pstrain::bench {

namespace {

using Args = std::vector<std::pair<std::string, int>>;

Args With(Args args, const char* key, int value) {
  args.push_back({key, value});
  return args;
}

}  // namespace

std::vector<GrpcArgsVariant> GrpcArgsVariants() {
  const Args bdp_off = {{GRPC_ARG_HTTP2_BDP_PROBE, 0}};
  const Args shipped = PsServerChannelArgs();
  const char* kLookahead = GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES;
  const int kMaxFrame = (1 << 24) - 1;  // HTTP/2's largest
  auto both = [](const Args& a) { return GrpcStreamOptions{a, a}; };
  return {
      {"defaults (the bare stream)", {}},
      {"BDP off", both(bdp_off)},
      {"BDP off + lookahead 256 KiB",
       {With(bdp_off, kLookahead, 256 << 10), bdp_off}},
      {"BDP off + lookahead 1 MiB",
       {With(bdp_off, kLookahead, 1 << 20), bdp_off}},
      {"BDP off + lookahead 4 MiB",
       {With(bdp_off, kLookahead, 4 << 20), bdp_off}},
      {"BDP off + lookahead 16 MiB",
       {With(bdp_off, kLookahead, 16 << 20), bdp_off}},
      {"ps_server's", {shipped, bdp_off}},
      {"ps_server's + lookahead 1 MiB",
       {With(shipped, kLookahead, 1 << 20), bdp_off}},
      {"ps_server's + lookahead 4 MiB",
       {With(shipped, kLookahead, 4 << 20), bdp_off}},
      {"worker channel BDP off", {{}, bdp_off}},
      {"worker channel BDP off + lookahead 1 MiB",
       {{}, With(bdp_off, kLookahead, 1 << 20)}},
      {"max frame 16 MiB", both({{GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kMaxFrame}})},
      {"256 KiB messages", {{}, {}, 256 << 10}},
  };
}

std::vector<GrpcArgsVariant> GrpcTransportVariants() {
  const Args bdp_off = {{GRPC_ARG_HTTP2_BDP_PROBE, 0}};
  const int kMaxFrame = (1 << 24) - 1;  // HTTP/2's largest
  auto both = [](const Args& a) { return GrpcStreamOptions{a, a}; };
  return {
      {"BDP off", both(bdp_off)},
      {"BDP off + max frame 16 MiB",
       both(With(bdp_off, GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kMaxFrame))},
      {"BDP off + write buffer 4 MiB",
       both(With(bdp_off, GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 4 << 20))},
      {"BDP off + read chunks 1 MiB",
       both(With(With(With(bdp_off, GRPC_ARG_TCP_READ_CHUNK_SIZE, 1 << 20),
                      GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 1 << 20),
                 GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 4 << 20))},
      {"BDP off + TX zerocopy",
       both(With(bdp_off, GRPC_ARG_TCP_TX_ZEROCOPY_ENABLED, 1))},
      {"BDP off + 4 MiB messages", {bdp_off, bdp_off, 4 << 20}},
  };
}

std::vector<GrpcArgsVariant> GrpcServerApiVariants() {
  auto api = [](GrpcServerApi a) {
    GrpcStreamOptions o;
    o.server_api = a;
    return o;
  };
  return {
      {"synchronous handler (the anchor)", api(GrpcServerApi::kSync)},
      {"callback reactor (as ps_server)", api(GrpcServerApi::kCallback)},
      {"completion queue, one polling thread",
       api(GrpcServerApi::kCompletionQueue)},
  };
}

std::vector<GrpcArgsVariant> GrpcSessionVariants() {
  auto make = [](GrpcServerApi api, bool session, Args server_args) {
    GrpcStreamOptions o;
    o.server_api = api;
    o.session = session;
    o.server_args = std::move(server_args);
    return o;
  };
  const Args shipped = PsServerChannelArgs();
  return {
      {"a call per transfer (the anchor)",
       make(GrpcServerApi::kSync, false, {})},
      {"one call across transfers", make(GrpcServerApi::kSync, true, {}), 0},
      {"callback: a call per transfer",
       make(GrpcServerApi::kCallback, false, {})},
      {"callback: one call across transfers",
       make(GrpcServerApi::kCallback, true, {}), 2},
      {"callback, ps_server's: a call per transfer",
       make(GrpcServerApi::kCallback, false, shipped)},
      {"callback, ps_server's: one call across",
       make(GrpcServerApi::kCallback, true, shipped), 4},
  };
}

absl::StatusOr<std::vector<GrpcArgsVariant>> OnlyVariant(
    std::vector<GrpcArgsVariant> set, int k) {
  if (k == -1) return set;
  if (k < 0 || static_cast<size_t>(k) >= set.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--only: ", k, " is not a variant of the set (0..",
                     static_cast<int>(set.size()) - 1, ", or -1 for all)"));
  }
  GrpcArgsVariant only = std::move(set[k]);
  only.base = 0;
  return std::vector<GrpcArgsVariant>{std::move(only)};
}

absl::StatusOr<std::vector<GrpcArgsVariant>> GrpcArgsVariantSet(
    absl::string_view name, int only) {
  if (name == "http2") return OnlyVariant(GrpcArgsVariants(), only);
  if (name == "transport") return OnlyVariant(GrpcTransportVariants(), only);
  if (name == "server_api") return OnlyVariant(GrpcServerApiVariants(), only);
  if (name == "session") return OnlyVariant(GrpcSessionVariants(), only);
  return absl::InvalidArgumentError(
      absl::StrCat("--set: '", name,
                   "' is none of http2, transport, server_api and session"));
}

absl::StatusOr<std::vector<int>> ParseSizesMb(absl::string_view list) {
  std::vector<int> sizes;
  for (absl::string_view s : absl::StrSplit(list, ',')) {
    int mb = 0;
    if (!absl::SimpleAtoi(s, &mb) || mb < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sizes_mb: '", s, "' is not a positive number of MB"));
    }
    sizes.push_back(mb);
  }
  return sizes;
}

std::string ServerSpec(const GrpcStreamOptions& options) {
  std::string spec = options.server_api == GrpcServerApi::kCallback ? "callback"
                     : options.server_api == GrpcServerApi::kCompletionQueue
                         ? "queue"
                         : "sync";
  for (const auto& [key, value] : options.server_args) {
    absl::StrAppend(&spec, ";", key, "=", value);
  }
  return spec;
}

absl::StatusOr<GrpcStreamOptions> ParseServerSpec(absl::string_view spec) {
  std::vector<absl::string_view> parts = absl::StrSplit(spec, ';');
  GrpcStreamOptions o;
  if (parts[0] == "callback") {
    o.server_api = GrpcServerApi::kCallback;
  } else if (parts[0] == "queue") {
    o.server_api = GrpcServerApi::kCompletionQueue;
  } else if (parts[0] != "sync") {
    return absl::InvalidArgumentError(
        absl::StrCat("--serve: '", parts[0],
                     "' is none of the server APIs sync, callback and queue"));
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
    int value = 0;
    if (kv.first.empty() || !absl::SimpleAtoi(kv.second, &value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--serve: '", parts[i], "' is not a channel argument key=integer"));
    }
    o.server_args.push_back({std::string(kv.first), value});
  }
  return o;
}

ProcessMemoryOptions BareServerMemory(const GrpcStreamOptions& server) {
  ProcessMemoryOptions memory;
  memory.mmap_threshold_bytes = kRingMmapThresholdBytes;
  memory.trim_threshold_bytes = kRingTrimThresholdBytes;
  memory.grpc_tcp_read_chunks = true;
  for (const auto& [key, value] : server.server_args) {
    if (key == GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE) {
      memory.grpc_tcp_read_chunks = false;
    }
  }
  return memory;
}

int ServeBareStream(absl::string_view spec) {
  absl::StatusOr<GrpcStreamOptions> options = ParseServerSpec(spec);
  if (!options.ok()) {
    std::fprintf(stderr, "--serve: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  // Before any thread and gRPC call, as ps_server's main does.
  const ProcessMemoryOptions memory = BareServerMemory(*options);
  if (absl::Status st = ConfigureProcessMemory(memory); !st.ok()) {
    std::fprintf(stderr, "--serve: %s\n", st.ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<GrpcStream>> stream =
      GrpcStream::Serve(*options);
  if (!stream.ok()) {
    std::fprintf(stderr, "--serve: %s\n", stream.status().ToString().c_str());
    return 1;
  }
  std::printf("port %d\n", (*stream)->port());
  std::fflush(stdout);
  char buffer[256];
  while (true) {  // until the bench closes our stdin
    const ssize_t n = read(STDIN_FILENO, buffer, sizeof(buffer));
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  return 0;
}

absl::Status ServeInChild(const std::string& binary, GrpcStreamOptions* options,
                          std::vector<Child>* children,
                          const std::vector<int>& cpus) {
  absl::StatusOr<Child> child =
      Child::Start({binary, "--serve", ServerSpec(*options)},
                   /*pipe_stdio=*/true, /*stdout_file=*/"",
                   /*stderr_file=*/"", cpus);
  if (!child.ok()) return child.status();
  absl::StatusOr<int> port = child->ReadPort(absl::Now() + absl::Seconds(30));
  if (!port.ok()) {
    return absl::UnavailableError(absl::StrCat(binary, " --serve ",
                                               ServerSpec(*options), " ",
                                               port.status().message()));
  }
  options->server_address = absl::StrCat("127.0.0.1:", *port);
  children->push_back(std::move(*child));
  return absl::OkStatus();
}

GrpcStreamOptions SeparateProcessAnchor() {
  GrpcStreamOptions o;
  o.server_api = GrpcServerApi::kCallback;
  o.server_args = PsServerChannelArgs();
  return o;
}

absl::StatusOr<std::string> RunGrpcArgsBench(
    const GrpcArgsBenchOptions& options,
    const std::vector<GrpcArgsVariant>& variants) {
  if (variants.empty() || options.rounds < 1 || options.steps < 1) {
    return absl::InvalidArgumentError(
        "grpc_args_bench: needs variants, rounds >= 1 and steps >= 1");
  }
  bool paired = false;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (variants[i].base > i) {
      return absl::InvalidArgumentError(
          absl::StrCat("grpc_args_bench: ", variants[i].name, "'s base ",
                       variants[i].base, " is not an earlier variant"));
    }
    paired = paired || variants[i].base != 0;
  }
  // The servers' processes outlive the streams (declared first): a
  // session's end waits for its server's answer.
  std::vector<Child> children;
  std::vector<std::unique_ptr<GrpcStream>> streams;
  for (const GrpcArgsVariant& v : variants) {
    GrpcStreamOptions stream_options = v.stream;
    if (!options.server_binary.empty()) {
      if (absl::Status st =
              ServeInChild(options.server_binary, &stream_options, &children);
          !st.ok()) {
        return st;
      }
    }
    absl::StatusOr<std::unique_ptr<GrpcStream>> s =
        GrpcStream::Start(stream_options);
    if (!s.ok()) return s.status();
    streams.push_back(std::move(*s));
  }
  std::unique_ptr<Iperf3> iperf3;
  if (!options.iperf3.empty()) {
    absl::StatusOr<std::unique_ptr<Iperf3>> started =
        Iperf3::Start(options.iperf3);
    if (!started.ok()) return started.status();
    iperf3 = std::move(*started);
  }
  std::vector<double> iperf3_gbps;  // per round
  // (variant, size) -> per-round warm median, GB/s.
  std::map<std::pair<size_t, int>, std::vector<double>> gbps;
  for (int r = 0; r < options.rounds; ++r) {
    if (iperf3 != nullptr) {
      absl::StatusOr<double> rate = iperf3->Measure(2);
      if (!rate.ok()) return rate.status();
      iperf3_gbps.push_back(*rate / 1e9);
    }
    for (int mb : options.sizes_mb) {
      const uint64_t bytes = uint64_t{1000000} * mb;
      for (size_t i = 0; i < variants.size(); ++i) {
        absl::StatusOr<SteadyRate> rate =
            options.download ? streams[i]->DownloadSteady(bytes, options.steps)
                             : streams[i]->UploadSteady(bytes, options.steps);
        if (!rate.ok()) {
          return absl::Status(
              rate.status().code(),
              absl::StrCat(variants[i].name, ": ", rate.status().message()));
        }
        gbps[{i, mb}].push_back(rate->warm_bytes_per_s / 1e9);
      }
    }
  }
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::string out = absl::StrFormat(
      "gRPC %s, warm, %d rounds x %d steps, servers %s, load %.2f %.2f "
      "%.2f\n",
      options.download ? "download" : "upload", options.rounds, options.steps,
      options.server_binary.empty() ? "in this process"
                                    : "in processes of their own",
      load[0], load[1], load[2]);
  // A header of the sizes, then a row per variant of cell(variant, size).
  auto table = [&](const char* title,
                   const std::function<std::string(size_t, int)>& cell) {
    absl::StrAppendFormat(&out, "%-42s", title);
    for (int mb : options.sizes_mb) {
      absl::StrAppendFormat(&out, " %16s", absl::StrCat(mb, " MB"));
    }
    out += "\n";
    for (size_t i = 0; i < variants.size(); ++i) {
      absl::StrAppendFormat(&out, "%-42s", variants[i].name);
      for (int mb : options.sizes_mb) out += cell(i, mb);
      out += "\n";
    }
  };
  // The medians of variant i's per-round rates divided by `by`'s.
  auto median_ratio = [](const std::vector<double>& v,
                         const std::vector<double>& by) {
    std::vector<double> ratio;
    for (size_t r = 0; r < v.size(); ++r) ratio.push_back(v[r] / by[r]);
    return Median(ratio);
  };
  table(paired ? "variant: GB/s (/ its base)" : "variant: GB/s (/ the first)",
        [&](size_t i, int mb) {
          const std::vector<double>& v = gbps[{i, mb}];
          return absl::StrFormat("    %5.2f (%4.2fx)", Median(v),
                                 median_ratio(v, gbps[{variants[i].base, mb}]));
        });
  if (iperf3 == nullptr) return out;
  absl::StrAppendFormat(
      &out, "iperf3 -l 1M: median %.2f GB/s, rounds:", Median(iperf3_gbps));
  for (double g : iperf3_gbps) absl::StrAppendFormat(&out, " %.2f", g);
  out += "\n";
  table("variant / iperf3 (per-round ratios)", [&](size_t i, int mb) {
    return absl::StrFormat(" %16.2f", median_ratio(gbps[{i, mb}], iperf3_gbps));
  });
  return out;
}

}  // namespace pstrain::bench
