#include "worker/allreduce/ring_allreduce.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/low_precision.h"
#include "common/status_macros.h"
#include "worker/allreduce/ring_allgather.h"

namespace pstrain {

using pstrain::v1::ALL_GATHER;
using pstrain::v1::REDUCE_SCATTER;
using pstrain::v1::RingPhase;

ChunkRange RingChunk(size_t n, int parts, int c) {
  const size_t base = n / parts, longer = n % parts, i = c;
  return {i * base + std::min(i, longer), base + (i < longer ? 1 : 0)};
}

namespace {

// x = bf16(x), rounded to nearest even (exact in fp32).
void RoundToBf16(absl::Span<float> x) {
  for (float& v : x) v = Bf16ToFloat(FloatToBf16(v));
}

// The 2 (N - 1) rounds of one all-reduce, each segment passed on as soon as
// it is ready. Round j sends chunk OutChunk(j) and receives chunk InChunk(j);
// what a rank receives in round j is what it sends in round j + 1, so each
// received segment is queued for the right neighbour at once (Send does not
// wait) and segments stream through the ring without waiting for rounds.
class RingRounds {
 public:
  RingRounds(Transport* transport, uint64_t step, absl::Span<float> data,
             const RingOptions& options)
      : t_(transport),
        n_(transport->size()),
        rank_(transport->rank()),
        step_(step),
        data_(data),
        options_(options) {}

  absl::Status Run() {
    const int rounds = 2 * (n_ - 1);
    // Round 0 sends the rank's own chunk, all of it ready at once; it goes
    // kAhead segments ahead, then one more per segment received, so the
    // right neighbour's mailbox holds a few segments rather than a chunk.
    const size_t first = RingChunk(data_.size(), n_, OutChunk(0)).size;
    size_t sent0 = std::min(first, kAhead * options_.segment_elems);
    PS_RETURN_IF_ERROR(SendChunk(0, OutChunk(0), 0, sent0));
    for (int j = 0; j < rounds; ++j) {
      const int in = InChunk(j);
      const ChunkRange range = RingChunk(data_.size(), n_, in);
      for (size_t off = 0; off < range.size; off += options_.segment_elems) {
        const size_t len = std::min(options_.segment_elems, range.size - off);
        const SegmentKey key{step_, Phase(j), static_cast<uint32_t>(in),
                             range.begin + off};
        PS_RETURN_IF_ERROR(Recv(
            key, Phase(j) == REDUCE_SCATTER ? Combine::kAdd : Combine::kCopy,
            data_.subspan(range.begin + off, len)));
        // InChunk(j) == OutChunk(j + 1): this segment is ready to go on.
        // The last reduce-scatter round completed this sum: on a bf16 wire
        // it is rounded here, so the value this rank keeps is the one the
        // all-gather gives every other rank.
        if (j == n_ - 2 && options_.wire_dtype == pstrain::v1::DTYPE_BF16) {
          RoundToBf16(data_.subspan(range.begin + off, len));
        }
        if (j + 1 < rounds) PS_RETURN_IF_ERROR(SendChunk(j + 1, in, off, len));
        if (sent0 < first) {
          const size_t more = std::min(options_.segment_elems, first - sent0);
          PS_RETURN_IF_ERROR(SendChunk(0, OutChunk(0), sent0, more));
          sent0 += more;
        }
      }
      if (j == 0 && sent0 < first) {  // the chunks' last segments may differ
        PS_RETURN_IF_ERROR(SendChunk(0, OutChunk(0), sent0, first - sent0));
        sent0 = first;
      }
    }
    return absl::OkStatus();
  }

 private:
  // Reduce-scatter: in round k rank r passes chunk r - k and adds chunk
  // r - k - 1, so after N - 1 rounds it holds the full sum of chunk r + 1.
  // All-gather (round N - 1 + k): the finished chunks travel on, r + 1 - k
  // out and r - k in.
  RingPhase Phase(int j) const {
    return j < n_ - 1 ? REDUCE_SCATTER : ALL_GATHER;
  }
  int OutChunk(int j) const {
    return j < n_ - 1 ? Wrap(rank_ - j) : Wrap(rank_ + 1 - (j - (n_ - 1)));
  }
  int InChunk(int j) const {
    return j < n_ - 1 ? Wrap(rank_ - j - 1) : Wrap(rank_ - (j - (n_ - 1)));
  }
  int Wrap(int c) const { return ((c % n_) + n_) % n_; }
  absl::Time Deadline() const { return absl::Now() + options_.timeout; }

  // Round 0's segments sent before the first one is received.
  static constexpr size_t kAhead = 4;

  // Transport::Recv within options.timeout; with options.cancelled in
  // slices of options.poll, polling it in between (a Recv that runs out of
  // time changes nothing, so it is simply called again).
  absl::Status Recv(const SegmentKey& key, Combine how, absl::Span<float> out) {
    const absl::Time deadline = Deadline();
    for (;;) {
      if (options_.cancelled && options_.cancelled()) {
        return absl::CancelledError(absl::StrCat(
            "rank ", rank_, ": all-reduce cancelled while waiting for ",
            key.ToString()));
      }
      const absl::Time until =
          options_.cancelled ? std::min(deadline, absl::Now() + options_.poll)
                             : deadline;
      absl::Status st = t_->Recv(key, how, out, until);
      if (st.code() != absl::StatusCode::kDeadlineExceeded ||
          until >= deadline) {
        return st;
      }
    }
  }

  // Sends [offset, offset + len) of chunk `c` (clipped to the chunk) as
  // round j's segments.
  absl::Status SendChunk(int j, int c, size_t offset, size_t len) {
    const ChunkRange range = RingChunk(data_.size(), n_, c);
    const size_t end = std::min(range.size, offset + len);
    for (size_t off = offset; off < end; off += options_.segment_elems) {
      const size_t seg = std::min(options_.segment_elems, end - off);
      const SegmentKey key{step_, Phase(j), static_cast<uint32_t>(c),
                           range.begin + off};
      PS_RETURN_IF_ERROR(t_->Send(key, data_.subspan(range.begin + off, seg),
                                  options_.wire_dtype, Deadline()));
    }
    return absl::OkStatus();
  }

  Transport* const t_;
  const int n_, rank_;
  const uint64_t step_;
  const absl::Span<float> data_;
  const RingOptions& options_;
};

}  // namespace

absl::Status RingAllReduce(Transport* transport, uint64_t step,
                           absl::Span<float> data, const RingOptions& options) {
  if (options.segment_elems == 0) {
    return absl::InvalidArgumentError("segment_elems must be > 0");
  }
  if (!IsRingWireDtype(options.wire_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ring's wire dtype must be fp32 or bf16, not ",
                     pstrain::v1::DType_Name(options.wire_dtype)));
  }
  if (transport->size() == 1) return absl::OkStatus();
  absl::Status status = RingRounds(transport, step, data, options).Run();
  // The transport may still be reading `data` for segments on their way:
  // wait for them (after an error, give up on them at once), so that the
  // caller may change `data` when this returns.
  absl::Status flushed = transport->Flush(WaitBound(
      status.ok() ? absl::Now() + options.timeout : absl::InfinitePast(),
      options.cancelled, options.poll));
  return status.ok() ? flushed : status;
}

absl::Status RingAllReducer::AllGather(uint64_t step,
                                       absl::Span<const uint64_t> sizes,
                                       absl::Span<float> data) {
  return RingAllGather(transport_, step, sizes, data, options_);
}

std::string RingAllReducer::name() const {
  return absl::StrCat(
      "ring over ", transport_->size(), " ranks, ",
      options_.segment_elems * sizeof(float), "-byte segments",
      options_.wire_dtype == pstrain::v1::DTYPE_BF16 ? ", bf16 wire" : "");
}

}  // namespace pstrain
