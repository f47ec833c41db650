#include "tools/bench/wire.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"

namespace pstrain::bench {

using pstrain::bench::v1::Blob;
using pstrain::bench::v1::DownloadRequest;
using pstrain::bench::v1::UploadResponse;

absl::StatusOr<std::unique_ptr<Iperf3>> Iperf3::Start(
    const std::string& binary) {
  absl::StatusOr<int> port = FreeLoopbackPort();
  if (!port.ok()) return port.status();
  absl::StatusOr<Child> server =
      Child::Start({binary, "-s", "-B", "127.0.0.1", "-p", absl::StrCat(*port)},
                   /*pipe_stdio=*/false);
  if (!server.ok()) return server.status();
  std::unique_ptr<Iperf3> iperf(new Iperf3(binary, *port, std::move(*server)));
  // The server is up once a short client run succeeds (bounded retries).
  absl::Status last;
  for (int i = 0; i < 30; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    absl::StatusOr<double> r = iperf->Run({"-n", "1M"}, absl::Seconds(10));
    if (r.ok()) return iperf;
    last = r.status();
  }
  return absl::UnavailableError(
      absl::StrCat("iperf3 server did not answer on 127.0.0.1:", *port, ": ",
                   last.message()));
}

absl::StatusOr<double> Iperf3::Measure(int seconds) {
  seconds = std::max(seconds, 1);
  return Run({"-t", absl::StrCat(seconds)}, absl::Seconds(seconds + 20));
}

absl::StatusOr<double> Iperf3::Run(const std::vector<std::string>& args,
                                   absl::Duration timeout) {
  std::vector<std::string> argv = {
      binary_, "-c", "127.0.0.1", "-p", absl::StrCat(port_), "-l", "1M", "-J"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<Finished> f = RunCapture(argv, timeout);
  if (!f.ok()) return f.status();
  nlohmann::json j = nlohmann::json::parse(f->output, nullptr, false);
  if (f->exit_code != 0 || j.is_discarded() || !j.contains("end") ||
      !j["end"].contains("sum_received")) {
    std::string why = j.is_discarded() || !j.contains("error")
                          ? f->output.substr(0, 200)
                          : j["error"].get<std::string>();
    return absl::UnavailableError(absl::StrCat("iperf3 failed: ", why));
  }
  return j["end"]["sum_received"]["bits_per_second"].get<double>() / 8;
}

class GrpcStream::Service final
    : public pstrain::bench::v1::BlobStream::Service {
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
    const uint64_t msg = std::clamp<uint64_t>(request->message_bytes(), 1,
                                              kMaxGrpcMessageBytes / 2);
    Blob blob;
    blob.mutable_data()->assign(msg, '\x5a');
    for (uint64_t sent = 0; sent < request->total_bytes(); sent += msg) {
      if (context->IsCancelled()) return grpc::Status::CANCELLED;
      if (request->total_bytes() - sent < msg) {
        blob.mutable_data()->resize(request->total_bytes() - sent);
      }
      if (!writer->Write(blob)) return grpc::Status::CANCELLED;
    }
    return grpc::Status::OK;
  }
};

GrpcStream::GrpcStream(GrpcStreamOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<GrpcStream>> GrpcStream::Start(
    GrpcStreamOptions options) {
  std::unique_ptr<GrpcStream> s(new GrpcStream(std::move(options)));
  s->service_ = std::make_unique<Service>();
  absl::StatusOr<StartedServer> started =
      StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(),
                      {s->service_.get()}, s->options_.server_args);
  if (!started.ok()) return started.status();
  s->server_ = std::move(started->server);
  const std::string address = absl::StrCat("127.0.0.1:", started->port);
  std::shared_ptr<grpc::Channel> channel;
  if (s->options_.client_args.empty()) {
    channel = MakeChannel(address);
  } else {
    grpc::ChannelArguments args = DefaultChannelArgs();
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    for (const auto& [key, value] : s->options_.client_args) {
      args.SetInt(key, value);
    }
    channel = grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args);
  }
  s->stub_ = pstrain::bench::v1::BlobStream::NewStub(channel);
  return s;
}

GrpcStream::~GrpcStream() {
  if (server_) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
}

absl::StatusOr<double> GrpcStream::Upload(uint64_t bytes) {
  Blob blob;
  const uint64_t message_bytes = options_.message_bytes;
  blob.mutable_data()->assign(message_bytes, '\x5a');
  grpc::ClientContext context;
  SetTimeout(&context, absl::Seconds(120));
  UploadResponse response;
  const absl::Time start = absl::Now();
  std::unique_ptr<grpc::ClientWriter<Blob>> writer =
      stub_->Upload(&context, &response);
  for (uint64_t sent = 0; sent < bytes; sent += message_bytes) {
    if (bytes - sent < message_bytes) blob.mutable_data()->resize(bytes - sent);
    if (!writer->Write(blob)) break;
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  const double s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!status.ok() || response.bytes() != bytes) {
    return absl::UnavailableError(
        absl::StrCat("gRPC upload: ", status.error_message(), " (",
                     response.bytes(), " of ", bytes, " bytes)"));
  }
  return bytes / s;
}

absl::StatusOr<double> GrpcStream::Download(uint64_t bytes) {
  DownloadRequest request;
  request.set_total_bytes(bytes);
  request.set_message_bytes(options_.message_bytes);
  grpc::ClientContext context;
  SetTimeout(&context, absl::Seconds(120));
  const absl::Time start = absl::Now();
  std::unique_ptr<grpc::ClientReader<Blob>> reader =
      stub_->Download(&context, request);
  Blob blob;
  uint64_t got = 0;
  while (reader->Read(&blob)) got += blob.data().size();
  grpc::Status status = reader->Finish();
  const double s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!status.ok() || got != bytes) {
    return absl::UnavailableError(
        absl::StrCat("gRPC download: ", status.error_message(), " (", got,
                     " of ", bytes, " bytes)"));
  }
  return bytes / s;
}

namespace {

// StepsTimed(steps) transfers of `bytes` timed one by one (seconds = bytes /
// rate).
absl::StatusOr<SteadyRate> Steady(
    uint64_t bytes, int steps,
    const std::function<absl::StatusOr<double>(uint64_t)>& once) {
  std::vector<double> seconds;
  for (int i = 0; i < StepsTimed(steps); ++i) {
    absl::StatusOr<double> rate = once(bytes);
    if (!rate.ok()) return rate.status();
    seconds.push_back(bytes / *rate);
  }
  return SettledRateOf(bytes, seconds);
}

}  // namespace

absl::StatusOr<SteadyRate> GrpcStream::UploadSteady(uint64_t bytes, int steps) {
  return Steady(bytes, steps, [this](uint64_t b) { return Upload(b); });
}

absl::StatusOr<SteadyRate> GrpcStream::DownloadSteady(uint64_t bytes,
                                                      int steps) {
  return Steady(bytes, steps, [this](uint64_t b) { return Download(b); });
}

}  // namespace pstrain::bench
