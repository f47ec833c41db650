// grpc_args_bench: which HTTP/2 settings move gRPC's own ceiling on this
// machine? The bench's bare stream (tools/bench/wire.h) with one setting
// changed at a time, in interleaved rounds, warm (one long-lived channel per
// variant, the first transfer of each round apart), medians. A measuring
// instrument for docs/performance.md, not a product path.
//
//   bazel run //tools/bench:grpc_args_bench -- --rounds 5 --steps 20
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "tools/bench/bench.grpc.pb.h"

ABSL_FLAG(int, rounds, 3, "Interleaved rounds (every variant once each).");
ABSL_FLAG(int, steps, 20, "Warm transfers per variant and size per round.");
ABSL_FLAG(std::string, sizes_mb, "4,16,64", "Transfer sizes in MB.");
ABSL_FLAG(bool, download, false,
          "Downloads (server to client) instead of uploads.");

namespace pstrain::bench {
namespace {

using pstrain::bench::v1::Blob;
using pstrain::bench::v1::BlobStream;
using pstrain::bench::v1::DownloadRequest;
using pstrain::bench::v1::UploadResponse;

class Service final : public BlobStream::Service {
 public:
  grpc::Status Upload(grpc::ServerContext*, grpc::ServerReader<Blob>* reader,
                      UploadResponse* response) override {
    Blob blob;
    uint64_t bytes = 0;
    while (reader->Read(&blob)) bytes += blob.data().size();
    response->set_bytes(bytes);
    return grpc::Status::OK;
  }
  grpc::Status Download(grpc::ServerContext* context,
                        const DownloadRequest* request,
                        grpc::ServerWriter<Blob>* writer) override {
    const uint64_t msg = request->message_bytes();
    Blob blob;
    blob.mutable_data()->assign(msg, '\x5a');
    for (uint64_t sent = 0; sent < request->total_bytes(); sent += msg) {
      if (request->total_bytes() - sent < msg) {
        blob.mutable_data()->resize(request->total_bytes() - sent);
      }
      if (!writer->Write(blob)) return grpc::Status::CANCELLED;
    }
    return grpc::Status::OK;
  }
};

using Args = std::vector<std::pair<std::string, int>>;

struct Variant {
  std::string name;
  Args server;  // an upload's receiver
  Args client;  // a download's receiver
  uint64_t message_bytes = 1 << 20;
};

class Link {
 public:
  explicit Link(const Variant& v) : variant_(v) {
    absl::StatusOr<StartedServer> started =
        StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(),
                        {&service_}, v.server);
    if (!started.ok()) {
      std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
      std::exit(1);
    }
    server_ = std::move(started->server);
    grpc::ChannelArguments args = DefaultChannelArgs();
    for (const auto& [key, value] : v.client) args.SetInt(key, value);
    args.SetInt("pstrain.bench.variant", std::hash<std::string>()(v.name));
    stub_ = BlobStream::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", started->port),
                                  grpc::InsecureChannelCredentials(), args));
  }
  ~Link() { server_->Shutdown(); }

  // Seconds for one download of `bytes`.
  double Download(uint64_t bytes) {
    DownloadRequest request;
    request.set_total_bytes(bytes);
    request.set_message_bytes(variant_.message_bytes);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(120));
    const absl::Time start = absl::Now();
    auto reader = stub_->Download(&context, request);
    Blob blob;
    uint64_t got = 0;
    while (reader->Read(&blob)) got += blob.data().size();
    grpc::Status status = reader->Finish();
    const double s = absl::ToDoubleSeconds(absl::Now() - start);
    if (!status.ok() || got != bytes) {
      std::fprintf(stderr, "%s: download failed: %s\n", variant_.name.c_str(),
                   status.error_message().c_str());
      std::exit(1);
    }
    return s;
  }

  // Seconds for one upload of `bytes`.
  double Upload(uint64_t bytes) {
    const uint64_t msg = variant_.message_bytes;
    Blob blob;
    blob.mutable_data()->assign(msg, '\x5a');
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(120));
    UploadResponse response;
    const absl::Time start = absl::Now();
    auto writer = stub_->Upload(&context, &response);
    for (uint64_t sent = 0; sent < bytes; sent += msg) {
      if (bytes - sent < msg) blob.mutable_data()->resize(bytes - sent);
      if (!writer->Write(blob)) break;
    }
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    const double s = absl::ToDoubleSeconds(absl::Now() - start);
    if (!status.ok() || response.bytes() != bytes) {
      std::fprintf(stderr, "%s: upload failed: %s\n", variant_.name.c_str(),
                   status.error_message().c_str());
      std::exit(1);
    }
    return s;
  }

 private:
  const Variant variant_;
  Service service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<BlobStream::Stub> stub_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int Main() {
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int steps = absl::GetFlag(FLAGS_steps);
  std::vector<int> sizes;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes_mb), ',')) {
    sizes.push_back(std::atoi(std::string(s).c_str()));
  }
  const Args bdp_off = {{GRPC_ARG_HTTP2_BDP_PROBE, 0}};
  // ps_server's settings (server/ps_service.cc PsServerChannelArgs).
  const Args shipped = {{GRPC_ARG_HTTP2_BDP_PROBE, 0},
                        {GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 64 << 10}};
  auto with = [](Args a, std::pair<std::string, int> kv) {
    a.push_back(kv);
    return a;
  };
  auto lookahead = [](int bytes) {
    return std::make_pair(std::string(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES),
                          bytes);
  };
  const std::vector<Variant> variants = {
      {"defaults (the bare stream)", {}, {}},
      {"BDP off", bdp_off, bdp_off},
      {"BDP off + lookahead 256 KiB", with(bdp_off, lookahead(256 << 10)),
       bdp_off},
      {"BDP off + lookahead 1 MiB", with(bdp_off, lookahead(1 << 20)), bdp_off},
      {"BDP off + lookahead 4 MiB", with(bdp_off, lookahead(4 << 20)), bdp_off},
      {"BDP off + lookahead 16 MiB", with(bdp_off, lookahead(16 << 20)),
       bdp_off},
      {"ps_server's", shipped, bdp_off},
      {"ps_server's + lookahead 1 MiB", with(shipped, lookahead(1 << 20)),
       bdp_off},
      {"ps_server's + lookahead 4 MiB", with(shipped, lookahead(4 << 20)),
       bdp_off},
      {"worker channel BDP off", {}, bdp_off},
      {"worker channel BDP off + lookahead 1 MiB",
       {},
       with(bdp_off, lookahead(1 << 20))},
      {"max frame 16 MiB",
       {{GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1}},
       {{GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1}}},
      {"256 KiB messages", {}, {}, 256 << 10},
  };
  const bool download = absl::GetFlag(FLAGS_download);
  std::vector<std::unique_ptr<Link>> links;
  for (const Variant& v : variants) links.push_back(std::make_unique<Link>(v));
  // [variant][size] -> per-round medians (GB/s).
  std::map<std::pair<size_t, int>, std::vector<double>> results;
  for (int r = 0; r < rounds; ++r) {
    for (int mb : sizes) {
      const uint64_t bytes = uint64_t{1} * mb * 1000 * 1000;
      for (size_t i = 0; i < variants.size(); ++i) {
        Link& link = *links[i];
        auto once = [&] {
          return download ? link.Download(bytes) : link.Upload(bytes);
        };
        once();  // warm-up, apart
        std::vector<double> rates;
        for (int s = 0; s < steps; ++s) rates.push_back(bytes / once() / 1e9);
        results[{i, mb}].push_back(Median(rates));
      }
    }
  }
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("gRPC %s, warm, %d rounds x %d steps, load %.2f %.2f %.2f\n",
              download ? "download" : "upload", rounds, steps, load[0], load[1],
              load[2]);
  std::printf("%-36s", "variant (GB/s; / defaults)");
  for (int mb : sizes) std::printf(" %14s", absl::StrCat(mb, " MB").c_str());
  std::printf("\n");
  for (size_t i = 0; i < variants.size(); ++i) {
    std::printf("%-36s", variants[i].name.c_str());
    for (int mb : sizes) {
      std::vector<double> ratio;
      for (int r = 0; r < rounds; ++r) {
        ratio.push_back(results[{i, mb}][r] / results[{0, mb}][r]);
      }
      std::printf("   %5.2f (%4.2fx)", Median(results[{i, mb}]), Median(ratio));
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::bench::Main();
}
