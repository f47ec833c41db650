// A blocking streaming call by method name, on gRPC's public API only
// (grpc::TemplatedGenericStub and a completion queue of the call's own),
// for raw (grpc::ByteBuffer) messages that are built and parsed by hand
// (common/chunk_frames.h) without a protobuf copy.
//
// Every call is a bidi stream at this end; on the wire a bidi call is the
// same as a client- or server-streaming one (the method is named by its
// path, messages are length-prefixed frames), so peers that use the
// generated stubs or handlers for that method interoperate unchanged. A
// client-streaming method answers with one message before its status
// (FinishWithResponse), a server-streaming one takes one request
// (WriteLast) and answers with any number.
//
// Thread-compatible: one thread at a time (the caller's), one operation in
// flight. Every wait ends when the operation completes, which the call's
// deadline (ClientContext::set_deadline) and ClientContext::TryCancel from
// any thread bound.
#ifndef PSTRAIN_COMMON_SYNC_GENERIC_CALL_H_
#define PSTRAIN_COMMON_SYNC_GENERIC_CALL_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace pstrain {

template <class W, class R>
class SyncGenericCall {
 public:
  // When the call's initial metadata leaves: at once (kNow, as a generated
  // synchronous client-streaming call does: the server sees the stream
  // open before any message), or with the first message or the half-close
  // (kWithFirstMessage, one batch, as a generated synchronous
  // server-streaming call sends its request).
  enum class Open { kNow, kWithFirstMessage };

  // Starts `method` ("/package.Service/Method") on `stub`'s channel.
  // `context` must outlive this object. With kNow, a failure to send the
  // metadata shows as a failed first operation (Finish says why).
  SyncGenericCall(grpc::TemplatedGenericStub<W, R>* stub,
                  grpc::ClientContext* context, const std::string& method,
                  Open open)
      : context_(context) {
    if (open == Open::kWithFirstMessage) {
      context_->set_initial_metadata_corked(true);
    }
    call_ = stub->PrepareCall(context_, method, &cq_);
    if (call_ == nullptr) return;
    if (open == Open::kWithFirstMessage) {
      call_->StartCall(nullptr);  // corked: performs no operation
    } else if (!Await([&](void* tag) { call_->StartCall(tag); })) {
      broken_ = true;
    }
  }
  SyncGenericCall(const SyncGenericCall&) = delete;
  SyncGenericCall& operator=(const SyncGenericCall&) = delete;

  // Cancels the call if Finish was not called, and waits for gRPC to let
  // go of it.
  ~SyncGenericCall() {
    if (call_ != nullptr && !finished_) {
      context_->TryCancel();
      Finish();
    }
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  // Each returns false once the stream is broken (cancelled, past its
  // deadline, or ended by the server); Finish then says why.
  bool Write(const W& message) {
    return Await([&](void* tag) { call_->Write(message, tag); });
  }
  // Writes `message` and half-closes, in one batch.
  bool WriteLast(const W& message) {
    return Await([&](void* tag) {
      call_->Write(message, grpc::WriteOptions().set_last_message(), tag);
    });
  }
  bool WritesDone() {
    return Await([&](void* tag) { call_->WritesDone(tag); });
  }
  // False at the end of the server's messages, or when the stream broke.
  bool Read(R* message) {
    return Await([&](void* tag) { call_->Read(message, tag); });
  }

  // The call's status; call once, after the last Read or after a failed
  // Write (the status then says why the stream broke).
  grpc::Status Finish() {
    if (call_ == nullptr) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "gRPC could not create the call");
    }
    finished_ = true;
    broken_ = false;  // the status is still to be received
    grpc::Status status;
    if (!Await([&](void* tag) { call_->Finish(&status, tag); })) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "gRPC did not report the call's status");
    }
    return status;
  }

  // For a client-streaming method: reads its one response into `response`,
  // then the status (INTERNAL when the server answered OK without one, as
  // a generated stub says).
  grpc::Status FinishWithResponse(R* response) {
    const bool got = Read(response);
    grpc::Status status = Finish();
    if (status.ok() && !got) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "no message returned for a client-streaming call");
    }
    return status;
  }

 private:
  // Starts one operation with a tag and waits for its completion.
  template <class Start>
  bool Await(Start start) {
    if (call_ == nullptr || broken_) return false;
    start(this);
    void* tag = nullptr;
    bool ok = false;
    return cq_.Next(&tag, &ok) && ok;
  }

  grpc::ClientContext* const context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<W, R>> call_;
  bool finished_ = false;
  bool broken_ = false;  // the metadata could not be sent
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SYNC_GENERIC_CALL_H_
