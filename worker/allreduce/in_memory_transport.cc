#include "worker/allreduce/in_memory_transport.h"

#include <atomic>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/allreduce/mailbox.h"

namespace pstrain {
namespace {

// One process, no strangers: rank r's session id is r + 1 (the mailboxes
// check them as GrpcTransport's inbox does, and take no segment before they
// know their sender).
uint64_t SessionId(int rank) { return static_cast<uint64_t>(rank) + 1; }

class InMemoryTransport : public Transport {
 public:
  InMemoryTransport(int rank, std::shared_ptr<std::vector<Mailbox>> mailboxes)
      : rank_(rank), mailboxes_(std::move(mailboxes)) {
    (*mailboxes_)[rank_].ExpectSender(left(), SessionId(left()));
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(mailboxes_->size()); }

  absl::Status Send(const SegmentKey& key, absl::Span<const float> data,
                    pstrain::v1::DType wire, absl::Time deadline) override {
    if (closed_) return absl::FailedPreconditionError("transport is closed");
    if (!IsRingWireDtype(wire)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank_, ": the ring sends fp32 or bf16, not ",
                       pstrain::v1::DType_Name(wire)));
    }
    std::string bytes(RingWireBytes(wire, data.size()), '\0');
    EncodeRingWire(data, wire, bytes.data());
    bytes_sent_ += bytes.size();
    SegmentPayload payload = SegmentPayload::FromString(std::move(bytes));
    payload.dtype = wire;
    return (*mailboxes_)[right()].Put(key, rank_, SessionId(rank_),
                                      std::move(payload));
  }

  // Send copied the data into the neighbour's mailbox: nothing is in
  // flight, so there is nothing to wait for (or to cancel).
  absl::Status Flush(const WaitBound& bound) override {
    return absl::OkStatus();
  }

  absl::Status Recv(const SegmentKey& key, Combine how, absl::Span<float> out,
                    absl::Time deadline) override {
    size_t received = 0;
    absl::Status st =
        (*mailboxes_)[rank_].Take(key, left(), how, out, deadline, &received);
    if (!st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("rank ", rank_, ": ", st.message()));
    }
    bytes_received_ += received;
    return absl::OkStatus();
  }

  // The neighbour has every segment already (see Flush).
  absl::Status Close(const WaitBound& bound) override {
    closed_ = true;
    return absl::OkStatus();
  }

  uint64_t bytes_sent() const override { return bytes_sent_.load(); }
  uint64_t bytes_received() const override { return bytes_received_.load(); }

 private:
  const int rank_;
  const std::shared_ptr<std::vector<Mailbox>> mailboxes_;
  bool closed_ = false;
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Transport>>> CreateInMemoryRing(
    int size) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ring needs at least one rank, got ", size));
  }
  auto mailboxes = std::make_shared<std::vector<Mailbox>>(size);
  std::vector<std::unique_ptr<Transport>> ring;
  for (int r = 0; r < size; ++r) {
    ring.push_back(std::make_unique<InMemoryTransport>(r, mailboxes));
  }
  return ring;
}

}  // namespace pstrain
