// Transport between worker processes over gRPC. Each worker runs a
// RingPeerService (registered on its own grpc::Server, whose address the
// coordinator hands to the left neighbour) and holds one GrpcTransport whose
// single long-lived SendSegments stream goes to its right neighbour. Both
// sides use the callback API: no threads of our own. Segments skip
// protobuf's copies (segment_wire.h): the sender copies the floats once into
// a gRPC slice, and the receiver adds or copies straight from the received
// slices; sends are queued and written one after another by gRPC's
// callbacks while the rank receives.
#ifndef PSTRAIN_WORKER_ALLREDUCE_GRPC_TRANSPORT_H_
#define PSTRAIN_WORKER_ALLREDUCE_GRPC_TRANSPORT_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/allreduce/mailbox.h"
#include "worker/allreduce/transport.h"

namespace pstrain {

// HTTP/2 settings for both ends of the ring's links (the RingPeer server's
// int_args for StartGrpcServer, and MakeRingChannel's): the BDP probe off
// and a 16 MiB lookahead. Measured with gRPC 1.51 (strace of ring_bench):
// every segment leaves as a 64 KiB write and, after the receiver's
// WINDOW_UPDATE, the rest (a round trip per segment), with or without the
// lookahead. The lookahead is the streams' initial window, but with the
// probe off the connection's window stays at 64 KiB plus what the open
// reads ask for beyond their streams' windows (gRPC 1.51's
// TransportFlowControl::target_window), and no channel argument sets it.
// With the probe on a segment leaves in one write, yet the ring is slower
// at every size (docs/architecture.md, "Ring all-reduce transport";
// CHANGELOG.md).
std::vector<std::pair<std::string, int>> RingLinkArgs();

// A channel to a RingPeer server at `address` with pstrain's defaults
// (common/grpc_util.h) and `link_args` (RingLinkArgs() unless a benchmark
// compares others); plaintext when `credentials` is null.
std::shared_ptr<grpc::Channel> MakeRingChannel(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
    const std::vector<std::pair<std::string, int>>& link_args = RingLinkArgs());

// Receives segments from the left neighbour into a mailbox. Thread-safe. It
// can serve before the rank is known (the address is registered first).
// Must outlive the grpc::Server it is registered on and every transport
// reading from it.
// A stream is its first segment's sender's: the mailbox counts it as the
// stream from rank r (whose break fails the rank's next Take at once) only
// if that segment carried the id and generation the rank expects from r
// (mailbox.h); a stream claiming another sender later is PERMISSION_DENIED.
// A stream that sends no segment within `first_segment_timeout` of opening
// is ended DEADLINE_EXCEEDED and changes nothing (GrpcTransport sends its
// first segment as it opens the stream).
// SendSegments is served raw (grpc::ByteBuffer) so that segments are parsed
// in place (segment_wire.h); on the wire it is the RingPeer service of
// proto/pstrain.proto.
class RingPeerService final
    : public pstrain::v1::RingPeer::WithRawCallbackMethod_SendSegments<
          pstrain::v1::RingPeer::Service> {
 public:
  static constexpr absl::Duration kDefaultFirstSegmentTimeout =
      absl::Seconds(10);

  explicit RingPeerService(
      absl::Duration first_segment_timeout = kDefaultFirstSegmentTimeout)
      : first_segment_timeout_(first_segment_timeout) {}

  Mailbox* mailbox() { return &mailbox_; }
  uint64_t segments_received() const { return segments_.load(); }
  // SendSegments streams not ended yet (a neighbour still sending, or one
  // that holds its stream open: stopped, hung).
  int open_streams() const { return open_streams_.load(); }

  grpc::ServerReadReactor<grpc::ByteBuffer>* SendSegments(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;

 private:
  const absl::Duration first_segment_timeout_;
  Mailbox mailbox_;
  std::atomic<uint64_t> segments_{0};
  std::atomic<int> open_streams_{0};
};

class GrpcTransport final : public Transport {
 public:
  // Rank `rank` of `size`: sends over `right` (a channel to the right
  // neighbour's RingPeerService), receives from `inbox` (this worker's
  // service), which must outlive the transport. The stream opens on the
  // first Send and waits for the neighbour to come up (within Send's
  // deadline). Every segment sent carries `session_id` (this process's, from
  // RegisterWorker); the inbox takes only segments from the left neighbour
  // carrying `left_session_id` (GetPeersResponse.left_session_id; see
  // mailbox.h). Segments carry `generation` (JobSpec.generation) both ways:
  // the inbox refuses older ones (training.on_failure: restart re-forms the
  // ring with a new transport per generation on the same inbox).
  // INVALID_ARGUMENT for a bad rank or size or a missing (0) id.
  static absl::StatusOr<std::unique_ptr<GrpcTransport>> Create(
      int rank, int size, std::shared_ptr<grpc::Channel> right,
      RingPeerService* inbox, uint64_t session_id, uint64_t left_session_id,
      uint64_t generation = 0);
  // Cancels the stream if it is still open and waits for gRPC to let go.
  ~GrpcTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status Send(const SegmentKey& key, absl::Span<const float> data,
                    pstrain::v1::DType wire, absl::Time deadline) override;
  absl::Status Flush(const WaitBound& bound) override;
  absl::Status Recv(const SegmentKey& key, Combine how, absl::Span<float> out,
                    absl::Time deadline) override;
  absl::Status Close(const WaitBound& bound) override;
  uint64_t bytes_sent() const override { return bytes_sent_.load(); }
  uint64_t bytes_received() const override { return bytes_received_.load(); }

 private:
  class Writer;  // the SendSegments client reactor
  GrpcTransport(int rank, int size, std::shared_ptr<grpc::Channel> right,
                RingPeerService* inbox, uint64_t session_id,
                uint64_t left_session_id, uint64_t generation);

  const int rank_, size_;
  const uint64_t session_id_;
  const uint64_t generation_;
  const std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub stub_;  // RingPeer.SendSegments, raw
  RingPeerService* const inbox_;
  std::unique_ptr<Writer> writer_;  // null until the first Send
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_GRPC_TRANSPORT_H_
