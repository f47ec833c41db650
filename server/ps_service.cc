#include "server/ps_service.h"

#include <grpc/grpc.h>
#include <grpcpp/alarm.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/sharding.h"
#include "common/tensor_codec.h"
#include "server/checkpoint.h"

namespace pstrain {

using pstrain::v1::PullResponse;
using pstrain::v1::PushRequest;

namespace {
// Longest a pull with an unknown session id waits for the coordinator.
constexpr absl::Duration kSessionRefreshCap = absl::Seconds(10);
}  // namespace

ParameterServerService::ParameterServerService(PsServiceOptions options)
    : options_(options), barrier_timeout_(options.barrier_timeout) {
  MetricsRegistry* r = options_.metrics;
  if (r == nullptr) return;
  const auto latency = ExponentialBuckets(1e-4, 2, 18);  // 0.1 ms .. 13 s
  metrics_ = std::make_unique<Metrics>(Metrics{
      r->AddHistogram("pstrain_server_push_seconds",
                      "Push RPC handling time, receive to reply.", latency),
      r->AddHistogram("pstrain_server_pull_seconds",
                      "Pull RPC time including any barrier wait.", latency),
      r->AddHistogram("pstrain_server_barrier_wait_seconds",
                      "Time a pull blocked on the consistency rule.", latency),
      r->AddHistogram("pstrain_server_optimizer_apply_seconds",
                      "Time of one optimizer step over the shard.", latency),
      r->AddHistogram("pstrain_server_staleness",
                      "Observed staleness of pushes, in clocks.",
                      {0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64}),
      r->AddCounter("pstrain_server_pushes_total", "Accepted pushes."),
      r->AddCounter("pstrain_server_rejected_pushes_total",
                    "Pushes rejected with an error status."),
      r->AddCounter("pstrain_server_dropped_pushes_total",
                    "Sync with backup workers: late pushes dropped."),
      r->AddGauge("pstrain_server_version", "Optimizer steps applied."),
      r->AddGauge("pstrain_server_live_workers",
                  "Workers the shard waits for."),
  });
  r->AddCallback("pstrain_server_received_bytes_total",
                 "Bytes of push messages received.", true,
                 [this] { return static_cast<double>(bytes_in_.load()); });
  r->AddCallback("pstrain_server_sent_bytes_total",
                 "Bytes of pull messages sent.", true,
                 [this] { return static_cast<double>(bytes_out_.load()); });
}

void ParameterServerService::SetShard(
    std::shared_ptr<Shard> shard, std::shared_ptr<WorkerSessions> sessions) {
  if (metrics_ != nullptr && shard != nullptr) {
    metrics_->live_workers->Set(shard->num_workers());
  }
  absl::MutexLock lock(&mu_);
  // Session checks are not optional: without a table nothing is served.
  if (sessions == nullptr) shard = nullptr;
  shard_ = std::move(shard);
  sessions_ = std::move(sessions);
}

void ParameterServerService::SetBarrierTimeout(absl::Duration timeout) {
  if (!(timeout > absl::ZeroDuration())) return;
  absl::MutexLock lock(&mu_);
  barrier_timeout_ = timeout;
}

void ParameterServerService::CloseShard() {
  std::shared_ptr<Shard> s = shard();
  if (s != nullptr) s->Close();
}

void ParameterServerService::RecordPush(absl::Duration took,
                                        const absl::StatusOr<PushResult>& r) {
  if (metrics_ == nullptr) return;
  metrics_->push_seconds->Observe(absl::ToDoubleSeconds(took));
  if (!r.ok()) {
    metrics_->rejected->Inc();
    return;
  }
  metrics_->pushes->Inc();
  if (r->dropped) metrics_->dropped->Inc();
  metrics_->staleness->Observe(static_cast<double>(r->staleness));
  metrics_->version->Set(static_cast<double>(r->version));
  if (r->applied) metrics_->apply_seconds->Observe(r->apply_seconds);
}

void ParameterServerService::SetShutdownCallback(
    std::function<void(const std::string&)> callback) {
  absl::MutexLock lock(&mu_);
  on_shutdown_ = std::move(callback);
}

void ParameterServerService::SetCheckpointRoot(std::string root,
                                               uint32_t num_shards) {
  absl::MutexLock lock(&mu_);
  checkpoint_root_ = std::move(root);
  num_shards_ = num_shards;
}

std::shared_ptr<Shard> ParameterServerService::shard() const {
  absl::MutexLock lock(&mu_);
  return shard_;
}

std::shared_ptr<WorkerSessions> ParameterServerService::sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_;
}

// One push stream: frames are parsed and kept (bounded) until the client
// half-closes, then the whole push goes to the shard at once. Deletes itself
// in OnDone.
class PushReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PushReactor(ParameterServerService* service, std::shared_ptr<Shard> shard,
              std::shared_ptr<WorkerSessions> sessions,
              grpc::CallbackServerContext* context, grpc::ByteBuffer* response)
      : service_(service),
        shard_(std::move(shard)),
        sessions_(std::move(sessions)),
        context_(context),
        response_(response),
        start_(absl::Now()),
        watch_(std::make_shared<Watch>()) {
    watch_->context = context;
    alarm_.Set(absl::ToChronoTime(start_ + service_->options_.push_timeout),
               [watch = watch_](bool expired) {
                 if (!expired) return;
                 absl::MutexLock lock(&watch->mu);
                 if (watch->context != nullptr) watch->context->TryCancel();
               });
    if (service_->AdmitPush(this)) Begin();
  }

  // Admitted: start reading.
  void Begin() {
    admitted_ = true;
    StartRead(&frame_);
  }

  void OnCancel() override {
    if (service_->UnqueuePush(this)) {
      Fail(grpc::Status(grpc::StatusCode::CANCELLED,
                        "push cancelled while waiting; nothing applied"));
    }
    // Otherwise the pending read fails and Complete() reports it.
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Complete();
      return;
    }
    bytes_ += frame_.Length();
    if (bytes_ > shard_->max_push_bytes()) {
      Fail(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("push stream exceeds the ", shard_->max_push_bytes(),
                       " bytes shard ", shard_->shard_id(),
                       " can receive; nothing applied")));
      return;
    }
    if (messages_.size() >= shard_->max_push_messages()) {
      Fail(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("push stream has more than ",
                       shard_->max_push_messages(), " messages for shard ",
                       shard_->shard_id(), "; nothing applied")));
      return;
    }
    messages_.emplace_back();
    if (!grpc::SerializationTraits<PushRequest>::Deserialize(&frame_,
                                                             &messages_.back())
             .ok()) {
      Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("push message ", messages_.size() - 1,
                                     " is not a valid PushRequest; nothing "
                                     "applied")));
      return;
    }
    if (messages_.size() == 1 && messages_.front().has_header()) {
      const pstrain::v1::PushHeader& h = messages_.front().header();
      absl::Status st = sessions_->Check(h.worker(), h.session_id(), "Push");
      if (!st.ok()) {
        Fail(ToGrpcStatus(absl::Status(
            st.code(), absl::StrCat(st.message(), "; nothing applied"))));
        return;
      }
    }
    frame_.Clear();
    StartRead(&frame_);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&watch_->mu);
      watch_->context = nullptr;
    }
    alarm_.Cancel();
    delete this;
  }

 private:
  // What the timeout alarm may touch; outlives the reactor if need be.
  struct Watch {
    absl::Mutex mu;
    grpc::CallbackServerContext* context ABSL_GUARDED_BY(mu) = nullptr;
  };

  // Frees the admission slot and the buffers, then finishes the call.
  void End(const grpc::Status& status) {
    messages_.clear();
    if (admitted_) service_->EndPush();
    Finish(status);
  }

  void Complete() {
    // A read fails both at a clean half-close and when the stream breaks;
    // only the former may apply anything.
    if (grpc_call_failed_before_recv_message(context_->c_call()) ||
        context_->IsCancelled()) {
      Fail(grpc::Status(grpc::StatusCode::CANCELLED,
                        "push stream ended without a clean half-close; "
                        "nothing applied"));
      return;
    }
    if (messages_.empty() || !messages_.front().has_header()) {
      Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first push message must carry a header"));
      return;
    }
    std::vector<const pstrain::v1::ChunkData*> chunks;
    for (const PushRequest& m : messages_) {
      for (const auto& c : m.chunks()) chunks.push_back(&c);
    }
    absl::StatusOr<PushResult> result =
        shard_->Push(messages_.front().header(), chunks);
    service_->bytes_in_ += bytes_;
    service_->RecordPush(absl::Now() - start_, result);
    if (!result.ok()) {
      End(ToGrpcStatus(result.status()));
      return;
    }
    pstrain::v1::PushResponse response;
    response.set_version(result->version);
    response.set_staleness(result->staleness);
    response.set_applied(result->applied);
    response.set_dropped(result->dropped);
    bool own_buffer = false;
    End(grpc::SerializationTraits<pstrain::v1::PushResponse>::Serialize(
        response, response_, &own_buffer));
  }

  void Fail(const grpc::Status& status) {
    service_->bytes_in_ += bytes_;
    service_->RecordPush(
        absl::Now() - start_,
        absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                     status.error_message()));
    End(status);
  }

  ParameterServerService* const service_;
  const std::shared_ptr<Shard> shard_;
  const std::shared_ptr<WorkerSessions> sessions_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;
  const absl::Time start_;
  grpc::ByteBuffer frame_;
  std::vector<PushRequest> messages_;
  uint64_t bytes_ = 0;
  bool admitted_ = false;
  const std::shared_ptr<Watch> watch_;
  grpc::Alarm alarm_;
};

bool ParameterServerService::AdmitPush(PushReactor* r) {
  absl::MutexLock lock(&push_mu_);
  if (options_.max_concurrent_pushes <= 0 ||
      active_pushes_ < options_.max_concurrent_pushes) {
    ++active_pushes_;
    return true;
  }
  waiting_pushes_.push_back(r);
  return false;
}

void ParameterServerService::EndPush() {
  PushReactor* next = nullptr;
  {
    absl::MutexLock lock(&push_mu_);
    if (waiting_pushes_.empty()) {
      --active_pushes_;
    } else {  // the slot passes to the next one
      next = waiting_pushes_.front();
      waiting_pushes_.pop_front();
    }
  }
  if (next != nullptr) next->Begin();
}

bool ParameterServerService::UnqueuePush(PushReactor* r) {
  absl::MutexLock lock(&push_mu_);
  auto it = std::find(waiting_pushes_.begin(), waiting_pushes_.end(), r);
  if (it == waiting_pushes_.end()) return false;
  waiting_pushes_.erase(it);
  return true;
}

// A push refused before reading anything.
class RejectedPush : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  explicit RejectedPush(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterServerService::Push(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  std::shared_ptr<Shard> s;
  std::shared_ptr<WorkerSessions> sessions;
  {
    absl::MutexLock lock(&mu_);
    s = shard_;
    sessions = sessions_;
  }
  if (s == nullptr) {
    return new RejectedPush(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "shard not initialised"));
  }
  return new PushReactor(this, std::move(s), std::move(sessions), context,
                         response);
}

grpc::Status ParameterServerService::Pull(
    grpc::ServerContext* context, const pstrain::v1::PullRequest* request,
    grpc::ServerWriter<PullResponse>* writer) {
  std::shared_ptr<Shard> s = shard();
  if (s == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shard not initialised");
  }
  absl::Duration barrier_timeout;
  {
    absl::MutexLock lock(&mu_);
    barrier_timeout = barrier_timeout_;
  }
  const absl::Time start = absl::Now();
  if (absl::Status st = sessions()->CheckOrRefresh(
          request->worker(), request->session_id(), "Pull",
          ServerDeadline(*context, kSessionRefreshCap));
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  absl::StatusOr<PulledWeights> result =
      s->PullWeights(request->worker(), request->clock(),
                     ServerDeadline(*context, barrier_timeout));
  if (!result.ok()) return ToGrpcStatus(result.status());

  PullResponse head;
  head.set_version(result->version);
  head.set_min_clock(result->min_clock);
  uint64_t bytes = head.ByteSizeLong();
  if (!writer->Write(head)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  PullResponse msg;
  uint64_t payload = 0;
  const uint64_t element_bytes = WireElementBytes(s->wire_dtype());
  for (size_t i = 0; i < s->chunks().size(); ++i) {
    const LocalChunk& c = s->chunks()[i];
    if (payload > 0 &&
        payload + c.length * element_bytes > kMaxMessagePayloadBytes) {
      bytes += msg.ByteSizeLong();
      if (!writer->Write(msg)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
      msg.Clear();
      payload = 0;
    }
    EncodeChunk(c.tensor, c.index, result->chunk(i), c.length, msg.add_chunks(),
                s->wire_dtype());
    payload += c.length * element_bytes;
  }
  if (msg.chunks_size() > 0) {
    bytes += msg.ByteSizeLong();
    if (!writer->Write(msg)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
  }
  bytes_out_ += bytes;
  if (metrics_ != nullptr) {
    metrics_->pull_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
    metrics_->barrier_wait_seconds->Observe(result->wait_seconds);
  }
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::GetStats(
    grpc::ServerContext* context, const pstrain::v1::ShardStatsRequest* request,
    pstrain::v1::ShardStats* response) {
  std::shared_ptr<Shard> s = shard();
  if (s == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shard not initialised");
  }
  *response = s->Stats();
  response->set_bytes_in(bytes_in_.load());
  response->set_bytes_out(bytes_out_.load());
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Shutdown(
    grpc::ServerContext* context, const pstrain::v1::ShutdownRequest* request,
    pstrain::v1::ShutdownResponse* response) {
  std::function<void(const std::string&)> callback;
  std::shared_ptr<Shard> s;
  {
    absl::MutexLock lock(&mu_);
    callback = std::exchange(on_shutdown_, nullptr);
    s = shard_;
  }
  if (s != nullptr) s->Close();
  if (callback) callback(request->reason());
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Checkpoint(
    grpc::ServerContext* context, const pstrain::v1::CheckpointRequest* request,
    pstrain::v1::CheckpointResponse* response) {
  const absl::Time deadline =
      ServerDeadline(*context, options_.barrier_timeout);
  auto answer = [response](const CheckpointFile& file) {
    response->set_shard(file.shard);
    response->set_file(file.name);
    response->set_bytes(file.bytes);
    response->set_crc32c(file.crc32c);
    return grpc::Status::OK;
  };
  std::shared_ptr<Shard> s;
  std::string root;
  uint32_t num_shards = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithDeadline(absl::Condition(&checkpoint_idle_), deadline)) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "another checkpoint is being saved");
    }
    auto saved = checkpoints_saved_.find(request->step());
    if (saved != checkpoints_saved_.end()) return answer(saved->second);
    s = shard_;
    root = checkpoint_root_;
    num_shards = num_shards_;
    if (s == nullptr) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "shard not initialised");
    }
    if (root.empty()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this job has no checkpoint.dir");
    }
    checkpoint_idle_ = false;
  }
  CheckpointEnv* env = options_.checkpoint_env != nullptr
                           ? options_.checkpoint_env
                           : CheckpointEnv::Default();
  absl::StatusOr<CheckpointFile> file =
      SaveShardAt(*s, num_shards, env, root, request->step(), deadline);
  absl::MutexLock lock(&mu_);
  checkpoint_idle_ = true;
  if (!file.ok()) return ToGrpcStatus(file.status());
  checkpoints_saved_[request->step()] = *file;
  while (checkpoints_saved_.size() > 4)
    checkpoints_saved_.erase(checkpoints_saved_.begin());
  return answer(*file);
}

}  // namespace pstrain
