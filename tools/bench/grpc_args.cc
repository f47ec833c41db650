#include "tools/bench/grpc_args.h"

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "server/ps_service.h"
#include "tools/bench/stats.h"

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

absl::StatusOr<std::vector<GrpcArgsVariant>> GrpcArgsVariantSet(
    absl::string_view name) {
  if (name == "http2") return GrpcArgsVariants();
  if (name == "transport") return GrpcTransportVariants();
  if (name == "server_api") return GrpcServerApiVariants();
  if (name == "session") return GrpcSessionVariants();
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
  std::vector<std::unique_ptr<GrpcStream>> streams;
  for (const GrpcArgsVariant& v : variants) {
    absl::StatusOr<std::unique_ptr<GrpcStream>> s = GrpcStream::Start(v.stream);
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
      "gRPC %s, warm, %d rounds x %d steps, load %.2f %.2f %.2f\n",
      options.download ? "download" : "upload", options.rounds, options.steps,
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
