#include "tools/bench/wire.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/timeline.h"

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

absl::StatusOr<double> Iperf3::Measure(int seconds,
                                       const std::string& congestion_control) {
  seconds = std::max(seconds, 1);
  std::vector<std::string> args = {"-t", absl::StrCat(seconds)};
  if (!congestion_control.empty()) {
    args.insert(args.end(), {"-C", congestion_control});
  }
  return Run(args, absl::Seconds(seconds + 20));
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
// shorter, all served from one reused Blob. In a session (DownloadSession)
// the last message is marked last, and an empty transfer is one empty
// message so marked.
class DownloadMessages {
 public:
  DownloadMessages(const DownloadRequest& request, bool session = false)
      : total_(request.total_bytes()),
        message_(std::clamp<uint64_t>(request.message_bytes(), 1,
                                      kMaxGrpcMessageBytes / 2)),
        session_(session) {
    blob_.mutable_data()->assign(message_, '\x5a');
  }
  // The next message, or null once every byte was handed out; it stays
  // unchanged until the next call (a write in flight may still read it).
  const Blob* Next() {
    if (sent_ >= total_ && !(session_ && total_ == 0 && !any_sent_)) {
      return nullptr;
    }
    const uint64_t n = std::min(message_, total_ - sent_);
    if (blob_.data().size() != n) blob_.mutable_data()->resize(n);
    sent_ += n;
    any_sent_ = true;
    if (session_ && sent_ == total_) blob_.set_last(true);
    return &blob_;
  }

 private:
  const uint64_t total_;
  const uint64_t message_;
  const bool session_;
  uint64_t sent_ = 0;
  bool any_sent_ = false;
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
  grpc::Status UploadSession(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<UploadResponse, Blob>* stream) override {
    Blob blob;
    UploadResponse ack;
    uint64_t bytes = 0;
    while (stream->Read(&blob)) {
      bytes += blob.data().size();
      if (!blob.last()) continue;
      ack.set_bytes(bytes);
      bytes = 0;
      if (!stream->Write(ack)) return grpc::Status::CANCELLED;
    }
    return grpc::Status::OK;
  }
  grpc::Status DownloadSession(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<Blob, DownloadRequest>* stream) override {
    DownloadRequest request;
    while (stream->Read(&request)) {
      DownloadMessages messages(request, /*session=*/true);
      while (const Blob* blob = messages.Next()) {
        if (context->IsCancelled()) return grpc::Status::CANCELLED;
        if (!stream->Write(*blob)) return grpc::Status::CANCELLED;
      }
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
  grpc::ServerBidiReactor<Blob, UploadResponse>* UploadSession(
      grpc::CallbackServerContext*) override {
    return new UploadSessionReactor();
  }
  grpc::ServerBidiReactor<DownloadRequest, Blob>* DownloadSession(
      grpc::CallbackServerContext*) override {
    return new DownloadSessionReactor();
  }

 private:
  class UploadReactor : public grpc::ServerReadReactor<Blob> {
   public:
    explicit UploadReactor(UploadResponse* response) : response_(response) {
      TimelineMark("bare.srv.opened");
      StartRead(&blob_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {  // the half-close (or a broken stream: Finish is ignored)
        TimelineMark("bare.srv.half_closed");
        response_->set_bytes(bytes_);
        Finish(grpc::Status::OK);
        return;
      }
      TimelineMark("bare.srv.read", blob_.data().size());
      bytes_ += blob_.data().size();
      StartRead(&blob_);
    }
    void OnDone() override {
      TimelineMark("bare.srv.done");
      delete this;
    }

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

  // Reads run on while an answer is written: the answers wait in a queue
  // (one write in flight), and the call finishes once the reads ended and
  // no write is left.
  class UploadSessionReactor
      : public grpc::ServerBidiReactor<Blob, UploadResponse> {
   public:
    UploadSessionReactor() { StartRead(&blob_); }
    void OnReadDone(bool ok) override {
      if (!ok) {  // the half-close, or a broken stream
        absl::MutexLock lock(&mu_);
        reads_done_ = true;
        MaybeFinish();
        return;
      }
      bytes_ += blob_.data().size();
      if (blob_.last()) {
        absl::MutexLock lock(&mu_);
        answers_.push_back(bytes_);
        if (!writing_) WriteNext();
        bytes_ = 0;
      }
      StartRead(&blob_);
    }
    void OnWriteDone(bool ok) override {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) answers_.clear();  // the stream broke: the reads end too
      WriteNext();
      MaybeFinish();
    }
    void OnDone() override { delete this; }

   private:
    void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (answers_.empty()) return;
      answer_.set_bytes(answers_.front());
      answers_.erase(answers_.begin());
      writing_ = true;
      StartWrite(&answer_);
    }
    void MaybeFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (reads_done_ && !writing_ && !finished_) {
        finished_ = true;
        Finish(grpc::Status::OK);
      }
    }

    Blob blob_;  // the reads' (one at a time)
    uint64_t bytes_ = 0;
    absl::Mutex mu_;
    std::vector<uint64_t> answers_ ABSL_GUARDED_BY(mu_);
    UploadResponse answer_ ABSL_GUARDED_BY(mu_);
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
  };

  // One request at a time: its messages are written one after the other,
  // and the next request is read once the last was written.
  class DownloadSessionReactor
      : public grpc::ServerBidiReactor<DownloadRequest, Blob> {
   public:
    DownloadSessionReactor() { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      messages_.emplace(request_, /*session=*/true);
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
      if (const Blob* blob = messages_->Next()) {
        StartWrite(blob);
      } else {
        StartRead(&request_);
      }
    }

    DownloadRequest request_;
    std::optional<DownloadMessages> messages_;  // the request's
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

namespace {

// Ends a session's call, if one is open: the half-close, the server's
// answers still on their way read and dropped, then its status.
template <class W, class R>
grpc::Status EndSession(
    std::unique_ptr<grpc::ClientReaderWriter<W, R>>* session) {
  if (*session == nullptr) return grpc::Status::OK;
  (*session)->WritesDone();
  R rest;
  while ((*session)->Read(&rest)) {
  }
  const grpc::Status status = (*session)->Finish();
  session->reset();
  return status;
}

}  // namespace

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

absl::Status GrpcStream::StartServer() {
  if (options_.server_api == GrpcServerApi::kCompletionQueue) {
    return StartQueueServer(&port_);
  }
  if (options_.server_api == GrpcServerApi::kCallback) {
    service_ = std::make_unique<ReactorService>();
  } else {
    service_ = std::make_unique<Service>();
  }
  absl::StatusOr<StartedServer> started =
      StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(),
                      {service_.get()}, options_.server_args);
  if (!started.ok()) return started.status();
  server_ = std::move(started->server);
  port_ = started->port;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GrpcStream>> GrpcStream::Serve(
    GrpcStreamOptions options) {
  std::unique_ptr<GrpcStream> s(new GrpcStream(std::move(options)));
  if (absl::Status st = s->StartServer(); !st.ok()) return st;
  return s;
}

absl::StatusOr<std::unique_ptr<GrpcStream>> GrpcStream::Start(
    GrpcStreamOptions options) {
  // A served stream (server_address) is told its server's API too.
  if (options.session &&
      options.server_api == GrpcServerApi::kCompletionQueue) {
    return absl::InvalidArgumentError(
        "a bare stream's sessions are served by the synchronous and callback "
        "APIs only, not the completion queue");
  }
  std::unique_ptr<GrpcStream> s(new GrpcStream(std::move(options)));
  std::string address = s->options_.server_address;
  if (address.empty()) {
    if (absl::Status st = s->StartServer(); !st.ok()) return st;
    address = absl::StrCat("127.0.0.1:", s->port_);
  }
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
  // The sessions end first (half-close, the server's end), so the server's
  // shutdown waits for no call.
  EndSession(&upload_session_);
  EndSession(&download_session_);
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
  if (stub_ == nullptr) {
    return absl::FailedPreconditionError("a served stream has no client");
  }
  if (options_.session) return UploadInSession(bytes);
  Blob blob;
  const uint64_t message_bytes = options_.message_bytes;
  blob.mutable_data()->assign(message_bytes, '\x5a');
  grpc::ClientContext context;
  SetTimeout(&context, absl::Seconds(120));
  UploadResponse response;
  const absl::Time start = absl::Now();
  TimelineMark("bare.up.start");
  std::unique_ptr<grpc::ClientWriter<Blob>> writer =
      stub_->Upload(&context, &response);
  TimelineMark("bare.up.opened");
  for (uint64_t sent = 0; sent < bytes; sent += message_bytes) {
    if (bytes - sent < message_bytes) blob.mutable_data()->resize(bytes - sent);
    const bool written = writer->Write(blob);
    TimelineMark("bare.up.written", blob.data().size());
    if (!written) break;
  }
  writer->WritesDone();
  TimelineMark("bare.up.half_closed");
  grpc::Status status = writer->Finish();
  TimelineMark("bare.up.answered");
  const double s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!status.ok() || response.bytes() != bytes) {
    return absl::UnavailableError(
        absl::StrCat("gRPC upload: ", status.error_message(), " (",
                     response.bytes(), " of ", bytes, " bytes)"));
  }
  return bytes / s;
}

absl::StatusOr<double> GrpcStream::Download(uint64_t bytes) {
  if (stub_ == nullptr) {
    return absl::FailedPreconditionError("a served stream has no client");
  }
  if (options_.session) return DownloadInSession(bytes);
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

// A session's one call is bounded as a whole: far longer than any bench
// keeps it, so only a stalled server ends it.
constexpr absl::Duration kSessionLimit = absl::Hours(1);

absl::StatusOr<double> GrpcStream::UploadInSession(uint64_t bytes) {
  if (upload_session_ == nullptr) {
    upload_context_ = std::make_unique<grpc::ClientContext>();
    SetTimeout(upload_context_.get(), kSessionLimit);
    upload_session_ = stub_->UploadSession(upload_context_.get());
  }
  Blob blob;
  const uint64_t message_bytes = options_.message_bytes;
  blob.mutable_data()->assign(std::min(message_bytes, bytes), '\x5a');
  UploadResponse answer;
  const absl::Time start = absl::Now();
  bool ok = true;
  uint64_t sent = 0;
  do {
    const uint64_t n = std::min(message_bytes, bytes - sent);
    if (blob.data().size() != n) blob.mutable_data()->resize(n);
    sent += n;
    blob.set_last(sent == bytes);
    ok = upload_session_->Write(blob);
  } while (ok && sent < bytes);
  ok = ok && upload_session_->Read(&answer);
  const double s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!ok || answer.bytes() != bytes) {
    const grpc::Status status = EndSession(&upload_session_);
    return absl::UnavailableError(
        absl::StrCat("gRPC upload session: ", status.error_message(), " (",
                     ok ? answer.bytes() : 0, " of ", bytes, " bytes)"));
  }
  return bytes / s;
}

absl::StatusOr<double> GrpcStream::DownloadInSession(uint64_t bytes) {
  if (download_session_ == nullptr) {
    download_context_ = std::make_unique<grpc::ClientContext>();
    SetTimeout(download_context_.get(), kSessionLimit);
    download_session_ = stub_->DownloadSession(download_context_.get());
  }
  DownloadRequest request;
  request.set_total_bytes(bytes);
  request.set_message_bytes(options_.message_bytes);
  Blob blob;
  uint64_t got = 0;
  const absl::Time start = absl::Now();
  bool ok = download_session_->Write(request);
  bool last = false;
  while (ok && !last) {
    ok = download_session_->Read(&blob);
    got += ok ? blob.data().size() : 0;
    last = ok && blob.last();
  }
  const double s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!ok || got != bytes) {
    const grpc::Status status = EndSession(&download_session_);
    return absl::UnavailableError(
        absl::StrCat("gRPC download session: ", status.error_message(), " (",
                     got, " of ", bytes, " bytes)"));
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
