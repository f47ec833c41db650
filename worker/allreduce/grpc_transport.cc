#include "worker/allreduce/grpc_transport.h"

#include <grpc/grpc.h>
#include <grpcpp/alarm.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "worker/allreduce/segment_wire.h"

namespace pstrain {

namespace {

// The HTTP/2 lookahead of a ring link: 16 segments of the default size, 4
// of the largest (allreduce.segment_bytes <= 4 MiB). With the BDP probe off
// the connection's window, not this, bounds a segment's first write
// (RingLinkArgs); the setting as a whole (with the probe off) beat gRPC's
// defaults at 1-16 MiB with 2 and 4 ranks.
constexpr int kRingWindowBytes = 16 << 20;

// The full name of RingPeer.SendSegments (proto/pstrain.proto), called raw.
constexpr char kSendSegments[] = "/pstrain.v1.RingPeer/SendSegments";

// One incoming SendSegments stream: every segment goes to the mailbox until
// the left neighbour half-closes (OK) or sends something bad (its error).
// The stream is the first segment's sender's (rank, session id, generation):
// a later segment claiming another is PERMISSION_DENIED, and when the stream
// ends any other way than a clean close (cancelled, past its deadline, an
// undecodable segment) the mailbox learns that that sender's stream broke.
// The mailbox decides whether it counts (mailbox.h: only if it is the
// sender the rank expects), so a stranger's stream fails nothing. A stream
// without a first segment within `first_segment_timeout` is ended
// (DEADLINE_EXCEEDED), touching nothing.
//
// Lifetime: gRPC's OnDone and the alarm's callback (which always runs, on
// expiry or after Cancel) each hold the reactor; the later one deletes it.
class SegmentReader : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  SegmentReader(Mailbox* mailbox, std::atomic<uint64_t>* segments,
                std::atomic<int>* open_streams,
                grpc::CallbackServerContext* context,
                grpc::ByteBuffer* response,
                absl::Duration first_segment_timeout)
      : mailbox_(mailbox),
        segments_(segments),
        open_streams_(open_streams),
        context_(context),
        response_(response),
        first_segment_timeout_(first_segment_timeout) {
    open_streams_->fetch_add(1);
    // Finish from the alarm is safe even before gRPC binds the reactor
    // (the reactor queues it as it does StartRead).
    first_segment_alarm_.Set(
        absl::ToChronoTime(absl::Now() + first_segment_timeout_),
        [this](bool expired) { OnFirstSegmentAlarm(expired); });
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (grpc_call_failed_before_recv_message(context_->c_call()) ||
          context_->IsCancelled()) {
        BrokeOff(absl::DataLossError(
            absl::StrCat("the stream ended without a clean close after ",
                         count_, " segments")));
        FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED,
                                "segment stream ended without a clean close"));
        return;
      }
      pstrain::v1::SendSegmentsResponse response;
      response.set_segments(count_);
      const std::string bytes = response.SerializeAsString();
      grpc::Slice slice(bytes);
      *response_ = grpc::ByteBuffer(&slice, 1);
      FinishOnce(grpc::Status::OK);
      return;
    }
    if (!sender_.has_value()) {
      {
        absl::MutexLock lock(&mu_);
        if (finished_) return;  // ended by the alarm meanwhile
        first_read_ = true;
      }
      first_segment_alarm_.Cancel();
    }
    absl::StatusOr<DecodedSegment> segment = DecodeSegment(std::move(message_));
    message_.Clear();
    if (!segment.ok()) {
      BrokeOff(absl::DataLossError(
          absl::StrCat("an undecodable segment after ", count_, " segments")));
      FinishOnce(ToGrpcStatus(segment.status()));
      return;
    }
    const Sender claimed{segment->from_rank, segment->session_id,
                         segment->generation};
    if (!sender_.has_value()) {
      sender_ = claimed;
    } else if (!(claimed == *sender_)) {
      BrokeOff(absl::DataLossError(
          absl::StrCat("a segment from another sender on its stream after ",
                       count_, " segments")));
      FinishOnce(grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("segment ", segment->key.ToString(),
                       " claims another rank, session id or generation than "
                       "the stream's first segment")));
      return;
    }
    absl::Status st =
        mailbox_->Put(segment->key, segment->from_rank, segment->session_id,
                      std::move(segment->payload), segment->generation);
    if (!st.ok()) {
      FinishOnce(ToGrpcStatus(st));
      return;
    }
    ++count_;
    segments_->fetch_add(1);
    StartRead(&message_);
  }

  void OnDone() override {
    open_streams_->fetch_sub(1);
    first_segment_alarm_.Cancel();  // its callback runs soon, not expired
    Unref();
  }

 private:
  // Who the stream's first segment says sent it.
  struct Sender {
    uint32_t rank;
    uint64_t session_id;
    uint64_t generation;
    bool operator==(const Sender& o) const {
      return rank == o.rank && session_id == o.session_id &&
             generation == o.generation;
    }
  };

  void OnFirstSegmentAlarm(bool expired) {
    bool end = false;
    {
      absl::MutexLock lock(&mu_);
      if (expired && !first_read_ && !finished_) end = finished_ = true;
    }
    if (end) {
      Finish(grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat("no segment within ",
                       absl::FormatDuration(first_segment_timeout_),
                       " of opening the stream")));
    }
    Unref();
  }

  // Finish, unless the alarm ended the stream already.
  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(status);
  }

  void BrokeOff(absl::Status why) {
    if (sender_.has_value()) {
      mailbox_->Fail(sender_->rank, sender_->session_id, std::move(why),
                     sender_->generation);
    }
  }

  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  Mailbox* const mailbox_;
  std::atomic<uint64_t>* const segments_;
  std::atomic<int>* const open_streams_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;
  const absl::Duration first_segment_timeout_;
  std::optional<Sender> sender_;  // gRPC's reactions only
  grpc::ByteBuffer message_;
  uint64_t count_ = 0;
  grpc::Alarm first_segment_alarm_;
  std::atomic<int> refs_{2};  // OnDone and the alarm's callback
  absl::Mutex mu_;            // between the reactions and the alarm
  bool first_read_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

std::vector<std::pair<std::string, int>> RingLinkArgs() {
  return {{GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kRingWindowBytes},
          {GRPC_ARG_HTTP2_BDP_PROBE, 0}};
}

std::shared_ptr<grpc::Channel> MakeRingChannel(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    const std::vector<std::pair<std::string, int>>& link_args) {
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args = DefaultChannelArgs();
  for (const auto& [key, value] : link_args) args.SetInt(key, value);
  return grpc::CreateCustomChannel(address, credentials, args);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* RingPeerService::SendSegments(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  return new SegmentReader(&mailbox_, &segments_, &open_streams_, context,
                           response, first_segment_timeout_);
}

// The outgoing stream. Segments queue in `queue_` and are written one at a
// time: the rank's thread starts a write when none is in flight, and each
// write's completion (OnWriteDone, on a gRPC thread) starts the next. The
// rank's thread holds the call open (the hold, released by Close or on
// failure). gRPC may run reactions inline from Start*, RemoveHold and
// TryCancel, so those are called without holding mu_.
//
// SendSegments is client-streaming; this end runs it as a bidi call by name
// (grpc::GenericStub, public API), which is the same on the wire: the
// neighbour's one (empty) response is read and dropped.
class GrpcTransport::Writer
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit Writer(grpc::GenericStub* stub) {
    context_.set_wait_for_ready(true);  // the neighbour may still be starting
    stub->PrepareBidiStreamingCall(&context_, kSendSegments,
                                   grpc::StubOptions(), this);
    AddHold();
    StartRead(&response_);
    StartCall();
  }

  // Returns only after gRPC's last reaction (OnDone).
  ~Writer() override {
    if (!Done()) context_.TryCancel();
    ReleaseHold();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }

  // Queues `message`; see Transport::Send.
  absl::Status Write(grpc::ByteBuffer message) {
    {
      absl::MutexLock lock(&mu_);
      if (broken_) return BrokenStatusLocked();
      if (writing_) {
        queue_.push_back(std::move(message));
        return absl::OkStatus();
      }
      writing_ = true;
      current_ = std::move(message);
    }
    StartWrite(&current_);
    return absl::OkStatus();
  }

  // Waits until the queue is written and gRPC let go of every payload;
  // see Transport::Flush.
  absl::Status Flush(const WaitBound& bound) {
    const Waited waited =
        Await(absl::Condition(this, &Writer::WritesSettled), bound);
    bool failed;
    {
      absl::MutexLock lock(&mu_);
      failed = write_failed_;
    }
    if (waited == Waited::kDone && !failed) return absl::OkStatus();
    // Timed out, cancelled, or the stream broke (its status says why).
    // Cancelling fails the write in flight; gRPC then lets go of it and
    // ends the call (OnDone) promptly, or soon after a broken stream. The
    // queued copies go at once. (The rank's `data` was copied by Send: no
    // wait here protects it; a late OnDone is awaited by ~Writer.)
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      queue_.clear();
    }
    context_.TryCancel();
    ReleaseHold();
    absl::MutexLock lock(&mu_);
    const bool done = mu_.AwaitWithDeadline(
        absl::Condition(&done_),
        absl::Now() + (failed ? kBrokenStatusWait : kCancelWait));
    if (!failed) return GaveUp(waited, "take the segments");
    if (done && !status_.ok()) return FromGrpcStatus(status_);
    return absl::UnavailableError("the stream to the neighbour broke");
  }

  // Half-closes and waits for the neighbour to confirm it read everything.
  absl::Status Close(const WaitBound& bound) {
    absl::Status flushed = Flush(bound);
    if (!flushed.ok()) return flushed;
    bool half_close;
    {
      absl::MutexLock lock(&mu_);
      half_close = !broken_;
      broken_ = true;
    }
    if (half_close) StartWritesDone();
    ReleaseHold();
    const Waited waited = Await(absl::Condition(&done_), bound);
    if (waited == Waited::kDone) {
      absl::MutexLock lock(&mu_);
      return FromGrpcStatus(status_);
    }
    // Every write is done: gRPC holds no payload any more.
    context_.TryCancel();
    return GaveUp(waited, "confirm the last segments");
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      if (!ok || queue_.empty()) {
        writing_ = false;
        if (!ok) {
          write_failed_ = true;
          queue_.clear();
        }
        current_.Clear();
        return;
      }
      current_ = std::move(queue_.front());
      queue_.pop_front();
    }
    StartWrite(&current_);
  }
  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    done_ = true;
    writing_ = false;
    queue_.clear();
  }

 private:
  // How long Flush waits for gRPC to end the call after cancelling it:
  // after its own cancel (prompt; the SIGTERM bound of a second includes
  // it), and after the stream broke (for the status that says why).
  static constexpr absl::Duration kCancelWait = absl::Milliseconds(500);
  static constexpr absl::Duration kBrokenStatusWait = absl::Seconds(5);

  enum class Waited { kDone, kTimedOut, kCancelled };
  // Waits until `cond` holds (kDone; also when it holds once cancelled),
  // bound.deadline passes or bound.cancelled() is true, polling the latter
  // every bound.poll outside mu_.
  Waited Await(const absl::Condition& cond, const WaitBound& bound)
      ABSL_LOCKS_EXCLUDED(mu_) {
    for (;;) {
      const bool cancelled = bound.cancelled && bound.cancelled();
      absl::MutexLock lock(&mu_);
      if (cancelled) return cond.Eval() ? Waited::kDone : Waited::kCancelled;
      const absl::Time until =
          bound.cancelled ? std::min(bound.deadline, absl::Now() + bound.poll)
                          : bound.deadline;
      if (mu_.AwaitWithDeadline(cond, until)) return Waited::kDone;
      if (until >= bound.deadline) return Waited::kTimedOut;
    }
  }
  // Why a wait for the neighbour to `what` ended without it.
  static absl::Status GaveUp(Waited waited, absl::string_view what) {
    if (waited == Waited::kCancelled) {
      return absl::CancelledError(
          absl::StrCat("cancelled while waiting for the neighbour to ", what));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("the neighbour did not ", what, " in time"));
  }

  bool WritesSettled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !writing_ || write_failed_;
  }
  bool Done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }

  absl::Status BrokenStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (done_ && !status_.ok()) return FromGrpcStatus(status_);
    return absl::UnavailableError("the stream is closed");
  }
  // The rank's thread only.
  void ReleaseHold() {
    if (held_) RemoveHold();
    held_ = false;
  }

  grpc::ClientContext context_;
  grpc::ByteBuffer response_;
  bool held_ = true;  // the rank's thread only
  absl::Mutex mu_;
  // The write in flight (while writing_) and those waiting for it.
  grpc::ByteBuffer current_ ABSL_GUARDED_BY(mu_);
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // no more writes
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<GrpcTransport>> GrpcTransport::Create(
    int rank, int size, std::shared_ptr<grpc::Channel> right,
    RingPeerService* inbox, uint64_t session_id, uint64_t left_session_id,
    uint64_t generation) {
  if (size < 1 || rank < 0 || rank >= size || right == nullptr ||
      inbox == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad ring transport: rank ", rank, " of ", size));
  }
  if (session_id == 0 || left_session_id == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring transport of rank ", rank, ": a session id is missing"));
  }
  return std::unique_ptr<GrpcTransport>(
      new GrpcTransport(rank, size, std::move(right), inbox, session_id,
                        left_session_id, generation));
}

GrpcTransport::GrpcTransport(int rank, int size,
                             std::shared_ptr<grpc::Channel> right,
                             RingPeerService* inbox, uint64_t session_id,
                             uint64_t left_session_id, uint64_t generation)
    : rank_(rank),
      size_(size),
      session_id_(session_id),
      generation_(generation),
      channel_(std::move(right)),
      stub_(channel_),
      inbox_(inbox) {
  inbox_->mailbox()->ExpectSender((rank + size - 1) % size, left_session_id,
                                  generation);
}

GrpcTransport::~GrpcTransport() = default;

absl::Status GrpcTransport::Send(const SegmentKey& key,
                                 absl::Span<const float> data,
                                 pstrain::v1::DType wire, absl::Time deadline) {
  if (!IsRingWireDtype(wire)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": the ring sends fp32 or bf16, not ",
                     pstrain::v1::DType_Name(wire)));
  }
  if (writer_ == nullptr) {
    writer_ = std::make_unique<Writer>(&stub_);
  }
  absl::Status st = writer_->Write(
      EncodeSegment(key, rank_, session_id_, data, wire, generation_));
  if (!st.ok()) {
    return absl::Status(
        st.code(), absl::StrCat("rank ", rank_, ": sending ", key.ToString(),
                                " to rank ", right(), ": ", st.message()));
  }
  bytes_sent_ += RingWireBytes(wire, data.size());
  return absl::OkStatus();
}

absl::Status GrpcTransport::Flush(const WaitBound& bound) {
  if (writer_ == nullptr) return absl::OkStatus();  // never sent anything
  absl::Status st = writer_->Flush(bound);
  if (!st.ok()) {
    return absl::Status(
        st.code(), absl::StrCat("rank ", rank_, ": sending to rank ", right(),
                                ": ", st.message()));
  }
  return absl::OkStatus();
}

absl::Status GrpcTransport::Recv(const SegmentKey& key, Combine how,
                                 absl::Span<float> out, absl::Time deadline) {
  size_t received = 0;
  absl::Status st =
      inbox_->mailbox()->Take(key, left(), how, out, deadline, &received);
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("rank ", rank_, ": ", st.message()));
  }
  bytes_received_ += received;
  return absl::OkStatus();
}

absl::Status GrpcTransport::Close(const WaitBound& bound) {
  if (writer_ == nullptr) return absl::OkStatus();  // never sent anything
  absl::Status st = writer_->Close(bound);
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("rank ", rank_,
                                                ": closing the stream to "
                                                "rank ",
                                                right(), ": ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
