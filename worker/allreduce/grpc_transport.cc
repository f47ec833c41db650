#include "worker/allreduce/grpc_transport.h"

#include <grpc/grpc.h>

#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"

namespace pstrain {

using pstrain::v1::RingSegment;

namespace {

// One incoming SendSegments stream: every segment goes to the mailbox until
// the left neighbour half-closes (OK) or sends something bad (its error). A
// stream that ends any other way (cancelled, past its deadline, an
// undecodable frame) is not a clean end: the mailbox learns that the sender's
// stream broke, so the rank's next Take from it fails at once.
class SegmentReader : public grpc::ServerReadReactor<RingSegment> {
 public:
  SegmentReader(Mailbox* mailbox, std::atomic<uint64_t>* segments,
                grpc::CallbackServerContext* context,
                pstrain::v1::SendSegmentsResponse* response)
      : mailbox_(mailbox),
        segments_(segments),
        context_(context),
        response_(response) {
    StartRead(&segment_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (grpc_call_failed_before_recv_message(context_->c_call()) ||
          context_->IsCancelled()) {
        if (sender_.has_value()) {
          mailbox_->Fail(*sender_,
                         absl::DataLossError(absl::StrCat(
                             "the stream ended without a clean close after ",
                             count_, " segments")));
        }
        Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                            "segment stream ended without a clean close"));
        return;
      }
      response_->set_segments(count_);
      Finish(grpc::Status::OK);
      return;
    }
    sender_ = segment_.from_rank();
    SegmentKey key{segment_.step(), segment_.phase(), segment_.chunk(),
                   segment_.offset()};
    absl::Status st =
        mailbox_->Put(key, segment_.from_rank(), segment_.session_id(),
                      std::move(*segment_.mutable_data()));
    if (!st.ok()) {
      Finish(ToGrpcStatus(st));
      return;
    }
    ++count_;
    segments_->fetch_add(1);
    StartRead(&segment_);
  }

  void OnDone() override { delete this; }

 private:
  Mailbox* const mailbox_;
  std::atomic<uint64_t>* const segments_;
  grpc::CallbackServerContext* const context_;
  pstrain::v1::SendSegmentsResponse* const response_;
  std::optional<uint32_t> sender_;  // from_rank of the last segment read
  RingSegment segment_;
  uint64_t count_ = 0;
};

}  // namespace

grpc::ServerReadReactor<RingSegment>* RingPeerService::SendSegments(
    grpc::CallbackServerContext* context,
    pstrain::v1::SendSegmentsResponse* response) {
  return new SegmentReader(&mailbox_, &segments_, context, response);
}

// The outgoing stream. One write at a time, started by the rank's thread
// (hence the hold, released by Close or on failure) and awaited with a
// deadline; a write that misses its deadline cancels the stream. gRPC may run
// reactions inline from Start*, RemoveHold and TryCancel, so those are called
// without holding mu_.
class GrpcTransport::Writer : public grpc::ClientWriteReactor<RingSegment> {
 public:
  explicit Writer(pstrain::v1::RingPeer::Stub* stub) {
    context_.set_wait_for_ready(true);  // the neighbour may still be starting
    stub->async()->SendSegments(&context_, &response_, this);
    AddHold();
    StartCall();
  }

  // Returns only after gRPC's last reaction (OnDone).
  ~Writer() override {
    if (!Done()) context_.TryCancel();
    ReleaseHold();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }

  // Sends `segment` (taken over); see Transport::Send.
  absl::Status Write(RingSegment segment, absl::Time deadline) {
    {
      absl::MutexLock lock(&mu_);
      if (broken_) return BrokenStatusLocked();
      writing_ = true;
    }
    segment_ = std::move(segment);
    StartWrite(&segment_);
    bool settled;
    {
      absl::MutexLock lock(&mu_);
      settled = mu_.AwaitWithDeadline(
          absl::Condition(this, &Writer::WriteSettled), deadline);
      if (settled && write_ok_) return absl::OkStatus();
      broken_ = true;
    }
    // Timed out, or the stream broke (its status says why).
    context_.TryCancel();
    ReleaseHold();
    if (!settled) {
      return absl::DeadlineExceededError(
          "the neighbour did not take the segment in time");
    }
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithDeadline(absl::Condition(&done_),
                              absl::Now() + absl::Seconds(1)) &&
        !status_.ok()) {
      return FromGrpcStatus(status_);
    }
    return absl::UnavailableError("the stream to the neighbour broke");
  }

  // Half-closes and waits for the neighbour to confirm it read everything.
  absl::Status Close(absl::Time deadline) {
    bool half_close;
    {
      absl::MutexLock lock(&mu_);
      half_close = !broken_;
      broken_ = true;
    }
    if (half_close) StartWritesDone();
    ReleaseHold();
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithDeadline(absl::Condition(&done_), deadline)) {
        return FromGrpcStatus(status_);
      }
    }
    context_.TryCancel();
    return absl::DeadlineExceededError(
        "the neighbour did not confirm the last segments in time");
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    write_ok_ = ok;
  }
  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    done_ = true;
  }

 private:
  bool WriteSettled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !writing_;
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
  pstrain::v1::SendSegmentsResponse response_;
  RingSegment segment_;  // owned by the write in flight until OnWriteDone
  bool held_ = true;     // the rank's thread only
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = true;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // no more writes
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<GrpcTransport>> GrpcTransport::Create(
    int rank, int size, std::shared_ptr<grpc::Channel> right,
    RingPeerService* inbox, uint64_t session_id, uint64_t left_session_id) {
  if (size < 1 || rank < 0 || rank >= size || right == nullptr ||
      inbox == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad ring transport: rank ", rank, " of ", size));
  }
  if (session_id == 0 || left_session_id == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring transport of rank ", rank, ": a session id is missing"));
  }
  return std::unique_ptr<GrpcTransport>(new GrpcTransport(
      rank, size, std::move(right), inbox, session_id, left_session_id));
}

GrpcTransport::GrpcTransport(int rank, int size,
                             std::shared_ptr<grpc::Channel> right,
                             RingPeerService* inbox, uint64_t session_id,
                             uint64_t left_session_id)
    : rank_(rank),
      size_(size),
      session_id_(session_id),
      channel_(std::move(right)),
      stub_(pstrain::v1::RingPeer::NewStub(channel_)),
      inbox_(inbox) {
  inbox_->mailbox()->ExpectSender((rank + size - 1) % size, left_session_id);
}

GrpcTransport::~GrpcTransport() = default;

absl::Status GrpcTransport::Send(const SegmentKey& key,
                                 absl::Span<const float> data,
                                 absl::Time deadline) {
  if (writer_ == nullptr) writer_ = std::make_unique<Writer>(stub_.get());
  RingSegment segment;
  segment.set_step(key.step);
  segment.set_phase(key.phase);
  segment.set_chunk(key.chunk);
  segment.set_offset(key.offset);
  segment.set_from_rank(rank_);
  segment.set_session_id(session_id_);
  segment.mutable_data()->assign(reinterpret_cast<const char*>(data.data()),
                                 data.size() * sizeof(float));
  absl::Status st = writer_->Write(std::move(segment), deadline);
  if (!st.ok()) {
    return absl::Status(
        st.code(), absl::StrCat("rank ", rank_, ": sending ", key.ToString(),
                                " to rank ", right(), ": ", st.message()));
  }
  bytes_sent_ += data.size() * sizeof(float);
  return absl::OkStatus();
}

absl::Status GrpcTransport::Recv(const SegmentKey& key, absl::Span<float> out,
                                 absl::Time deadline) {
  absl::Status st = inbox_->mailbox()->Take(key, left(), out, deadline);
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("rank ", rank_, ": ", st.message()));
  }
  bytes_received_ += out.size() * sizeof(float);
  return absl::OkStatus();
}

absl::Status GrpcTransport::Close(absl::Time deadline) {
  if (writer_ == nullptr) return absl::OkStatus();  // never sent anything
  absl::Status st = writer_->Close(deadline);
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("rank ", rank_,
                                                ": closing the stream to "
                                                "rank ",
                                                right(), ": ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
