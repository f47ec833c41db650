#include "worker/allreduce/ring_allreduce.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace pstrain {

using pstrain::v1::ALL_GATHER;
using pstrain::v1::REDUCE_SCATTER;
using pstrain::v1::RingPhase;

ChunkRange RingChunk(size_t n, int parts, int c) {
  const size_t base = n / parts, longer = n % parts, i = c;
  return {i * base + std::min(i, longer), base + (i < longer ? 1 : 0)};
}

absl::Status RingAllReduce(Transport* transport, uint64_t step,
                           absl::Span<float> data, const RingOptions& options) {
  const int n = transport->size(), rank = transport->rank();
  const size_t seg = options.segment_elems;
  if (seg == 0) return absl::InvalidArgumentError("segment_elems must be > 0");
  if (n == 1) return absl::OkStatus();
  auto chunk_at = [n](int c) { return ((c % n) + n) % n; };
  auto deadline = [&] { return absl::Now() + options.timeout; };
  std::vector<float> incoming(std::min(seg, data.size() / n + 1));

  // One ring round, segment by segment: pass chunk `out` on to the right
  // neighbour and take chunk `in` from the left one, adding it to ours
  // (reduce-scatter) or overwriting ours with it (all-gather). Sending
  // segment s before waiting for segment s lets the right neighbour start
  // while this rank is still receiving.
  auto round = [&](RingPhase phase, int out, int in) -> absl::Status {
    const ChunkRange send = RingChunk(data.size(), n, out);
    const ChunkRange recv = RingChunk(data.size(), n, in);
    for (size_t off = 0; off < std::max(send.size, recv.size); off += seg) {
      if (off < send.size) {
        const size_t len = std::min(seg, send.size - off);
        const SegmentKey key{step, phase, static_cast<uint32_t>(out),
                             send.begin + off};
        PS_RETURN_IF_ERROR(transport->Send(
            key, data.subspan(send.begin + off, len), deadline()));
      }
      if (off < recv.size) {
        const size_t len = std::min(seg, recv.size - off);
        const SegmentKey key{step, phase, static_cast<uint32_t>(in),
                             recv.begin + off};
        absl::Span<float> mine = data.subspan(recv.begin + off, len);
        if (phase == ALL_GATHER) {
          PS_RETURN_IF_ERROR(transport->Recv(key, mine, deadline()));
        } else {
          absl::Span<float> theirs(incoming.data(), len);
          PS_RETURN_IF_ERROR(transport->Recv(key, theirs, deadline()));
          for (size_t i = 0; i < len; ++i) mine[i] = theirs[i] + mine[i];
        }
      }
    }
    return absl::OkStatus();
  };

  // Reduce-scatter: in round k rank r passes chunk r - k and adds chunk
  // r - k - 1, so after N - 1 rounds it holds the full sum of chunk r + 1.
  for (int k = 0; k < n - 1; ++k) {
    PS_RETURN_IF_ERROR(
        round(REDUCE_SCATTER, chunk_at(rank - k), chunk_at(rank - k - 1)));
  }
  // All-gather: the finished chunks travel on around the ring.
  for (int k = 0; k < n - 1; ++k) {
    PS_RETURN_IF_ERROR(
        round(ALL_GATHER, chunk_at(rank + 1 - k), chunk_at(rank - k)));
  }
  return absl::OkStatus();
}

std::string RingAllReducer::name() const {
  return absl::StrCat("ring over ", transport_->size(), " ranks, ",
                      options_.segment_elems * sizeof(float), "-byte segments");
}

}  // namespace pstrain
