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
// byte 'A' when the whole gradient is applied; 'U' (upload): the same bytes
// received the same way, nothing applied, then 'A'. Closing the connection
// ends the server.
//
// The server runs on a thread of this process (Start) or in a process of
// its own (ServeRawTcpPs, started by MeasureRawTcpPsApart with ps_bench's
// --serve_raw_tcp, on the CPU psctl run gives ps_server), as pstrain's
// shards and the bare gRPC anchor run in ps_bench's goal rows.
#ifndef PSTRAIN_TOOLS_BENCH_RAW_TCP_H_
#define PSTRAIN_TOOLS_BENCH_RAW_TCP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tools/bench/pull_push_steps.h"

namespace pstrain::bench {

class RawTcpServer;

// A client of a raw-TCP parameter server of one tensor: the server on a
// thread of this process (Start) or in another process (Connect). Not
// thread-safe: one caller drives Pull, Push and Upload. Every socket wait
// is bounded by `io_timeout` (DEADLINE_EXCEEDED past it).
class RawTcpPs {
 public:
  // A server of `elems` zero weights (elems >= 1; SGD at lr 0.01, the
  // gradient applied in chunks of `chunk_elems`, >= 1), listening on
  // 127.0.0.1 port 0, on a thread of this process, and a client connected to
  // it. INVALID_ARGUMENT for a zero size; the socket call's errno otherwise.
  static absl::StatusOr<std::unique_ptr<RawTcpPs>> Start(
      uint64_t elems, uint64_t chunk_elems = (4 << 20) / sizeof(float),
      absl::Duration io_timeout = absl::Seconds(60));
  // A client of the server of `elems` values listening on 127.0.0.1:`port`
  // (ServeRawTcpPs in another process). INVALID_ARGUMENT for a zero size or
  // a port outside 1..65535; UNAVAILABLE when the connection fails.
  static absl::StatusOr<std::unique_ptr<RawTcpPs>> Connect(
      int port, uint64_t elems, absl::Duration io_timeout = absl::Seconds(60));
  // Closes the connection (which ends the server) and joins the server's
  // thread, if it has one.
  ~RawTcpPs();

  // The server's weights into *weights (resized to elems).
  absl::Status Pull(std::vector<float>* weights);
  // `grad` (elems values) to the server; returns once it is applied.
  // INVALID_ARGUMENT for a wrong size (nothing sent).
  absl::Status Push(const std::vector<float>& grad);
  // The same bytes as Push, received the same way and not applied: the
  // floor's upload without the server's work (the weights stay).
  absl::Status Upload(const std::vector<float>& grad);

  uint64_t elems() const { return elems_; }

 private:
  RawTcpPs(uint64_t elems, int client_fd);
  absl::Status Send(char op, const std::vector<float>& grad);

  const uint64_t elems_;
  const int client_fd_;
  std::unique_ptr<RawTcpServer> server_;  // null with Connect
  std::thread server_thread_;
};

// Seconds of one raw-TCP pull and push per step over one connection
// (TimePullPushSteps, pull_push_steps.h), the server on a thread of this
// process (4 MiB chunks).
absl::StatusOr<PullPushSeconds> MeasureRawTcpPs(uint64_t elems, int steps);

// The chunks of the server in a process of its own: the largest a real job's
// shard uses (kAutoMaxChunkBytes, common/sharding.h).
uint64_t RawTcpApartChunkElems();

// The child's side (`binary --serve_raw_tcp=ELEMS`): a server of ELEMS zero
// weights (RawTcpApartChunkElems chunks) on 127.0.0.1 port 0; prints "port
// N" on stdout, accepts one connection and serves it until the client
// closes it. It gives up, without serving, when its stdin closes (the
// parent is gone) or no client comes within 60 s. Returns the exit status:
// 0 after a served connection, 2 for an ELEMS that is not a count >= 1
// (said on stderr, naming the flag), 1 for any other failure.
int ServeRawTcpPs(absl::string_view elems_flag);

// Seconds per step of the raw-TCP PS with its server in a process of its
// own (`binary --serve_raw_tcp`, pinned to `cpus` when not empty): each step
// a pull, then a push and an upload each after a pull of their own, the
// push first in even steps and the upload first in odd ones; StepsTimed
// (`steps`) steps (stats.h); pull_s holds each step's first pull.
struct RawApartSeconds {
  std::vector<double> pull_s, push_s, upload_s;
};
absl::StatusOr<RawApartSeconds> MeasureRawTcpPsApart(
    const std::string& binary, uint64_t elems, int steps,
    const std::vector<int>& cpus);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_RAW_TCP_H_
