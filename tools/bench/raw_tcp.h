// A transport floor for ps_bench: the push and pull of one fp32 tensor over
// one plain TCP connection (POSIX sockets on 127.0.0.1), with the server
// applying the same SGD rule as the shard (common/optimizer, lr 0.01). It is
// a measuring instrument, not a product path: no framing beyond an op byte,
// no sessions, no validation beyond the sizes, one client at a time. It
// shows what the bytes and the apply cost on this machine without gRPC,
// protobuf and pstrain's bookkeeping, between iperf3 and the bare gRPC
// stream in ps_bench's table.
//
// Protocol on the connection: the client writes one op byte; 'L' (pull):
// the server writes the weights (elems * 4 bytes); 'P' (push): the client
// writes the gradient (elems * 4 bytes), the server receives it chunk by
// chunk (chunk_elems), applies each chunk as it is complete, and writes one
// byte 'A' when the whole gradient is applied. Closing the connection ends
// the server's thread.
#ifndef PSTRAIN_TOOLS_BENCH_RAW_TCP_H_
#define PSTRAIN_TOOLS_BENCH_RAW_TCP_H_

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/optimizer.h"
#include "tools/bench/pull_push_steps.h"

namespace pstrain::bench {

// A raw-TCP parameter server of one tensor and its one client, in this
// process (the server on a thread of its own). Not thread-safe: one caller
// drives Pull and Push. Every socket wait is bounded by `io_timeout`
// (DEADLINE_EXCEEDED past it).
class RawTcpPs {
 public:
  // A server of `elems` zero weights (elems >= 1; SGD at lr 0.01, the
  // gradient applied in chunks of `chunk_elems`, >= 1, 4 MiB by default as
  // the shard's), listening on 127.0.0.1 port 0, and a client connected to
  // it. INVALID_ARGUMENT for a zero size; the socket call's errno otherwise.
  static absl::StatusOr<std::unique_ptr<RawTcpPs>> Start(
      uint64_t elems, uint64_t chunk_elems = (4 << 20) / sizeof(float),
      absl::Duration io_timeout = absl::Seconds(60));
  // Closes the connection and joins the server's thread.
  ~RawTcpPs();

  // The server's weights into *weights (resized to elems).
  absl::Status Pull(std::vector<float>* weights);
  // `grad` (elems values) to the server; returns once it is applied.
  // INVALID_ARGUMENT for a wrong size (nothing sent).
  absl::Status Push(const std::vector<float>& grad);

  uint64_t elems() const { return elems_; }

 private:
  RawTcpPs(uint64_t elems, uint64_t chunk_elems,
           std::unique_ptr<Optimizer> optimizer)
      : elems_(elems),
        chunk_elems_(chunk_elems),
        optimizer_(std::move(optimizer)) {}
  // The server's loop over one accepted connection; its status in
  // server_status_.
  void Serve(int listen_fd);

  const uint64_t elems_;
  const uint64_t chunk_elems_;
  const std::unique_ptr<Optimizer> optimizer_;
  int client_fd_ = -1;
  std::vector<float> weights_;  // the server's (its thread only)
  std::vector<float> grad_;     // the server's receive buffer
  uint64_t applied_ = 0;        // pushes applied (the server's thread)
  absl::Status server_status_;  // written by the thread, read after join
  std::thread server_;
};

// Seconds of one raw-TCP pull and push per step over one connection
// (TimePullPushSteps, pull_push_steps.h).
absl::StatusOr<PullPushSeconds> MeasureRawTcpPs(uint64_t elems, int steps);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_RAW_TCP_H_
