#include "worker/allreduce/ring_allgather.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace pstrain {

namespace {

using pstrain::v1::ROW_GATHER;

// Round 0's segments sent before the first one is received (as the ring
// all-reduce: the right neighbour's mailbox holds a few segments, not a
// block).
constexpr uint64_t kAhead = 4;

class GatherRounds {
 public:
  GatherRounds(Transport* transport, uint64_t step,
               absl::Span<const uint64_t> sizes, absl::Span<float> data,
               const RingOptions& options)
      : t_(transport),
        n_(transport->size()),
        rank_(transport->rank()),
        step_(step),
        sizes_(sizes),
        data_(data),
        options_(options) {
    uint64_t at = 0;
    for (uint64_t s : sizes_) {
      offsets_.push_back(at);
      at += s;
    }
  }

  absl::Status Run() {
    const uint64_t seg = options_.segment_elems;
    const uint64_t own = sizes_[rank_];
    uint64_t sent0 = std::min(own, kAhead * seg);
    PS_RETURN_IF_ERROR(Send(rank_, 0, sent0));
    for (int j = 0; j < n_ - 1; ++j) {
      const int in = Wrap(rank_ - j - 1);  // what round j + 1 passes on
      for (uint64_t off = 0; off < sizes_[in]; off += seg) {
        const uint64_t len = std::min(seg, sizes_[in] - off);
        PS_RETURN_IF_ERROR(Recv(in, off, len));
        if (j + 1 < n_ - 1) PS_RETURN_IF_ERROR(Send(in, off, len));
        if (sent0 < own) {
          const uint64_t more = std::min(seg, own - sent0);
          PS_RETURN_IF_ERROR(Send(rank_, sent0, more));
          sent0 += more;
        }
      }
      if (sent0 < own) {  // the blocks' sizes differ
        PS_RETURN_IF_ERROR(Send(rank_, sent0, own - sent0));
        sent0 = own;
      }
    }
    return absl::OkStatus();
  }

 private:
  int Wrap(int c) const { return ((c % n_) + n_) % n_; }
  absl::Time Deadline() const { return absl::Now() + options_.timeout; }
  SegmentKey Key(int block, uint64_t off) const {
    return SegmentKey{step_, ROW_GATHER, static_cast<uint32_t>(block), off};
  }

  // [off, off + len) of `block`, in segments.
  absl::Status Send(int block, uint64_t off, uint64_t len) {
    const uint64_t end = off + len;
    for (uint64_t at = off; at < end; at += options_.segment_elems) {
      const uint64_t seg = std::min<uint64_t>(options_.segment_elems, end - at);
      PS_RETURN_IF_ERROR(t_->Send(Key(block, at),
                                  data_.subspan(offsets_[block] + at, seg),
                                  pstrain::v1::DTYPE_F32, Deadline()));
    }
    return absl::OkStatus();
  }

  // One segment, within options.timeout, polling options.cancelled as
  // RingAllReduce does.
  absl::Status Recv(int block, uint64_t off, uint64_t len) {
    const SegmentKey key = Key(block, off);
    const absl::Span<float> out = data_.subspan(offsets_[block] + off, len);
    const absl::Time deadline = Deadline();
    for (;;) {
      if (options_.cancelled && options_.cancelled()) {
        return absl::CancelledError(absl::StrCat(
            "rank ", rank_, ": all-gather cancelled while waiting for ",
            key.ToString()));
      }
      const absl::Time until =
          options_.cancelled ? std::min(deadline, absl::Now() + options_.poll)
                             : deadline;
      absl::Status st = t_->Recv(key, Combine::kCopy, out, until);
      if (st.code() != absl::StatusCode::kDeadlineExceeded ||
          until >= deadline) {
        return st;
      }
    }
  }

  Transport* const t_;
  const int n_, rank_;
  const uint64_t step_;
  const absl::Span<const uint64_t> sizes_;
  const absl::Span<float> data_;
  const RingOptions& options_;
  std::vector<uint64_t> offsets_;
};

}  // namespace

absl::Status RingAllGather(Transport* transport, uint64_t step,
                           absl::Span<const uint64_t> sizes,
                           absl::Span<float> data, const RingOptions& options) {
  if (options.segment_elems == 0) {
    return absl::InvalidArgumentError("segment_elems must be > 0");
  }
  if (sizes.size() != static_cast<size_t>(transport->size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-gather: ", sizes.size(), " block sizes for ",
                     transport->size(), " ranks"));
  }
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  if (total != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-gather: blocks of ", total, " floats in all, data ", data.size()));
  }
  if (transport->size() == 1) return absl::OkStatus();
  absl::Status status =
      GatherRounds(transport, step, sizes, data, options).Run();
  // As RingAllReduce: the caller may change `data` once this returns.
  absl::Status flushed = transport->Flush(WaitBound(
      status.ok() ? absl::Now() + options.timeout : absl::InfinitePast(),
      options.cancelled, options.poll));
  return status.ok() ? flushed : status;
}

}  // namespace pstrain
