// The classic parameter server's transport for ps_bench: the push and pull of
// one fp32 tensor as ps-lite moves them (ZeroMQ, libzmq from Debian), with the
// server applying the shard's SGD rule (common/optimizer, lr 0.01). A
// measuring instrument, not a product path: it shows, in the same rounds as
// pstrain, what the design pstrain is compared with reaches on this machine.
//
// What it keeps of ps-lite's ZMQ van (src/zmq_van.h) and its default KV
// handle: the server binds a ROUTER socket, the worker connects a DEALER;
// every request is one multipart message, a small meta frame and, for a
// push or a pull's answer, one data frame with the whole tensor (one server:
// ps-lite splits a push by server key ranges only); the worker sends its
// gradient without a copy (zmq_msg_init_data over its buffer), the server
// applies it where ZeroMQ received it, answers a pull with a copy of its
// weights in a new message, and the worker copies a pull's answer into its
// array. Server and worker have a ZeroMQ context each (as two processes
// would), each with ZeroMQ's one I/O thread. One client at a time.
//
// What it leaves out of ps-lite: the hand-off of every message from the
// van's receiving thread to a customer's thread (a queue and a wake-up on
// each side), the meta's serialisation and the key arrays. So it is what a
// parameter server of ps-lite's layout can reach over ZeroMQ here, at
// least as fast as ps-lite itself, not ps-lite's own figures.
#ifndef PSTRAIN_TOOLS_BENCH_ZMQ_PS_H_
#define PSTRAIN_TOOLS_BENCH_ZMQ_PS_H_

#include <atomic>
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

class ZmqPs {
 public:
  // A server of `elems` zero weights (elems >= 1) on 127.0.0.1, a port the
  // kernel picks, and a worker connected to it. Every wait of the worker is
  // bounded by `io_timeout` (DEADLINE_EXCEEDED past it). INVALID_ARGUMENT
  // for a zero size; ZeroMQ's error otherwise (UNAVAILABLE).
  static absl::StatusOr<std::unique_ptr<ZmqPs>> Start(
      uint64_t elems, absl::Duration io_timeout = absl::Seconds(60));
  // Stops the server's thread and closes both contexts.
  ~ZmqPs();

  // The server's weights into *weights (resized to elems).
  absl::Status Pull(std::vector<float>* weights);
  // `grad` (elems values) to the server, sent from `grad` itself; returns
  // once the server has applied it. INVALID_ARGUMENT for a wrong size
  // (nothing sent). After any other error ZeroMQ may still be reading
  // `grad`: it must outlive this ZmqPs, which is then of no further use.
  absl::Status Push(const std::vector<float>& grad);

  uint64_t elems() const { return elems_; }

 private:
  ZmqPs(uint64_t elems, std::unique_ptr<Optimizer> optimizer)
      : elems_(elems), optimizer_(std::move(optimizer)) {}
  // The server's loop; its first error in server_status_.
  void Serve();
  // The worker's end of one request: the answer's frames into `meta` (its
  // first byte) and, where there is one, *data.
  absl::Status Await(char* meta, std::vector<float>* data);

  const uint64_t elems_;
  const std::unique_ptr<Optimizer> optimizer_;
  void* server_ctx_ = nullptr;
  void* router_ = nullptr;  // the server's (its thread only once started)
  void* client_ctx_ = nullptr;
  void* dealer_ = nullptr;
  std::vector<float> weights_;  // the server's (its thread only)
  uint64_t applied_ = 0;        // pushes applied (the server's thread)
  absl::Status server_status_;  // written by the thread, read after join
  std::atomic<bool> stop_{false};
  std::thread server_;
};

// Seconds of one ZeroMQ pull and push per step (TimePullPushSteps,
// pull_push_steps.h).
absl::StatusOr<PullPushSeconds> MeasureZmqPs(uint64_t elems, int steps);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_ZMQ_PS_H_
