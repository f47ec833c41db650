#include "tests/stranger/stranger.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {
namespace stranger {
namespace {

constexpr char kPush[] = "/pstrain.v1.ParameterServer/Push";
constexpr char kPull[] = "/pstrain.v1.ParameterServer/Pull";
constexpr char kGetStats[] = "/pstrain.v1.ParameterServer/GetStats";
constexpr char kShutdown[] = "/pstrain.v1.ParameterServer/Shutdown";
constexpr char kCheckpoint[] = "/pstrain.v1.ParameterServer/Checkpoint";
constexpr char kRollback[] = "/pstrain.v1.ParameterServer/Rollback";
constexpr char kRegisterServer[] = "/pstrain.v1.Coordinator/RegisterServer";
constexpr char kGetJob[] = "/pstrain.v1.Coordinator/GetJob";
constexpr char kServerReady[] = "/pstrain.v1.Coordinator/ServerReady";
constexpr char kRegisterWorker[] = "/pstrain.v1.Coordinator/RegisterWorker";
constexpr char kReport[] = "/pstrain.v1.Coordinator/Report";
constexpr char kJobStatus[] = "/pstrain.v1.Coordinator/JobStatus";
constexpr char kGetPeers[] = "/pstrain.v1.Coordinator/GetPeers";
constexpr char kGetWorkerSessions[] =
    "/pstrain.v1.Coordinator/GetWorkerSessions";
constexpr char kReleaseRank[] = "/pstrain.v1.Coordinator/ReleaseRank";
constexpr char kSendSegments[] = "/pstrain.v1.RingPeer/SendSegments";
constexpr char kHealthPrefix[] = "/grpc.health.v1.Health/";
constexpr char kHealthCheck[] = "/grpc.health.v1.Health/Check";
constexpr char kHealthWatch[] = "/grpc.health.v1.Health/Watch";

// Metadata names from docs/security.md.
constexpr char kTokenKey[] = "x-pstrain-token";
constexpr char kRoleKey[] = "x-pstrain-role";
constexpr char kPushSessionKey[] = "x-pstrain-push-session";

constexpr int kChannelsPerTarget = 4;  // each its own HTTP/2 connection
constexpr size_t kMaxJunkMessageBytes = 64 << 10;
constexpr size_t kReportErrorBytes = 900 << 10;
constexpr size_t kLongAddressBytes = 64 << 10;
constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";  // 24 bytes
constexpr absl::Duration kDrainTimeout = absl::Seconds(10);
constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

enum class Action {
  kIdleStream,
  kJunkStream,
  kFakePush,
  kFakeSegment,
  kHealthCheck,
  kHealthWatch,
  kRollback,
  kCheckpoint,
  kShutdown,
  kGetStats,
  kJobStatus,
  kReport,
  kRegisterServer,
  kRegisterWorker,
  kGetJob,
  kServerReady,
  kGetWorkerSessions,
  kGetPeers,
  kReleaseRank,
  kRawPreface,
};
// Relative weights, in Action's order.
const std::vector<double>& ActionWeights() {
  static const auto* weights = new std::vector<double>{
      20, 20, 8, 5, 2, 3, 5, 4, 4, 3, 5, 3, 4, 3, 2, 2, 2, 2, 2, 5};
  return *weights;
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

class Target;
// The generated stubs' callback interfaces.
using PsAsync = v1::ParameterServer::StubInterface::async_interface;
using CoordAsync = v1::Coordinator::StubInterface::async_interface;

// One call in flight. Owned by its Target, which deletes it only after
// gRPC reported its end (Done) and only on the driver thread.
class Call {
 public:
  Call(Target* owner, std::string method, bool watch)
      : owner_(owner), method_(std::move(method)), watch_(watch) {}
  virtual ~Call() = default;
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  grpc::ClientContext* context() { return &context_; }
  const std::string& method() const { return method_; }
  bool watch() const { return watch_; }

 protected:
  void Done(const grpc::Status& status);

 private:
  Target* const owner_;
  const std::string method_;  // outlives the call (gRPC keeps its c_str())
  const bool watch_;
  grpc::ClientContext context_;
};

// Any stream (or unary call) as raw messages: writes `messages`, then
// half-closes if asked, reads whatever comes until the call ends.
class StreamCall final
    : public Call,
      public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamCall(Target* owner, std::string method, bool watch,
             std::vector<grpc::ByteBuffer> messages, bool half_close)
      : Call(owner, std::move(method), watch),
        messages_(std::move(messages)),
        half_close_(half_close) {}

  void Start(grpc::GenericStub* stub) {
    stub->PrepareBidiStreamingCall(context(), method(), grpc::StubOptions(),
                                   this);
    StartRead(&in_);
    if (!messages_.empty()) {
      StartWrite(&messages_[0]);
    } else if (half_close_) {
      StartWritesDone();
    }
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return;
    if (++next_ < messages_.size()) {
      StartWrite(&messages_[next_]);
    } else if (half_close_) {
      StartWritesDone();
    }
  }
  void OnReadDone(bool ok) override {
    if (ok) StartRead(&in_);
  }
  void OnDone(const grpc::Status& status) override { Done(status); }

 private:
  std::vector<grpc::ByteBuffer> messages_;
  const bool half_close_;
  size_t next_ = 0;
  grpc::ByteBuffer in_;
};

// A unary call through a generated stub.
template <typename Request, typename Response>
class UnaryCall final : public Call {
 public:
  using Call::Call;
  Request request;
  Response response;
  std::function<void(grpc::Status)> Callback() {
    return [this](grpc::Status status) { Done(status); };
  }
};

struct RawConnection {
  int fd = -1;
  absl::Time close_at;
};

struct TargetTally {
  std::map<std::string, std::map<std::string, int64_t>> by_method;
  int64_t raw_opened = 0;
  int64_t raw_refused = 0;
  int64_t skipped = 0;
  int64_t most_open = 0;
  int64_t unfinished = 0;
};

// What the stranger does to one target: the driver (Run) on one thread,
// call ends (Finished) on gRPC's threads.
class Target {
 public:
  Target(const LoopbackTarget& target, const StrangerOptions& options,
         uint64_t seed)
      : target_(target), options_(options), rng_(seed) {
    grpc::ChannelArguments args;
    // Separate connections per channel, no retries (each call counted
    // once), and reconnects at least every 2 s while a port refuses.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    for (int i = 0; i < kChannelsPerTarget; ++i) {
      auto channel = grpc::CreateCustomChannel(
          target.GrpcAddress(), grpc::InsecureChannelCredentials(), args);
      generic_.push_back(std::make_unique<grpc::GenericStub>(channel));
      ps_.push_back(v1::ParameterServer::NewStub(channel));
      coordinator_.push_back(v1::Coordinator::NewStub(channel));
    }
    report_error_ = Letters(kReportErrorBytes);
    long_address_ = Letters(kLongAddressBytes) + ":1";
  }

  // Acts until `end`, then cancels every open call and closes every
  // connection; waits up to kDrainTimeout for the calls to end. Calls that
  // did not are counted as unfinished and left alive (so is this object:
  // see RunStranger).
  void Run(absl::Time end) {
    std::discrete_distribution<int> pick(ActionWeights().begin(),
                                         ActionWeights().end());
    const absl::Duration period =
        absl::Seconds(1) / options_.actions_per_second;
    absl::Time next = absl::Now();
    for (absl::Time now = next; now < end; now = absl::Now()) {
      DeleteFinished();
      CloseRaw(now);
      if (now >= next) {
        Act(static_cast<Action>(pick(rng_)));
        // No catching up in bursts after a stall.
        next = std::max(next + period, now - absl::Seconds(1));
        continue;
      }
      absl::SleepFor(std::min({next - now, end - now, absl::Milliseconds(50)}));
    }
    std::vector<Call*> open;
    {
      absl::MutexLock lock(&mu_);
      open.assign(in_flight_.begin(), in_flight_.end());
    }
    // Only this thread deletes calls: the pointers stay valid unlocked.
    for (Call* call : open) call->context()->TryCancel();
    CloseRaw(absl::InfiniteFuture());
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(
          absl::Condition(
              +[](std::set<Call*>* s) { return s->empty(); }, &in_flight_),
          kDrainTimeout);
      tally_.unfinished = in_flight_.size();
    }
    DeleteFinished();
  }

  // Called by gRPC once per call, when it ended.
  void Finished(Call* call, const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    in_flight_.erase(call);
    if (call->watch()) --open_watches_;
    finished_.push_back(call);
    ++tally_.by_method[call->method()][StatusCodeName(status.error_code())];
  }

  TargetTally tally() {
    absl::MutexLock lock(&mu_);
    return tally_;
  }
  bool drained() {
    absl::MutexLock lock(&mu_);
    return in_flight_.empty();
  }

 private:
  void Act(Action action) {
    switch (action) {
      case Action::kIdleStream: {
        static const char* const kMethods[] = {kPush, kPull, kSendSegments};
        Stream(kMethods[Uniform(0, 2)], {}, /*half_close=*/false, Hold(0.5, 5));
        return;
      }
      case Action::kJunkStream: {
        static const char* const kMethods[] = {kPush, kSendSegments, kPull};
        std::vector<grpc::ByteBuffer> messages;
        for (int i = Uniform(1, 4); i > 0; --i) {
          messages.push_back(ToBuffer(Bytes(Uniform(1, kMaxJunkMessageBytes))));
        }
        Stream(kMethods[Uniform(0, 2)], std::move(messages),
               /*half_close=*/Uniform(0, 1) == 1, Hold(0.5, 5));
        return;
      }
      case Action::kFakePush:
        return FakePush();
      case Action::kFakeSegment: {
        v1::RingSegment segment;
        segment.set_step(kMax64);
        segment.set_phase(v1::REDUCE_SCATTER);
        segment.set_chunk(Uniform(0, 1 << 20));
        segment.set_offset(kMax64 - 7);
        segment.set_from_rank(Uniform(0, 3));
        segment.set_session_id(rng_());
        segment.set_data(Bytes(Uniform(1, 4096)));
        Stream(kSendSegments, {ToBuffer(segment.SerializeAsString())},
               /*half_close=*/Uniform(0, 1) == 1, Hold(0.5, 5));
        return;
      }
      case Action::kHealthCheck:
        // HealthCheckRequest{service: ""} is the empty message.
        Stream(kHealthCheck, {ToBuffer("")}, /*half_close=*/true, Hold(1, 5));
        return;
      case Action::kHealthWatch:
        Stream(kHealthWatch, {ToBuffer("")}, /*half_close=*/true, Hold(1, 10),
               /*watch=*/true);
        return;
      case Action::kRollback: {
        v1::RollbackRequest r;
        r.set_generation(kMax64);
        r.set_checkpoint("/etc");
        r.set_step(rng_());
        return Unary(kRollback, Ps(), &PsAsync::Rollback, r);
      }
      case Action::kCheckpoint: {
        v1::CheckpointRequest r;
        r.set_step(Uniform(0, 1000));
        return Unary(kCheckpoint, Ps(), &PsAsync::Checkpoint, r);
      }
      case Action::kShutdown: {
        v1::ShutdownRequest r;
        r.set_reason("a stranger says so");
        return Unary(kShutdown, Ps(), &PsAsync::Shutdown, r);
      }
      case Action::kGetStats:
        return Unary(kGetStats, Ps(), &PsAsync::GetStats,
                     v1::ShardStatsRequest());
      case Action::kJobStatus: {
        v1::JobStatusRequest r;  // anonymous, or naming a process
        if (Uniform(0, 1) == 1) {
          r.set_process(Uniform(0, 1) ? "worker" : "server");
          r.set_id(Uniform(0, 3));
          r.set_step(rng_());
        }
        r.set_session_id(0);
        return Unary(kJobStatus, Coord(), &CoordAsync::JobStatus, r);
      }
      case Action::kReport: {
        v1::ReportRequest r;
        r.set_worker(Uniform(0, 3));
        r.set_session_id(rng_());
        r.set_done(true);
        r.set_error(report_error_);
        v1::StepMetrics* step = r.add_steps();
        step->set_step(kMax64);
        step->set_loss(-1e308);
        return Unary(kReport, Coord(), &CoordAsync::Report, r);
      }
      case Action::kRegisterServer: {
        v1::RegisterServerRequest r;
        r.set_address(long_address_);
        r.set_requested_shard(Uniform(-1, 3));
        return Unary(kRegisterServer, Coord(), &CoordAsync::RegisterServer, r);
      }
      case Action::kRegisterWorker: {
        v1::RegisterWorkerRequest r;
        r.set_requested_rank(Uniform(-1, 3));
        r.set_peer_address(long_address_);
        r.set_adopt(Uniform(0, 1) == 1);
        r.set_adopt_from_step(kMax64);
        return Unary(kRegisterWorker, Coord(), &CoordAsync::RegisterWorker, r);
      }
      case Action::kGetJob:
        return Unary(kGetJob, Coord(), &CoordAsync::GetJob,
                     v1::GetJobRequest());
      case Action::kServerReady: {
        v1::ServerReadyRequest r;
        r.set_shard(Uniform(0, 3));
        r.set_session_id(rng_());
        return Unary(kServerReady, Coord(), &CoordAsync::ServerReady, r);
      }
      case Action::kGetWorkerSessions: {
        v1::GetWorkerSessionsRequest r;
        r.set_shard(Uniform(0, 3));
        r.set_session_id(rng_());
        return Unary(kGetWorkerSessions, Coord(),
                     &CoordAsync::GetWorkerSessions, r);
      }
      case Action::kGetPeers: {
        v1::GetPeersRequest r;
        r.set_rank(Uniform(0, 3));
        r.set_session_id(rng_());
        return Unary(kGetPeers, Coord(), &CoordAsync::GetPeers, r);
      }
      case Action::kReleaseRank: {
        v1::ReleaseRankRequest r;
        r.set_rank(Uniform(0, 3));
        r.set_session_id(rng_());
        r.set_next_step(kMax64);
        return Unary(kReleaseRank, Coord(), &CoordAsync::ReleaseRank, r);
      }
      case Action::kRawPreface:
        return RawPreface();
    }
  }

  // A push that looks like a worker's: a made-up session (in the metadata
  // and the header), a chunk whose shape and size disagree.
  void FakePush() {
    const uint32_t worker = Uniform(0, 3);
    const uint64_t session = rng_();
    v1::PushRequest push;
    v1::PushHeader* header = push.mutable_header();
    header->set_worker(worker);
    header->set_clock(rng_() % 1000);
    header->set_session_id(session);
    header->set_num_samples(kMax64);
    header->set_parts(Uniform(0, 9));
    v1::ChunkData* chunk = push.add_chunks();
    chunk->set_tensor(Letters(Uniform(1, 64)));
    chunk->set_index(Uniform(0, 1 << 20));
    chunk->set_dtype(v1::DTYPE_F32);
    chunk->add_shape(int64_t{1} << 40);
    chunk->set_data(Bytes(Uniform(0, 4096)));
    Stream(kPush, {ToBuffer(push.SerializeAsString())},
           /*half_close=*/Uniform(0, 1) == 1, Hold(0.5, 5), /*watch=*/false,
           absl::StrCat(worker, ".", session, ".0"));
  }

  void Stream(const char* method, std::vector<grpc::ByteBuffer> messages,
              bool half_close, absl::Duration hold, bool watch = false,
              const std::string& push_session = "") {
    if (!Admit(watch)) return;
    auto* call =
        new StreamCall(this, method, watch, std::move(messages), half_close);
    Prepare(call, hold);
    if (!push_session.empty()) {
      call->context()->AddMetadata(kPushSessionKey, push_session);
    }
    Register(call);
    call->Start(Generic());
  }

  // Starts `rpc`, a generated stub's callback method, with `request`.
  template <typename Async, typename Request, typename Response>
  void Unary(const char* method, Async* stub,
             void (Async::*rpc)(grpc::ClientContext*, const Request*, Response*,
                                std::function<void(grpc::Status)>),
             Request request) {
    if (!Admit(/*watch=*/false)) return;
    auto* call = new UnaryCall<Request, Response>(this, method, false);
    call->request = std::move(request);
    Prepare(call, absl::Seconds(5));
    Register(call);
    (stub->*rpc)(call->context(), &call->request, &call->response,
                 call->Callback());
  }

  // Whether another call may open (counts it if so, else a skip).
  bool Admit(bool watch) {
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(in_flight_.size()) >=
            options_.max_streams_per_target ||
        (watch && open_watches_ >= options_.max_watches_per_target)) {
      ++tally_.skipped;
      return false;
    }
    if (watch) ++open_watches_;
    return true;
  }

  void Prepare(Call* call, absl::Duration hold) {
    call->context()->set_deadline(absl::ToChronoTime(absl::Now() + hold));
    if (!options_.token.empty()) {
      call->context()->AddMetadata(kTokenKey, options_.token);
      call->context()->AddMetadata(kRoleKey, "member");
    }
  }

  void Register(Call* call) {
    absl::MutexLock lock(&mu_);
    in_flight_.insert(call);
    tally_.most_open = std::max<int64_t>(tally_.most_open, in_flight_.size());
  }

  void DeleteFinished() {
    std::vector<Call*> done;
    {
      absl::MutexLock lock(&mu_);
      done.swap(finished_);
    }
    for (Call* call : done) delete call;
  }

  // An unfinished HTTP/2 connection: part of the client preface (or all of
  // it and a junk frame), then silence until close_at.
  void RawPreface() {
    if (static_cast<int>(raw_.size()) >= options_.max_raw_per_target) {
      absl::MutexLock lock(&mu_);
      ++tally_.skipped;
      return;
    }
    const int fd = Connect();
    if (fd < 0) {
      absl::MutexLock lock(&mu_);
      ++tally_.raw_refused;
      return;
    }
    std::string bytes;
    if (Uniform(0, 3) == 0) {
      bytes = std::string(kPreface) + Bytes(Uniform(1, 32));
    } else {
      bytes = std::string(kPreface, Uniform(1, sizeof(kPreface) - 2));
    }
    // Non-blocking: a full buffer only cuts the junk short.
    (void)send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    raw_.push_back({fd, absl::Now() + Hold(1, 10)});
    absl::MutexLock lock(&mu_);
    ++tally_.raw_opened;
  }

  // A TCP connection to the target, or -1 (refused, or not within 500 ms).
  int Connect() {
    sockaddr_storage address{};
    socklen_t length = 0;
    int family = AF_INET;
    if (target_.ip == "::1") {
      family = AF_INET6;
      auto* a6 = reinterpret_cast<sockaddr_in6*>(&address);
      a6->sin6_family = AF_INET6;
      a6->sin6_port = htons(target_.port);
      inet_pton(AF_INET6, "::1", &a6->sin6_addr);
      length = sizeof(*a6);
    } else {
      auto* a4 = reinterpret_cast<sockaddr_in*>(&address);
      a4->sin_family = AF_INET;
      a4->sin_port = htons(target_.port);
      inet_pton(AF_INET, "127.0.0.1", &a4->sin_addr);
      length = sizeof(*a4);
    }
    const int fd =
        socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
      if (errno != EINPROGRESS) {
        close(fd);
        return -1;
      }
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t error_length = sizeof(error);
      if (poll(&p, 1, 500) != 1 ||
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &error_length) != 0 ||
          error != 0) {
        close(fd);
        return -1;
      }
    }
    return fd;
  }

  // Closes the raw connections due by `now`.
  void CloseRaw(absl::Time now) {
    auto due = [now](const RawConnection& c) { return c.close_at <= now; };
    for (const RawConnection& c : raw_) {
      if (due(c)) close(c.fd);
    }
    raw_.erase(std::remove_if(raw_.begin(), raw_.end(), due), raw_.end());
  }

  int Uniform(int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng_);
  }
  absl::Duration Hold(double lo_s, double hi_s) {
    return absl::Seconds(
        std::uniform_real_distribution<double>(lo_s, hi_s)(rng_));
  }
  std::string Bytes(size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng_());
    return s;
  }
  // Printable junk, for proto string fields (which must be UTF-8).
  std::string Letters(size_t n) {
    std::string s(n, 'a');
    for (char& c : s) c = static_cast<char>('a' + rng_() % 26);
    return s;
  }

  size_t NextChannel() { return next_channel_++ % kChannelsPerTarget; }
  grpc::GenericStub* Generic() { return generic_[NextChannel()].get(); }
  PsAsync* Ps() { return ps_[NextChannel()]->async(); }
  CoordAsync* Coord() { return coordinator_[NextChannel()]->async(); }

  const LoopbackTarget target_;
  const StrangerOptions options_;
  // Driver thread only:
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<grpc::GenericStub>> generic_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> ps_;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> coordinator_;
  size_t next_channel_ = 0;
  std::string report_error_;
  std::string long_address_;
  std::vector<RawConnection> raw_;

  absl::Mutex mu_;
  std::set<Call*> in_flight_ ABSL_GUARDED_BY(mu_);
  int open_watches_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Call*> finished_ ABSL_GUARDED_BY(mu_);
  TargetTally tally_ ABSL_GUARDED_BY(mu_);
};

void Call::Done(const grpc::Status& status) { owner_->Finished(this, status); }

}  // namespace

bool ShouldHaveBeenRefused(absl::string_view method, bool with_token) {
  if (absl::StartsWith(method, kHealthPrefix)) return false;
  if (!with_token) return true;
  return method != kGetStats && method != kGetJob && method != kJobStatus;
}

std::string StatusCodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {
      "OK",
      "CANCELLED",
      "UNKNOWN",
      "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED",
      "NOT_FOUND",
      "ALREADY_EXISTS",
      "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION",
      "ABORTED",
      "OUT_OF_RANGE",
      "UNIMPLEMENTED",
      "INTERNAL",
      "UNAVAILABLE",
      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  const int n = static_cast<int>(code);
  if (n >= 0 && n < static_cast<int>(std::size(kNames))) return kNames[n];
  return absl::StrCat("CODE_", n);
}

absl::StatusOr<StrangerTally> RunStranger(const StrangerOptions& options) {
  if (options.targets.empty()) {
    return absl::InvalidArgumentError("no targets");
  }
  if (!(options.duration > absl::ZeroDuration())) {
    return absl::InvalidArgumentError("the duration must be > 0");
  }
  if (options.max_streams_per_target < 1 ||
      options.max_watches_per_target < 1 || options.max_raw_per_target < 1 ||
      options.actions_per_second < 1) {
    return absl::InvalidArgumentError("bounds and the rate must be >= 1");
  }
  std::vector<std::unique_ptr<Target>> targets;
  std::seed_seq seeds{options.seed};
  std::vector<uint64_t> target_seeds(options.targets.size());
  seeds.generate(target_seeds.begin(), target_seeds.end());
  for (size_t i = 0; i < options.targets.size(); ++i) {
    targets.push_back(
        std::make_unique<Target>(options.targets[i], options, target_seeds[i]));
  }
  const absl::Time end = absl::Now() + options.duration;
  std::vector<std::thread> drivers;
  for (auto& target : targets) {
    drivers.emplace_back([&target, end] { target->Run(end); });
  }
  for (std::thread& driver : drivers) driver.join();

  StrangerTally tally;
  for (size_t i = 0; i < targets.size(); ++i) {
    const TargetTally t = targets[i]->tally();
    for (const auto& [method, codes] : t.by_method) {
      for (const auto& [code, n] : codes) {
        tally.by_method[method][code] += n;
        tally.by_code[code] += n;
        tally.by_target[options.targets[i].given][code] += n;
        if (code == "OK" &&
            ShouldHaveBeenRefused(method, !options.token.empty())) {
          tally.breaches.insert(method);
        }
      }
    }
    tally.raw_opened += t.raw_opened;
    tally.raw_refused += t.raw_refused;
    tally.skipped += t.skipped;
    tally.most_open = std::max(tally.most_open, t.most_open);
    tally.unfinished += t.unfinished;
    // A target with calls gRPC never ended must outlive them: leak it.
    if (!targets[i]->drained()) targets[i].release();
  }
  return tally;
}

std::string FormatTally(const StrangerTally& tally) {
  std::string out;
  for (const auto& [code, n] : tally.by_code) {
    absl::StrAppend(&out, "status ", code, " ", n, "\n");
  }
  for (const auto& [method, codes] : tally.by_method) {
    for (const auto& [code, n] : codes) {
      absl::StrAppend(&out, "method ", method, " ", code, " ", n, "\n");
    }
  }
  for (const auto& [target, codes] : tally.by_target) {
    for (const auto& [code, n] : codes) {
      absl::StrAppend(&out, "target ", target, " ", code, " ", n, "\n");
    }
  }
  absl::StrAppend(&out, "raw opened ", tally.raw_opened, " refused ",
                  tally.raw_refused, "\n");
  absl::StrAppend(&out, "skipped ", tally.skipped, "\n");
  absl::StrAppend(&out, "most open ", tally.most_open, "\n");
  if (tally.unfinished != 0) {
    absl::StrAppend(&out, "unfinished ", tally.unfinished, "\n");
  }
  return out;
}

}  // namespace stranger
}  // namespace pstrain
