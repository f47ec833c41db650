#include "tools/bench/wire.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

namespace {

// A download's messages: request.total_bytes() in messages of
// request.message_bytes() (clamped to what gRPC sends), the last one
// shorter, all served from one reused Blob.
class DownloadMessages {
 public:
  explicit DownloadMessages(const DownloadRequest& request)
      : total_(request.total_bytes()),
        message_(std::clamp<uint64_t>(request.message_bytes(), 1,
                                      kMaxGrpcMessageBytes / 2)) {
    blob_.mutable_data()->assign(message_, '\x5a');
  }
  // The next message, or null once every byte was handed out; it stays
  // unchanged until the next call (a write in flight may still read it).
  const Blob* Next() {
    if (sent_ >= total_) return nullptr;
    const uint64_t n = std::min(message_, total_ - sent_);
    if (blob_.data().size() != n) blob_.mutable_data()->resize(n);
    sent_ += n;
    return &blob_;
  }

 private:
  const uint64_t total_;
  const uint64_t message_;
  uint64_t sent_ = 0;
  Blob blob_;
};

}  // namespace

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
    DownloadMessages messages(*request);
    while (const Blob* blob = messages.Next()) {
      if (context->IsCancelled()) return grpc::Status::CANCELLED;
      if (!writer->Write(*blob)) return grpc::Status::CANCELLED;
    }
    return grpc::Status::OK;
  }
};

// The same two methods on the callback API: each call is a reactor that
// starts its next read (write) from the reaction to the last one.
class GrpcStream::ReactorService final
    : public pstrain::bench::v1::BlobStream::CallbackService {
 public:
  grpc::ServerReadReactor<Blob>* Upload(grpc::CallbackServerContext*,
                                        UploadResponse* response) override {
    return new UploadReactor(response);
  }
  grpc::ServerWriteReactor<Blob>* Download(
      grpc::CallbackServerContext*, const DownloadRequest* request) override {
    return new DownloadReactor(*request);
  }

 private:
  class UploadReactor : public grpc::ServerReadReactor<Blob> {
   public:
    explicit UploadReactor(UploadResponse* response) : response_(response) {
      StartRead(&blob_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {  // the half-close (or a broken stream: Finish is ignored)
        response_->set_bytes(bytes_);
        Finish(grpc::Status::OK);
        return;
      }
      bytes_ += blob_.data().size();
      StartRead(&blob_);
    }
    void OnDone() override { delete this; }

   private:
    UploadResponse* const response_;
    Blob blob_;
    uint64_t bytes_ = 0;
  };

  class DownloadReactor : public grpc::ServerWriteReactor<Blob> {
   public:
    explicit DownloadReactor(const DownloadRequest& request)
        : messages_(request) {
      Next();
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::CANCELLED);
        return;
      }
      Next();
    }
    void OnDone() override { delete this; }

   private:
    void Next() {
      if (const Blob* blob = messages_.Next()) {
        StartWrite(blob);
      } else {
        Finish(grpc::Status::OK);
      }
    }

    DownloadMessages messages_;
  };
};

// The same two methods on the completion-queue API, served by one thread
// that polls the queue and runs each call's next step. Every call object is
// the tag of its one operation in flight and deletes itself at its end.
class GrpcStream::QueueServer {
 public:
  pstrain::bench::v1::BlobStream::AsyncService service;
  std::unique_ptr<grpc::ServerCompletionQueue> queue;

  // Asks for the first call of each method and starts the thread; after
  // the server started.
  void Run() {
    {
      absl::MutexLock lock(&mu_);
      new UploadCall(this);
      new DownloadCall(this);
    }
    thread_ = std::thread([this] {
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(ok);
    });
  }

  // After the server's Shutdown and before the server is destroyed: no new
  // call is asked for, the queue shuts down, and the thread (or this, if
  // Run never started it) drains it, every call's last event, and exits.
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || queue == nullptr) return;
      stopping_ = true;
      queue->Shutdown();
    }
    if (thread_.joinable()) {
      thread_.join();
      return;
    }
    void* tag = nullptr;
    bool ok = false;
    while (queue->Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(ok);
  }
  ~QueueServer() { Stop(); }

 private:
  struct Call {
    virtual ~Call() = default;
    virtual void Proceed(bool ok) = 0;
  };

  // A matched call asks for the next one, unless the server is stopping (a
  // request on a shut-down queue is an error).
  template <class C>
  void AskForAnother() {
    absl::MutexLock lock(&mu_);
    if (!stopping_) new C(this);
  }

  class UploadCall : public Call {
   public:
    explicit UploadCall(QueueServer* server) : server_(server) {
      server->service.RequestUpload(&context_, &reader_, server->queue.get(),
                                    server->queue.get(), this);
    }
    void Proceed(bool ok) override {
      switch (state_) {
        case State::kAsked:
          if (!ok) break;  // the server is shutting down
          server_->AskForAnother<UploadCall>();
          state_ = State::kReading;
          reader_.Read(&blob_, this);
          return;
        case State::kReading:
          if (ok) {
            bytes_ += blob_.data().size();
            reader_.Read(&blob_, this);
            return;
          }
          response_.set_bytes(bytes_);
          state_ = State::kFinishing;
          reader_.Finish(response_, grpc::Status::OK, this);
          return;
        case State::kFinishing:
          break;
      }
      delete this;
    }

   private:
    enum class State { kAsked, kReading, kFinishing };
    QueueServer* const server_;
    grpc::ServerContext context_;
    grpc::ServerAsyncReader<UploadResponse, Blob> reader_{&context_};
    State state_ = State::kAsked;
    Blob blob_;
    uint64_t bytes_ = 0;
    UploadResponse response_;
  };

  class DownloadCall : public Call {
   public:
    explicit DownloadCall(QueueServer* server) : server_(server) {
      server->service.RequestDownload(&context_, &request_, &writer_,
                                      server->queue.get(), server->queue.get(),
                                      this);
    }
    void Proceed(bool ok) override {
      switch (state_) {
        case State::kAsked:
          if (!ok) break;
          server_->AskForAnother<DownloadCall>();
          messages_.emplace(request_);
          state_ = State::kWriting;
          Next();
          return;
        case State::kWriting:
          if (ok) {
            Next();
          } else {
            state_ = State::kFinishing;
            writer_.Finish(grpc::Status::CANCELLED, this);
          }
          return;
        case State::kFinishing:
          break;
      }
      delete this;
    }

   private:
    enum class State { kAsked, kWriting, kFinishing };
    void Next() {
      if (const Blob* blob = messages_->Next()) {
        writer_.Write(*blob, this);
      } else {
        state_ = State::kFinishing;
        writer_.Finish(grpc::Status::OK, this);
      }
    }

    QueueServer* const server_;
    grpc::ServerContext context_;
    DownloadRequest request_;
    grpc::ServerAsyncWriter<Blob> writer_{&context_};
    State state_ = State::kAsked;
    std::optional<DownloadMessages> messages_;  // once the request is in
  };

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

GrpcStream::GrpcStream(GrpcStreamOptions options)
    : options_(std::move(options)) {}

// StartGrpcServer's settings (common/grpc_util.h) with a completion queue,
// which it does not offer.
absl::Status GrpcStream::StartQueueServer(int* port) {
  queue_ = std::make_unique<QueueServer>();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           port);
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (const auto& [key, value] : options_.server_args) {
    builder.AddChannelArgument(key, value);
  }
  builder.RegisterService(&queue_->service);
  queue_->queue = builder.AddCompletionQueue();
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || *port == 0) {
    if (server_ != nullptr) server_->Shutdown();
    queue_->Stop();
    return absl::UnavailableError("cannot listen on 127.0.0.1:0");
  }
  queue_->Run();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GrpcStream>> GrpcStream::Start(
    GrpcStreamOptions options) {
  std::unique_ptr<GrpcStream> s(new GrpcStream(std::move(options)));
  int port = 0;
  if (s->options_.server_api == GrpcServerApi::kCompletionQueue) {
    if (absl::Status st = s->StartQueueServer(&port); !st.ok()) return st;
  } else {
    if (s->options_.server_api == GrpcServerApi::kCallback) {
      s->service_ = std::make_unique<ReactorService>();
    } else {
      s->service_ = std::make_unique<Service>();
    }
    absl::StatusOr<StartedServer> started =
        StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(),
                        {s->service_.get()}, s->options_.server_args);
    if (!started.ok()) return started.status();
    s->server_ = std::move(started->server);
    port = started->port;
  }
  const std::string address = absl::StrCat("127.0.0.1:", port);
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
  // The queue drained after the server's Shutdown and before the server
  // goes, and destroyed after it.
  if (queue_) queue_->Stop();
  server_.reset();
  queue_.reset();
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
