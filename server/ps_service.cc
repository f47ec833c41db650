#include "server/ps_service.h"

#include <grpc/grpc.h>
#include <grpcpp/alarm.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "checkpoint/checkpoint.h"
#include "common/chunk_frames.h"
#include "common/client_text.h"
#include "common/grpc_util.h"
#include "common/job_token.h"
#include "common/sharding.h"
#include "common/sparse_rows.h"
#include "common/status_macros.h"
#include "common/tensor_codec.h"
#include "common/timeline.h"
#include "server/chunk_fingerprint.h"
#include "server/push_frame.h"
#include "server/shard_checkpoint.h"

namespace pstrain {

using pstrain::v1::PullResponse;
using pstrain::v1::PushRequest;

namespace {
// Longest a pull with an unknown session id waits for the coordinator.
constexpr absl::Duration kSessionRefreshCap = absl::Seconds(10);
}  // namespace

std::vector<std::pair<std::string, int>> PsServerChannelArgs() {
  // Without the HTTP/2 BDP probe, flow-control windows keep their initial
  // size, so push streams waiting for admission buffer almost nothing: peak
  // memory stops growing with the number of workers, for a measured cost
  // in push throughput (docs/performance.md, ps_bench's memory variants).
  // Each connection's TCP read buffer is at most 64 KiB (it is kept while
  // the connection lives); it takes effect where gRPC's tcp_read_chunks
  // experiment is off, as ps_server turns it (server/process_memory.h).
  return {{GRPC_ARG_HTTP2_BDP_PROBE, 0},
          {GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 64 << 10}};
}

ParameterServerService::ParameterServerService(PsServiceOptions options)
    : options_(options),
      barrier_timeout_(options.barrier_timeout),
      startup_timeout_(absl::ZeroDuration()),
      pulls_(options.max_concurrent_pulls > 0 ? options.max_concurrent_pulls
                                              : kMinPullThreads) {
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
      r->AddCounter("pstrain_server_refused_pulls_total",
                    "Pulls refused because every pull thread was busy."),
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

ParameterServerService::~ParameterServerService() = default;

void ParameterServerService::SetShard(
    std::shared_ptr<Shard> shard, std::shared_ptr<WorkerSessions> sessions) {
  if (metrics_ != nullptr && shard != nullptr) {
    metrics_->live_workers->Set(shard->num_workers());
  }
  if (options_.max_concurrent_pulls <= 0 && shard != nullptr) {
    pulls_.SetLimit(std::max(
        kMinPullThreads,
        kPullThreadsPerWorker * static_cast<int>(shard->num_workers())));
  }
  const uint64_t min_clock = shard != nullptr ? shard->MinClock() : 0;
  absl::MutexLock lock(&mu_);
  // Session checks are not optional: without a table nothing is served.
  if (sessions == nullptr) shard = nullptr;
  start_min_clock_ = min_clock;
  shard_ = std::move(shard);
  sessions_ = std::move(sessions);
}

void ParameterServerService::SetBarrierTimeout(absl::Duration timeout,
                                               absl::Duration startup) {
  if (!(timeout > absl::ZeroDuration())) return;
  absl::MutexLock lock(&mu_);
  barrier_timeout_ = timeout;
  startup_timeout_ = std::max(startup, absl::ZeroDuration());
}

absl::Duration ParameterServerService::BarrierTimeout(const Shard& s) const {
  const uint64_t min_clock = s.MinClock();
  absl::MutexLock lock(&mu_);
  if (min_clock > start_min_clock_) return barrier_timeout_;
  // No step completed by every worker yet: the wait includes start-up.
  return barrier_timeout_ + startup_timeout_;
}

void ParameterServerService::CloseShard() {
  std::shared_ptr<Shard> s = shard();
  if (s != nullptr) s->Close();
  pulls_.Stop();
}

void ParameterServerService::RecordPush(absl::Duration took,
                                        const absl::StatusOr<PushResult>& r) {
  if (metrics_ == nullptr) return;
  metrics_->push_seconds->Observe(absl::ToDoubleSeconds(took));
  if (!r.ok()) {
    metrics_->rejected->Inc();
    return;
  }
  if (r->pending) return;  // a part of a push not committed yet
  metrics_->pushes->Inc();
  if (r->dropped) metrics_->dropped->Inc();
  metrics_->staleness->Observe(static_cast<double>(r->staleness));
  metrics_->version->Set(static_cast<double>(r->version));
  if (r->applied) metrics_->apply_seconds->Observe(r->apply_seconds);
}

void ParameterServerService::SetShutdownCallback(
    std::function<void(const pstrain::v1::ShutdownRequest&)> callback) {
  absl::MutexLock lock(&mu_);
  on_shutdown_ = std::move(callback);
}

void ParameterServerService::SetCheckpointRoot(std::string root,
                                               uint32_t num_shards) {
  absl::MutexLock lock(&mu_);
  checkpoint_root_ = std::move(root);
  num_shards_ = num_shards;
}

void ParameterServerService::SetCoordinator(std::string key,
                                            std::string resume_from,
                                            uint64_t max_generation) {
  absl::MutexLock lock(&mu_);
  coordinator_key_ = std::move(key);
  resume_from_ = std::move(resume_from);
  max_generation_ = max_generation;
}

absl::Status ParameterServerService::CheckCoordinator(
    const grpc::ServerContext& context, absl::string_view what) const {
  std::string key;
  {
    absl::MutexLock lock(&mu_);
    key = coordinator_key_;
  }
  return CheckCoordinatorKey(context, key, what);
}

absl::Status ParameterServerService::CheckRollbackTarget(
    const pstrain::v1::RollbackRequest& r) const {
  if (r.generation() > max_generation_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rollback to generation ", r.generation(),
        " refused: this job reaches at most generation ", max_generation_,
        " (training.max_restarts); nothing changed"));
  }
  const std::string& path = r.checkpoint();
  if (path.empty()) return absl::OkStatus();  // the initial state
  const bool dotdot = path == ".." || absl::StartsWith(path, "../") ||
                      absl::StrContains(path, "/../") ||
                      absl::EndsWith(path, "/..");
  const bool resume_point = !resume_from_.empty() && path == resume_from_;
  const bool step_dir = !checkpoint_root_.empty() &&
                        path == CheckpointDir(checkpoint_root_, r.step());
  if (dotdot || !(resume_point || step_dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rollback refused: '", EchoClientText(path),
        "' is neither the job's resume point nor the step ", r.step(),
        " directory of its checkpoint folder; nothing changed"));
  }
  return absl::OkStatus();
}

void ParameterServerService::SetRollbackFactory(RollbackFactory factory) {
  absl::MutexLock lock(&mu_);
  rollback_factory_ = std::move(factory);
}

void ParameterServerService::SetGeneration(uint64_t generation) {
  absl::MutexLock lock(&mu_);
  generation_ = generation;
}

uint64_t ParameterServerService::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

absl::Status ParameterServerService::CheckGeneration(uint64_t generation,
                                                     const char* what) const {
  absl::MutexLock lock(&mu_);
  if (generation == generation_) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat(what, " of generation ", generation,
                   " refused: this shard serves generation ", generation_,
                   " (the job rolled back to step ", generation_step_,
                   "); nothing changed"));
}

std::shared_ptr<Shard> ParameterServerService::shard() const {
  absl::MutexLock lock(&mu_);
  return shard_;
}

std::shared_ptr<WorkerSessions> ParameterServerService::sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_;
}

// One push stream. On a shard that sums on arrival (plain sync) each frame
// read goes to one of two message slots, the next read starts, and the
// summer parses the frame (into a reused PushRequest, or in place:
// PsServiceOptions::parse_pushes_in_place) and gives its chunks to the
// shard's IncomingPush; the push commits at the clean half-close.
// Otherwise (async, backup workers) frames are parsed and kept (bounded) until
// the client half-closes, then the whole push goes to the shard at once.
// Deletes itself in OnDone.
class PushReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
  struct Frame;  // a message slot parsed in place (below)

 public:
  PushReactor(ParameterServerService* service, std::shared_ptr<Shard> shard,
              std::shared_ptr<WorkerSessions> sessions,
              const PushSession& session, grpc::CallbackServerContext* context,
              grpc::ByteBuffer* response)
      : service_(service),
        shard_(std::move(shard)),
        sessions_(std::move(sessions)),
        session_(session),
        context_(context),
        response_(response),
        start_(absl::Now()),
        on_arrival_(shard_->sums_on_arrival()),
        in_place_(on_arrival_ && service_->options_.parse_pushes_in_place),
        watch_(std::make_shared<Watch>()) {
    TimelineMark("srv.push.opened");
    watch_->context = context;
    alarm_.Set(absl::ToChronoTime(start_ + service_->options_.push_timeout),
               [watch = watch_](bool expired) {
                 if (!expired) return;
                 absl::MutexLock lock(&watch->mu);
                 if (watch->context != nullptr) watch->context->TryCancel();
               });
    if (service_->AdmitPush(this, on_arrival_)) Begin();
  }

  // Admitted: start reading, into message objects reused from earlier
  // pushes (their payload strings keep their capacity: no allocation and
  // no page faults per push once the first push has been received).
  void Begin() {
    admitted_ = true;
    // An admitted stream that sends nothing is ended, so that it cannot
    // hold the slot (the worker sends its header at once, even while its
    // gradients are still being computed).
    first_alarm_.Set(
        absl::ToChronoTime(absl::Now() +
                           service_->options_.first_message_timeout),
        [watch = watch_](bool expired) {
          if (!expired) return;
          absl::MutexLock lock(&watch->mu);
          if (!watch->first_read && watch->context != nullptr) {
            watch->context->TryCancel();
          }
        });
    buffers_ = service_->TakePushBuffers();
    messages_ = &buffers_->messages;
    if (on_arrival_) {
      if (!in_place_) {
        while (messages_->size() < 2) messages_->emplace_back();
      }
      absl::MutexLock lock(&pipe_mu_);
      free_ = {1, 0};
    }
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
    TimelineMark(ok ? "srv.push.read" : "srv.push.half_closed",
                 ok ? static_cast<int64_t>(frame_.Length()) : -1);
    if (!first_read_) {
      first_read_ = true;  // reads never overlap: no lock for this flag
      absl::MutexLock lock(&watch_->mu);
      watch_->first_read = true;
    }
    if (on_arrival_) {
      OnArrivalReadDone(ok);
      return;
    }
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
    if (count_ >= shard_->max_push_messages()) {
      Fail(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("push stream has more than ",
                       shard_->max_push_messages(), " messages for shard ",
                       shard_->shard_id(), "; nothing applied")));
      return;
    }
    if (count_ == messages_->size()) messages_->emplace_back();
    PushRequest& message = (*messages_)[count_];
    ++count_;
    if (!grpc::SerializationTraits<PushRequest>::Deserialize(&frame_, &message)
             .ok()) {
      Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("push message ", count_ - 1,
                                     " is not a valid PushRequest; nothing "
                                     "applied")));
      return;
    }
    if (count_ == 1 && message.has_header()) {
      if (absl::Status st = MatchesSession(message.header()); !st.ok()) {
        Fail(ToGrpcStatus(st));
        return;
      }
    }
    frame_.Clear();
    StartRead(&frame_);
  }

  // Summing on arrival, pipelined: a message read is parsed and summed
  // while the next one is read (two message slots, so at most two messages
  // are held), by one thread at a time (the "summer"), in arrival order.
  // Whoever ends the call (Finish) is the summer, or the last reaction when
  // none sums.
  void OnArrivalReadDone(bool ok) {
    if (!ok) {
      {
        absl::MutexLock lock(&pipe_mu_);
        if (done_) return;  // already finished (failure)
        half_closed_ = true;
        if (summing_) return;  // the summer completes the push
        done_ = true;
      }
      Complete();
      return;
    }
    std::optional<grpc::Status> failure;
    size_t slot = 0;
    {
      absl::MutexLock lock(&pipe_mu_);
      if (done_) return;
      bytes_ += frame_.Length();
      if (bytes_ > shard_->max_push_bytes()) {
        failure = grpc::Status(
            grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat("push stream exceeds the ", shard_->max_push_bytes(),
                         " bytes shard ", shard_->shard_id(),
                         " can receive; nothing applied"));
      } else if (count_ >= shard_->max_push_messages()) {
        failure = grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("push stream has more than ",
                         shard_->max_push_messages(), " messages for shard ",
                         shard_->shard_id(), "; nothing applied"));
      } else {
        slot = free_.back();
        free_.pop_back();
      }
      ++count_;
    }
    // The frame moves to its slot as it is (its slices referenced, not
    // copied) and the next read starts before it is parsed: the parse and
    // the scan run in the summer while gRPC receives the next frame.
    if (!failure.has_value()) {
      read_[slot].frame.Swap(&frame_);
      read_[slot].index = count_ - 1;
    }
    bool read_next = false;
    bool become_summer = false;
    {
      absl::MutexLock lock(&pipe_mu_);
      // The summer may have ended the call (a failed sum) while this frame
      // was parsed outside the lock: it must not be ended twice.
      if (done_) return;
      if (failure.has_value()) {
        if (!failure_.has_value()) failure_ = failure;
        if (summing_) return;  // the summer fails the push
        done_ = true;
      } else {
        queued_.push_back(slot);
        read_next = !free_.empty();
        read_deferred_ = !read_next;  // the summer reads when a slot frees
        become_summer = !summing_;
        summing_ = true;
      }
    }
    if (failure.has_value()) {
      Fail(*failure);
      return;
    }
    if (read_next) {
      frame_.Clear();
      StartRead(&frame_);
    }
    if (become_summer) ParseAndSum();
  }

  // Parses and sums the messages read until none is left, then ends the
  // call if the stream failed or half-closed meanwhile.
  void ParseAndSum() {
    while (true) {
      size_t slot = 0;
      {
        absl::MutexLock lock(&pipe_mu_);
        if (failure_.has_value() || queued_.empty()) {
          summing_ = false;
          if (!failure_.has_value() && !half_closed_) return;
          done_ = true;
          break;
        }
        slot = queued_.front();
        queued_.pop_front();
      }
      absl::Status st;
      if (!ParseInto(slot)) {
        st = absl::InvalidArgumentError(
            absl::StrCat("push message ", read_[slot].index,
                         " is not a valid PushRequest; nothing applied"));
      } else {
        TimelineMark("srv.push.sum");
        st =
            in_place_ ? SumView(frames_[slot]) : SumMessage((*messages_)[slot]);
      }
      TimelineMark("srv.push.summed");
      bool read_next = false;
      {
        absl::MutexLock lock(&pipe_mu_);
        free_.push_back(slot);
        if (!st.ok() && !failure_.has_value()) failure_ = ToGrpcStatus(st);
        read_next = read_deferred_ && !failure_.has_value();
        if (read_next) read_deferred_ = false;
      }
      if (read_next) {
        frame_.Clear();
        StartRead(&frame_);
      }
    }
    std::optional<grpc::Status> failure;
    {
      absl::MutexLock lock(&pipe_mu_);
      failure = failure_;
    }
    if (failure.has_value()) {
      Fail(*failure);
    } else {
      Complete();
    }
  }

  // Parses the frame read into slot `slot` (read_[slot]) in place (its
  // slices kept while the payloads are gathered) or into a PushRequest; the
  // slices go back to gRPC.
  bool ParseInto(size_t slot) {
    grpc::ByteBuffer& raw = read_[slot].frame;
    if (!in_place_) {
      const bool ok = grpc::SerializationTraits<PushRequest>::Deserialize(
                          &raw, &(*messages_)[slot])
                          .ok();
      raw.Clear();
      TimelineMark("srv.push.parsed");
      return ok;
    }
    Frame& f = frames_[slot];
    f.slices.clear();
    const bool dumped = raw.Dump(&f.slices).ok();
    raw.Clear();
    if (!dumped) return false;
    f.pieces.clear();
    for (const grpc::Slice& slice : f.slices) {
      f.pieces.emplace_back(reinterpret_cast<const char*>(slice.begin()),
                            slice.size());
    }
    if (!ParsePushFrame(f.pieces, &f.view).ok()) return false;
    // Every payload gathered from the slices into the slot's buffer, each
    // at a 16-byte boundary; an fp32 one in the loop that also takes its
    // fingerprint and largest |x| (what IncomingPush::Add would scan), so
    // the summer only sums. Then the slices go back to gRPC.
    size_t total = 0;
    for (const ChunkView& c : f.view.chunks) {
      total += (c.data_size + 15) / 16 * 16;
    }
    std::string& buffer = buffers_->gathered[slot];
    if (buffer.size() < total) buffer.resize(total);
    const bool fp32 = shard_->wire_dtype() == pstrain::v1::DTYPE_F32;
    f.scanned.resize(f.view.chunks.size());
    size_t at = 0;
    for (size_t i = 0; i < f.view.chunks.size(); ++i) {
      ChunkView& c = f.view.chunks[i];
      char* dst = buffer.data() + at;
      at += (c.data_size + 15) / 16 * 16;
      if (fp32) {
        f.scanned[i].fingerprint = GatherScanFingerprint(
            c.data, c.data_size, dst, &f.scanned[i].max_abs_bits);
      } else {
        GatherPieces(c.data, c.data_size, dst);
      }
      c.data.assign(1, absl::string_view(dst, c.data_size));
    }
    f.slices.clear();
    TimelineMark("srv.push.parsed");
    return true;
  }

  // The first message's header opens the shard's IncomingPush (after the
  // session and generation checks); every chunk goes to it.
  absl::Status SumMessage(const PushRequest& message) {
    PS_RETURN_IF_ERROR(Open(message.has_header(), message.header()));
    for (const pstrain::v1::ChunkData& c : message.chunks()) {
      if (absl::Status st = incoming_->Add(c); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  absl::Status SumView(const Frame& f) {
    PS_RETURN_IF_ERROR(Open(f.view.has_header, f.view.header));
    const bool fp32 = shard_->wire_dtype() == pstrain::v1::DTYPE_F32;
    for (size_t i = 0; i < f.view.chunks.size(); ++i) {
      absl::Status st =
          incoming_->Add(f.view.chunks[i], fp32 ? &f.scanned[i] : nullptr);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  absl::Status Open(bool has_header, const pstrain::v1::PushHeader& h) {
    if (!first_seen_) {
      first_seen_ = true;
      if (!has_header) {
        return absl::InvalidArgumentError(
            "the first push message must carry a header");
      }
      PS_RETURN_IF_ERROR(MatchesSession(h));
      absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> incoming =
          shard_->BeginPush(h);
      if (!incoming.ok()) return incoming.status();
      incoming_ = *std::move(incoming);
      header_generation_ = h.generation();
    }
    if (incoming_ == nullptr) {
      return absl::InvalidArgumentError(
          "the first push message must carry a header");
    }
    return absl::OkStatus();
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&watch_->mu);
      watch_->context = nullptr;
    }
    alarm_.Cancel();
    first_alarm_.Cancel();
    ReleaseStream();  // if End never ran
    ReturnBuffers();  // kept past End while a read could still use them
    delete this;
  }

 private:
  // What the timeout alarm may touch; outlives the reactor if need be.
  struct Watch {
    absl::Mutex mu;
    grpc::CallbackServerContext* context ABSL_GUARDED_BY(mu) = nullptr;
    bool first_read ABSL_GUARDED_BY(mu) = false;
  };

  // The first message's header must be the one the stream opened with
  // (checked then, before admission): worker, session and generation.
  absl::Status MatchesSession(const pstrain::v1::PushHeader& h) const {
    if (h.worker() != session_.worker ||
        h.session_id() != session_.session_id ||
        h.generation() != session_.generation) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push header (worker ", h.worker(), ", generation ", h.generation(),
          ") is not the session the stream opened with (worker ",
          session_.worker, ", generation ", session_.generation,
          "); nothing applied"));
    }
    // Checked again: the rank may have been declared dead, or the job rolled
    // back, while the stream waited for admission.
    absl::Status st = service_->CheckPushSession(*sessions_, session_);
    if (st.ok()) return st;
    return absl::Status(st.code(),
                        absl::StrCat(st.message(), "; nothing applied"));
  }

  // Frees the admission slot and the buffers, then finishes the call.
  void End(const grpc::Status& status) {
    // A push that fails after some chunks were summed leaves them as the
    // worker's uncommitted contribution (server/shard.h): nothing applied.
    incoming_.reset();
    // Summing on arrival, a failure can end the call while a read is still
    // parsing into a message slot: the buffers then go back in OnDone, which
    // gRPC calls after every reaction has returned. A successful push ends
    // after the half-close, with no read left.
    if (!on_arrival_ || status.ok()) ReturnBuffers();
    if (admitted_) service_->EndPush();
    // Before Finish: the client may open its next stream as soon as it has
    // the status (OnDone may come later).
    ReleaseStream();
    TimelineMark("srv.push.finish");
    Finish(status);
  }

  // Gives back the stream this push counts against its worker's bound
  // (ParameterServerService::TakePushStream), once.
  void ReleaseStream() {
    if (std::exchange(stream_released_, true)) return;
    service_->ReleasePushStream(session_.worker);
  }

  void ReturnBuffers() {
    if (buffers_ != nullptr) {
      messages_ = nullptr;
      service_->ReturnPushBuffers(std::move(buffers_));
    }
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
    if (on_arrival_) {
      if (incoming_ == nullptr) {
        Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "the first push message must carry a header"));
        return;
      }
      // A rollback while the stream was open: the shard it was summed into
      // is gone, and the generation check answers.
      const absl::Status generation =
          service_->CheckGeneration(header_generation_, "push");
      TimelineMark("srv.push.commit");
      Reply(generation.ok() ? incoming_->Finish()
                            : absl::StatusOr<PushResult>(generation));
      return;
    }
    if (count_ == 0 || !messages_->front().has_header()) {
      Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first push message must carry a header"));
      return;
    }
    std::vector<const pstrain::v1::ChunkData*> chunks;
    for (size_t i = 0; i < count_; ++i) {
      for (const auto& c : (*messages_)[i].chunks()) chunks.push_back(&c);
    }
    // A rollback while the stream was open: the shard it was read for is
    // gone, and the generation check answers.
    const absl::Status generation = service_->CheckGeneration(
        messages_->front().header().generation(), "push");
    Reply(generation.ok() ? shard_->Push(messages_->front().header(), chunks)
                          : absl::StatusOr<PushResult>(generation));
  }

  void Reply(const absl::StatusOr<PushResult>& result) {
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
    response.set_pending(result->pending);
    response.set_missing_chunks(result->missing_chunks);
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
  const PushSession session_;  // checked when the stream opened
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;
  const absl::Time start_;
  grpc::ByteBuffer frame_;
  // Messages [0, count_) of this push, in objects reused across pushes
  // (null until admitted).
  std::unique_ptr<PushBuffers> buffers_;
  std::vector<PushRequest>* messages_ = nullptr;  // buffers_->messages
  size_t count_ = 0;
  uint64_t bytes_ = 0;
  bool admitted_ = false;
  const bool on_arrival_;  // Shard::sums_on_arrival()
  const bool in_place_;    // on arrival, parse_pushes_in_place
  // Summing on arrival in place: a message slot is the frame's slices
  // while it is parsed, their bytes in order, what was parsed (each
  // payload then one piece of buffers_->gathered[slot]) and each fp32
  // payload's fingerprint and largest |x|.
  struct Frame {
    std::vector<grpc::Slice> slices;
    std::vector<absl::string_view> pieces;
    PushFrameView view;
    std::vector<Shard::IncomingPush::Scanned> scanned;
  };
  Frame frames_[2];
  // Summing on arrival: each slot's frame as read, until the summer parses
  // it, and its message's index in the stream.
  struct ReadFrame {
    grpc::ByteBuffer frame;
    size_t index = 0;
  };
  ReadFrame read_[2];
  // Summing on arrival: the shard's push (after the first message), its
  // header's generation, and the pipeline between reads and the summer.
  std::unique_ptr<Shard::IncomingPush> incoming_;
  uint64_t header_generation_ = 0;
  bool first_seen_ = false;  // the summer's
  absl::Mutex pipe_mu_;
  std::vector<size_t> free_ ABSL_GUARDED_BY(pipe_mu_);   // message slots
  std::deque<size_t> queued_ ABSL_GUARDED_BY(pipe_mu_);  // read, to sum
  bool summing_ ABSL_GUARDED_BY(pipe_mu_) = false;
  bool read_deferred_ ABSL_GUARDED_BY(pipe_mu_) = false;  // no free slot
  bool half_closed_ ABSL_GUARDED_BY(pipe_mu_) = false;
  bool done_ ABSL_GUARDED_BY(pipe_mu_) = false;  // the call is being ended
  std::optional<grpc::Status> failure_ ABSL_GUARDED_BY(pipe_mu_);
  bool first_read_ = false;
  bool stream_released_ = false;  // End, then OnDone: never concurrent
  const std::shared_ptr<Watch> watch_;
  grpc::Alarm alarm_;
  grpc::Alarm first_alarm_;  // options.first_message_timeout after Begin
};

std::unique_ptr<PushBuffers> ParameterServerService::TakePushBuffers() {
  absl::MutexLock lock(&push_mu_);
  if (push_buffers_.empty()) return std::make_unique<PushBuffers>();
  std::unique_ptr<PushBuffers> b = std::move(push_buffers_.back());
  push_buffers_.pop_back();
  return b;
}

void ParameterServerService::ReturnPushBuffers(
    std::unique_ptr<PushBuffers> buffers) {
  absl::MutexLock lock(&push_mu_);
  // As many sets as pushes may be read at once; the rest are freed.
  if (push_buffers_.size() <
      static_cast<size_t>(
          std::max({options_.max_concurrent_pushes,
                    options_.max_concurrent_buffered_pushes, 1}))) {
    push_buffers_.push_back(std::move(buffers));
  }
}

ParameterServerService::PushAdmission ParameterServerService::push_admission()
    const {
  absl::MutexLock lock(&push_mu_);
  return {active_pushes_, static_cast<int>(waiting_pushes_.size())};
}

bool ParameterServerService::AdmitPush(PushReactor* r, bool on_arrival) {
  const int limit = on_arrival ? options_.max_concurrent_pushes
                               : options_.max_concurrent_buffered_pushes;
  absl::MutexLock lock(&push_mu_);
  if (limit <= 0 || active_pushes_ < limit) {
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
  // Authenticated before admitted: a stream whose session is not current
  // takes no slot and no buffer.
  const auto& md = context->client_metadata();
  auto it = md.find(kPushSessionMetadataKey);
  if (it == md.end()) {
    return new RejectedPush(grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        "push without its session (metadata x-pstrain-push-session); "
        "nothing applied"));
  }
  absl::StatusOr<PushSession> session =
      ParsePushSession(absl::string_view(it->second.data(), it->second.size()));
  absl::Status st = session.status();
  if (st.ok()) st = CheckPushSession(*sessions, *session);
  if (st.ok() && !TakePushStream(session->worker)) {
    st = absl::ResourceExhaustedError(absl::StrCat(
        "worker ", session->worker, " already has ", kMaxPushStreamsPerWorker,
        " push streams open on this shard"));
  }
  if (!st.ok()) {
    if (metrics_ != nullptr) metrics_->rejected->Inc();
    return new RejectedPush(ToGrpcStatus(absl::Status(
        st.code(), absl::StrCat(st.message(), "; nothing applied"))));
  }
  return new PushReactor(this, std::move(s), std::move(sessions), *session,
                         context, response);
}

absl::Status ParameterServerService::CheckPushSession(
    const WorkerSessions& sessions, const PushSession& session) const {
  PS_RETURN_IF_ERROR(
      sessions.Check(session.worker, session.session_id, "Push"));
  return CheckGeneration(session.generation, "push");
}

bool ParameterServerService::TakePushStream(uint32_t worker) {
  absl::MutexLock lock(&push_mu_);
  int& open = push_streams_[worker];
  if (open >= kMaxPushStreamsPerWorker) return false;
  ++open;
  return true;
}

void ParameterServerService::ReleasePushStream(uint32_t worker) {
  absl::MutexLock lock(&push_mu_);
  auto it = push_streams_.find(worker);
  if (it != push_streams_.end() && --it->second <= 0) push_streams_.erase(it);
}

// One pull stream. Run (on a pull thread) does what may block: the
// checks, a session refresh and the wait for the consistency rule; it then
// writes the first message: the head and the first chunks. Every completed
// write (OnWriteDone, on a gRPC thread) builds and starts the next message,
// at most PsServiceOptions::pull_message_bytes of chunks, so at most one
// message beyond what gRPC holds is built at a time. Deletes itself in
// OnDone.
class PullReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  PullReactor(ParameterServerService* service,
              grpc::CallbackServerContext* context)
      : service_(service), context_(context) {}

  void Run(const pstrain::v1::PullRequest& request) {
    TimelineMark("srv.pull.run");
    grpc::Status status = Prepare(request);
    TimelineMark("srv.pull.ready");
    // An error, or a session-only pull (OK with no message).
    if (!status.ok() || shard_ == nullptr) {
      Finish(status);
      return;
    }
    PullResponse head;
    head.set_version(weights_.version);
    head.set_min_clock(weights_.min_clock);
    ChunkFrame frame(/*chunk_field=*/3);
    frame.AddFields(head);
    AddChunks(&frame);
    Write(frame.Release());
  }

  void OnWriteDone(bool ok) override {
    TimelineMark("srv.pull.written");
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    ChunkFrame frame(/*chunk_field=*/3);
    AddChunks(&frame);
    if (!frame.empty()) {
      Write(frame.Release());
      return;
    }
    service_->bytes_out_ += bytes_;
    if (service_->metrics_ != nullptr) {
      service_->metrics_->pull_seconds->Observe(
          absl::ToDoubleSeconds(absl::Now() - start_));
      service_->metrics_->barrier_wait_seconds->Observe(weights_.wait_seconds);
    }
    TimelineMark("srv.pull.finish");
    Finish(grpc::Status::OK);
  }

  void OnDone() override { delete this; }

  // The client went away (or the call's deadline passed): a wait for the
  // consistency rule ends now, not at its deadline, so the pull thread is
  // free for other pulls. gRPC calls this at most once, before OnDone.
  void OnCancel() override {
    std::shared_ptr<Shard> waiting;
    {
      absl::MutexLock lock(&cancel_mu_);
      cancelled_ = true;
      waiting = waiting_on_;
    }
    if (waiting != nullptr) waiting->WakePulls();
  }

 private:
  // OK with shard_ set: weights_ holds what to send; OK without: a
  // session-only pull, answered.
  grpc::Status Prepare(const pstrain::v1::PullRequest& request) {
    std::shared_ptr<Shard> s = service_->shard();
    if (s == nullptr) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "shard not initialised");
    }
    const absl::Duration barrier_timeout = service_->BarrierTimeout(*s);
    start_ = absl::Now();
    if (absl::Status st =
            service_->CheckGeneration(request.generation(), "pull");
        !st.ok()) {
      return ToGrpcStatus(st);
    }
    if (absl::Status st = service_->sessions()->CheckOrRefresh(
            request.worker(), request.session_id(), "Pull",
            ServerDeadline(*context_, kSessionRefreshCap));
        !st.ok()) {
      return ToGrpcStatus(st);
    }
    if (request.session_only()) return grpc::Status::OK;  // the session known
    if (request.parts() > kMaxPullParts ||
        request.part() >= std::max<uint32_t>(request.parts(), 1)) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("pull part ", request.part(), " of ", request.parts(),
                       " (PullRequest.part, parts): parts must be at most ",
                       kMaxPullParts, " and part below parts"));
    }
    stride_ = std::max<uint32_t>(request.parts(), 1);
    next_chunk_ = request.part();
    {
      absl::MutexLock lock(&cancel_mu_);
      waiting_on_ = s;
    }
    absl::StatusOr<PulledWeights> result =
        s->PullWeights(request.worker(), request.clock(),
                       ServerDeadline(*context_, barrier_timeout), &cancelled_);
    {
      absl::MutexLock lock(&cancel_mu_);
      waiting_on_ = nullptr;
    }
    if (!result.ok()) return ToGrpcStatus(result.status());
    weights_ = *std::move(result);
    shard_ = std::move(s);
    return grpc::Status::OK;
  }

  // The next chunks, up to the message budget (at least one chunk if any
  // is left). Every fp32 payload slice points into a chunk buffer and
  // holds its own pin (PulledWeights::Pin) until gRPC has sent it, so the
  // buffer is neither freed nor updated in place meanwhile (copy-on-write).
  void AddChunks(ChunkFrame* frame) {
    const auto& chunks = shard_->chunks();
    const uint64_t element_bytes = WireElementBytes(shard_->wire_dtype());
    const uint64_t budget = service_->pull_message_bytes();
    for (; next_chunk_ < chunks.size(); next_chunk_ += stride_) {
      const LocalChunk& c = chunks[next_chunk_];
      if (frame->payload_bytes() > 0 &&
          frame->payload_bytes() + c.length * element_bytes > budget) {
        break;
      }
      frame->AddChunk(c.tensor, c.index, weights_.chunk(next_chunk_), c.length,
                      shard_->wire_dtype(), /*keepalive=*/nullptr,
                      weights_.Pin(next_chunk_));
    }
  }

  void Write(grpc::ByteBuffer message) {
    message_ = std::move(message);
    bytes_ += message_.Length();
    StartWrite(&message_);
  }

  ParameterServerService* const service_;
  grpc::CallbackServerContext* const context_;
  absl::Time start_;
  std::shared_ptr<Shard> shard_;  // null until the weights are read
  PulledWeights weights_;
  size_t next_chunk_ = 0;     // the next of this stream's chunks
  size_t stride_ = 1;         // PullRequest.parts, at least 1
  grpc::ByteBuffer message_;  // the write in flight
  uint64_t bytes_ = 0;
  // Set by OnCancel; read by the shard's wait (Shard::PullWeights).
  std::atomic<bool> cancelled_{false};
  absl::Mutex cancel_mu_;
  // The shard a wait is on, for OnCancel to wake.
  std::shared_ptr<Shard> waiting_on_ ABSL_GUARDED_BY(cancel_mu_);
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* ParameterServerService::Pull(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  TimelineMark("srv.pull.called");
  auto* reactor = new PullReactor(this, context);
  pstrain::v1::PullRequest message;
  grpc::ByteBuffer bytes(*request);  // shares the slices; no copy
  // The generated handler's parse (grpcpp's proto SerializationTraits).
  if (!grpc::SerializationTraits<pstrain::v1::PullRequest>::Deserialize(
           &bytes, &message)
           .ok()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "pull without a valid PullRequest"));
    return reactor;
  }
  // The task's last use of the reactor is its Finish or StartWrite (gRPC may
  // delete it in OnDone right after), and the pool is joined before the
  // service goes.
  switch (pulls_.TryRun(
      [reactor, message = std::move(message)] { reactor->Run(message); })) {
    case CallPool::Admission::kRunning:
      break;
    case CallPool::Admission::kFull:
      if (metrics_ != nullptr) metrics_->refused_pulls->Inc();
      reactor->Finish(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("pull threads busy: all ", pulls_.counts().limit,
                       " of this shard's pull threads are serving pulls; "
                       "retry")));
      break;
    case CallPool::Admission::kStopped:
      reactor->Finish(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
      break;
  }
  return reactor;
}

namespace {

// Bytes a row push's framing may add to its ids and values (per message:
// the tensor name, tags and lengths); a stream beyond the bound is refused.
constexpr uint64_t kRowMessageOverheadBytes = 1024;

}  // namespace

grpc::Status ParameterServerService::PushRows(
    grpc::ServerContext* context,
    grpc::ServerReader<pstrain::v1::PushRowsRequest>* reader,
    pstrain::v1::PushRowsResponse* response) {
  std::shared_ptr<Shard> s = shard();
  if (s == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shard not initialised");
  }
  SparseShard* sparse = s->sparse();
  if (sparse == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "the job has no row-sparse tensors; nothing applied");
  }
  // Authenticated before admitted, as Push.
  const auto& md = context->client_metadata();
  auto it = md.find(kPushSessionMetadataKey);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "row push without its session (metadata "
                        "x-pstrain-push-session); nothing applied");
  }
  absl::StatusOr<PushSession> session =
      ParsePushSession(absl::string_view(it->second.data(), it->second.size()));
  absl::Status st = session.status();
  if (st.ok()) st = CheckPushSession(*sessions(), *session);
  if (!st.ok()) {
    return ToGrpcStatus(absl::Status(
        st.code(), absl::StrCat(st.message(), "; nothing applied")));
  }
  {
    absl::MutexLock lock(&push_mu_);
    const int limit = std::max(1, options_.max_concurrent_buffered_pushes);
    auto free = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(push_mu_) {
      return active_row_pushes_ < limit || context->IsCancelled();
    };
    if (!push_mu_.AwaitWithDeadline(
            absl::Condition(&free),
            ServerDeadline(*context, options_.push_timeout)) ||
        context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "row push not admitted before its deadline; "
                          "nothing applied");
    }
    ++active_row_pushes_;
  }
  struct Release {
    ParameterServerService* self;
    ~Release() {
      absl::MutexLock lock(&self->push_mu_);
      --self->active_row_pushes_;
    }
  } release{this};

  const uint64_t bound = sparse->max_push_bytes();
  std::vector<pstrain::v1::PushRowsRequest> messages;
  uint64_t bytes = 0;
  pstrain::v1::PushRowsRequest m;
  while (reader->Read(&m)) {
    bytes += m.ByteSizeLong();
    if (bytes > bound + kRowMessageOverheadBytes * (messages.size() + 1)) {
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("row push over ", bound,
                       " bytes of ids and values; nothing applied"));
    }
    if (messages.empty()) {
      const pstrain::v1::PushHeader& h = m.header();
      if (!m.has_header() || h.worker() != session->worker ||
          h.session_id() != session->session_id ||
          h.generation() != session->generation) {
        return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                            "row push header does not match the stream's "
                            "session; nothing applied");
      }
    }
    messages.push_back(std::move(m));
    m.Clear();
  }
  if (context->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "row push cancelled; nothing applied");
  }
  if (messages.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "row push without a message; nothing applied");
  }
  bytes_in_ += bytes;
  absl::StatusOr<RowPush> push = sparse->DecodePush(messages);
  if (!push.ok()) return ToGrpcStatus(push.status());
  // A rollback while the stream was read: the push is of another generation.
  if (absl::Status g = CheckGeneration(session->generation, "row push");
      !g.ok()) {
    return ToGrpcStatus(g);
  }
  absl::StatusOr<RowPushResult> result = sparse->Push(std::move(*push));
  if (!result.ok()) return ToGrpcStatus(result.status());
  response->set_version(result->version);
  response->set_staleness(result->staleness);
  response->set_applied(result->applied);
  response->set_rows(result->rows);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::PullRows(
    grpc::ServerContext* context, const pstrain::v1::PullRowsRequest* request,
    grpc::ServerWriter<pstrain::v1::PullRowsResponse>* writer) {
  std::shared_ptr<Shard> s = shard();
  if (s == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shard not initialised");
  }
  SparseShard* sparse = s->sparse();
  if (sparse == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "the job has no row-sparse tensors");
  }
  const absl::Duration barrier_timeout = BarrierTimeout(*s);
  if (absl::Status st = CheckGeneration(request->generation(), "row pull");
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  if (absl::Status st = sessions()->CheckOrRefresh(
          request->worker(), request->session_id(), "PullRows",
          ServerDeadline(*context, kSessionRefreshCap));
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  absl::StatusOr<std::vector<RowBlock>> blocks = sparse->DecodePull(*request);
  if (!blocks.ok()) return ToGrpcStatus(blocks.status());
  absl::StatusOr<RowPullResult> result =
      sparse->Pull(request->worker(), request->clock(), std::move(*blocks),
                   ServerDeadline(*context, barrier_timeout));
  if (!result.ok()) return ToGrpcStatus(result.status());

  uint64_t bytes = 0;
  auto write = [&](pstrain::v1::PullRowsResponse& msg) {
    bytes += msg.ByteSizeLong();
    const bool ok = writer->Write(msg);
    msg.Clear();
    return ok;
  };
  pstrain::v1::PullRowsResponse msg;
  msg.set_version(result->version);
  msg.set_min_clock(result->min_clock);
  if (!write(msg)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  const pstrain::v1::DType dtype = sparse->wire_dtype();
  const uint64_t element_bytes = WireElementBytes(dtype);
  uint64_t payload = 0;
  for (const RowBlock& b : result->blocks) {
    const std::string& name = sparse->table_name(b.table);
    const uint64_t dim = static_cast<uint64_t>(sparse->table_dim(b.table));
    const uint64_t per_row = sizeof(int64_t) + dim * element_bytes;
    const uint64_t step = RowsPerMessage(dim, dtype, /*with_values=*/true);
    for (uint64_t i = 0; i < b.ids.size(); i += step) {
      const uint64_t n = std::min<uint64_t>(step, b.ids.size() - i);
      if (payload > 0 && payload + n * per_row > kMaxMessagePayloadBytes) {
        if (!write(msg)) {
          return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
        }
        payload = 0;
      }
      pstrain::v1::SparseRows* piece = msg.add_rows();
      piece->set_tensor(name);
      piece->set_dtype(dtype);
      piece->set_dim(static_cast<uint32_t>(dim));
      AppendRowIds(absl::MakeConstSpan(b.ids).subspan(i, n),
                   piece->mutable_ids());
      AppendRowValues(&b.values[i * dim], n * dim, dtype, name,
                      piece->mutable_values());
      payload += n * per_row;
    }
  }
  if (msg.rows_size() > 0 && !write(msg)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  bytes_out_ += bytes;
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
  if (absl::Status st = CheckCoordinator(*context, "shut a shard down");
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  std::function<void(const pstrain::v1::ShutdownRequest&)> callback;
  std::shared_ptr<Shard> s;
  {
    absl::MutexLock lock(&mu_);
    callback = std::exchange(on_shutdown_, nullptr);
    s = shard_;
  }
  if (s != nullptr) s->Close();
  if (callback) callback(*request);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Checkpoint(
    grpc::ServerContext* context, const pstrain::v1::CheckpointRequest* request,
    pstrain::v1::CheckpointResponse* response) {
  if (absl::Status st = CheckCoordinator(*context, "order a checkpoint");
      !st.ok()) {
    return ToGrpcStatus(st);
  }
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

namespace pstrain {

grpc::Status ParameterServerService::Rollback(
    grpc::ServerContext* context, const pstrain::v1::RollbackRequest* request,
    pstrain::v1::RollbackResponse* response) {
  if (absl::Status st = CheckCoordinator(*context, "order a rollback");
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  RollbackFactory factory;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status st = CheckRollbackTarget(*request); !st.ok()) {
      return ToGrpcStatus(st);
    }
    if (request->generation() < generation_) {
      return grpc::Status(
          grpc::StatusCode::ABORTED,
          absl::StrCat("rollback of generation ", request->generation(),
                       " refused: this shard serves generation ", generation_,
                       "; nothing changed"));
    }
    if (!rollback_factory_ || shard_ == nullptr) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this shard cannot roll back (not serving a job)");
    }
    if (!mu_.AwaitWithDeadline(absl::Condition(&rollback_idle_),
                               ServerDeadline(*context, absl::Seconds(30)))) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "another rollback is in progress");
    }
    factory = rollback_factory_;
    rollback_idle_ = false;
  }
  // Built outside the mutex: a restore reads a checkpoint file.
  absl::StatusOr<std::shared_ptr<Shard>> fresh =
      factory(request->checkpoint(), request->step());
  const uint64_t fresh_min_clock = fresh.ok() ? (*fresh)->MinClock() : 0;
  std::shared_ptr<Shard> old;
  {
    absl::MutexLock lock(&mu_);
    rollback_idle_ = true;
    if (!fresh.ok()) return ToGrpcStatus(fresh.status());
    if (request->generation() < generation_) {
      return grpc::Status(
          grpc::StatusCode::ABORTED,
          "a newer rollback arrived meanwhile; nothing changed");
    }
    old = std::exchange(shard_, *fresh);
    start_min_clock_ = fresh_min_clock;  // restarted workers start up again
    generation_ = request->generation();
    generation_step_ = request->step();
    // Files saved for cuts after the rollback step belong to the old
    // generation's run; the new one saves them again.
    checkpoints_saved_.erase(checkpoints_saved_.upper_bound(request->step()),
                             checkpoints_saved_.end());
  }
  if (old != nullptr) old->Close();  // blocked pulls of the old one return
  response->set_version(request->step());
  return grpc::Status::OK;
}

}  // namespace pstrain
