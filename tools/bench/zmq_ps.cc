#include "tools/bench/zmq_ps.h"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain::bench {
namespace {

absl::Status ZmqError(const char* what) {
  if (errno == EAGAIN) {
    return absl::DeadlineExceededError(
        absl::StrCat("ZMQ PS: ", what, " timed out"));
  }
  return absl::UnavailableError(
      absl::StrCat("ZMQ PS: ", what, ": ", zmq_strerror(errno)));
}

absl::Status SetInt(void* socket, int option, int value, const char* what) {
  if (zmq_setsockopt(socket, option, &value, sizeof value) != 0) {
    return ZmqError(what);
  }
  return absl::OkStatus();
}

// Receives one frame into an initialised *msg, retrying on EINTR.
int RecvFrame(zmq_msg_t* msg, void* socket) {
  int n;
  do {
    n = zmq_msg_recv(msg, socket, 0);
  } while (n < 0 && errno == EINTR);
  return n;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ZmqPs>> ZmqPs::Start(uint64_t elems,
                                                    absl::Duration io_timeout) {
  if (elems == 0) {
    return absl::InvalidArgumentError("ZMQ PS: elems must be >= 1");
  }
  pstrain::v1::OptimizerConfig config;
  config.set_kind(pstrain::v1::OptimizerConfig::SGD);
  config.set_base_lr(0.01);
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      Optimizer::Create(config);
  if (!optimizer.ok()) return optimizer.status();
  // The destructor closes whatever was opened when a step below fails.
  std::unique_ptr<ZmqPs> ps(new ZmqPs(elems, std::move(*optimizer)));
  ps->weights_.assign(elems, 0.0f);

  ps->server_ctx_ = zmq_ctx_new();
  ps->client_ctx_ = zmq_ctx_new();
  if (ps->server_ctx_ == nullptr || ps->client_ctx_ == nullptr) {
    return ZmqError("zmq_ctx_new");
  }
  ps->router_ = zmq_socket(ps->server_ctx_, ZMQ_ROUTER);
  if (ps->router_ == nullptr) return ZmqError("zmq_socket (ROUTER)");
  if (absl::Status s = SetInt(ps->router_, ZMQ_LINGER, 0, "ZMQ_LINGER");
      !s.ok()) {
    return s;
  }
  if (zmq_bind(ps->router_, "tcp://127.0.0.1:*") != 0) {
    return ZmqError("bind tcp://127.0.0.1:*");
  }
  char endpoint[256] = {};
  size_t len = sizeof endpoint - 1;
  if (zmq_getsockopt(ps->router_, ZMQ_LAST_ENDPOINT, endpoint, &len) != 0) {
    return ZmqError("ZMQ_LAST_ENDPOINT");
  }
  ps->dealer_ = zmq_socket(ps->client_ctx_, ZMQ_DEALER);
  if (ps->dealer_ == nullptr) return ZmqError("zmq_socket (DEALER)");
  const int timeout_ms =
      static_cast<int>(absl::ToInt64Milliseconds(io_timeout));
  for (auto [option, value, what] :
       {std::tuple<int, int, const char*>{ZMQ_LINGER, 0, "ZMQ_LINGER"},
        {ZMQ_RCVTIMEO, timeout_ms, "ZMQ_RCVTIMEO"},
        {ZMQ_SNDTIMEO, timeout_ms, "ZMQ_SNDTIMEO"}}) {
    if (absl::Status s = SetInt(ps->dealer_, option, value, what); !s.ok()) {
      return s;
    }
  }
  if (zmq_connect(ps->dealer_, endpoint) != 0) {
    return ZmqError(absl::StrCat("connect ", endpoint).c_str());
  }
  ps->server_ = std::thread([raw = ps.get()] { raw->Serve(); });
  return ps;
}

ZmqPs::~ZmqPs() {
  stop_.store(true);
  if (server_.joinable()) server_.join();
  if (dealer_ != nullptr) zmq_close(dealer_);
  if (router_ != nullptr) zmq_close(router_);
  if (client_ctx_ != nullptr) zmq_ctx_term(client_ctx_);
  if (server_ctx_ != nullptr) zmq_ctx_term(server_ctx_);
}

void ZmqPs::Serve() {
  const size_t bytes = elems_ * sizeof(float);
  zmq_pollitem_t item{router_, 0, ZMQ_POLLIN, 0};
  while (!stop_.load(std::memory_order_relaxed)) {
    // Bounded, so that the destructor's stop is seen.
    const int ready = zmq_poll(&item, 1, 100);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      server_status_ = ZmqError("server poll");
      return;
    }
    if (ready == 0) continue;
    // [worker identity][meta][data, for a push]: as ps-lite's van.
    constexpr int kMaxFrames = 3;
    zmq_msg_t frames[kMaxFrames];
    int count = 0;
    bool more = true;
    bool failed = false;
    while (more && !failed) {
      zmq_msg_t* frame = &frames[std::min(count, kMaxFrames - 1)];
      if (count >= kMaxFrames) zmq_msg_close(frame);  // beyond: dropped
      zmq_msg_init(frame);
      failed = RecvFrame(frame, router_) < 0;
      more = !failed && zmq_msg_more(frame);
      ++count;
    }
    const int kept = std::min(count, kMaxFrames);
    auto close_frames = [&] {
      for (int i = 0; i < kept; ++i) zmq_msg_close(&frames[i]);
    };
    if (failed) {
      server_status_ = ZmqError("server receive");
      close_frames();
      return;
    }
    const char op = count >= 2 && zmq_msg_size(&frames[1]) == 1
                        ? *static_cast<const char*>(zmq_msg_data(&frames[1]))
                        : 0;
    char answer = 'E';
    zmq_msg_t data;
    zmq_msg_init(&data);
    bool with_data = false;
    if (op == 'P' && count == 3 && zmq_msg_size(&frames[2]) == bytes) {
      // The gradient applied where ZeroMQ received it (ps-lite's server
      // handle works on the received array, not a copy).
      optimizer_->Apply(applied_, applied_, weights_.data(),
                        static_cast<const float*>(zmq_msg_data(&frames[2])),
                        nullptr, elems_);
      ++applied_;
      answer = 'A';
    } else if (op == 'L' && count == 2) {
      // The answer carries a copy of the weights, as ps-lite's default
      // handle copies them into the response's array.
      zmq_msg_close(&data);
      if (zmq_msg_init_size(&data, bytes) != 0) {
        server_status_ = ZmqError("zmq_msg_init_size");
        close_frames();
        return;
      }
      memcpy(zmq_msg_data(&data), weights_.data(), bytes);
      with_data = true;
      answer = 'W';
    } else if (server_status_.ok()) {
      server_status_ = absl::InvalidArgumentError(
          absl::StrCat("ZMQ PS: a request of ", count, " frames, op ", int(op),
                       ", refused"));
    }
    // [worker identity][answer][weights, for a pull]
    const bool sent =
        zmq_msg_send(&frames[0], router_, ZMQ_SNDMORE) >= 0 &&
        zmq_send(router_, &answer, 1, with_data ? ZMQ_SNDMORE : 0) == 1 &&
        (!with_data || zmq_msg_send(&data, router_, 0) >= 0);
    close_frames();
    zmq_msg_close(&data);
    if (!sent) {
      server_status_ = ZmqError("server send");
      return;
    }
  }
}

absl::Status ZmqPs::Await(char* meta, std::vector<float>* data) {
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  if (RecvFrame(&msg, dealer_) < 0) {
    absl::Status s = ZmqError("receive");
    zmq_msg_close(&msg);
    return s;
  }
  *meta = zmq_msg_size(&msg) == 1 ? *static_cast<char*>(zmq_msg_data(&msg)) : 0;
  bool more = zmq_msg_more(&msg);
  absl::Status status;
  if (more && data != nullptr) {
    if (RecvFrame(&msg, dealer_) < 0) {
      status = ZmqError("receive");
    } else if (zmq_msg_size(&msg) != elems_ * sizeof(float)) {
      status = absl::InternalError(
          absl::StrCat("ZMQ PS: an answer of ", zmq_msg_size(&msg), " bytes"));
    } else {
      // ps-lite's worker copies a pull's answer into the caller's array.
      data->resize(elems_);
      memcpy(data->data(), zmq_msg_data(&msg), elems_ * sizeof(float));
    }
    more = zmq_msg_more(&msg);
  }
  zmq_msg_close(&msg);
  if (status.ok() && more) {
    status = absl::InternalError("ZMQ PS: an answer with extra frames");
  }
  return status;
}

absl::Status ZmqPs::Pull(std::vector<float>* weights) {
  if (zmq_send(dealer_, "L", 1, 0) != 1) return ZmqError("send");
  char meta = 0;
  if (absl::Status s = Await(&meta, weights); !s.ok()) return s;
  if (meta != 'W') {
    return absl::InternalError(
        absl::StrCat("ZMQ PS: the server answered a pull with ", int(meta)));
  }
  return absl::OkStatus();
}

absl::Status ZmqPs::Push(const std::vector<float>& grad) {
  if (grad.size() != elems_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ZMQ PS: push of ", grad.size(), " values to a tensor of ", elems_));
  }
  if (zmq_send(dealer_, "P", 1, ZMQ_SNDMORE) != 1) return ZmqError("send");
  // Without a copy: ZeroMQ's I/O thread sends from `grad` (no free function:
  // the caller's buffer). The server answers only once it has the whole
  // message, so the buffer is free again when Push returns OK.
  zmq_msg_t msg;
  zmq_msg_init_data(&msg, const_cast<float*>(grad.data()),
                    grad.size() * sizeof(float), nullptr, nullptr);
  if (zmq_msg_send(&msg, dealer_, 0) < 0) {
    absl::Status s = ZmqError("send");
    zmq_msg_close(&msg);
    return s;
  }
  char meta = 0;
  if (absl::Status s = Await(&meta, nullptr); !s.ok()) return s;
  if (meta != 'A') {
    return absl::InternalError(
        absl::StrCat("ZMQ PS: the server answered a push with ", int(meta)));
  }
  return absl::OkStatus();
}

absl::StatusOr<PullPushSeconds> MeasureZmqPs(uint64_t elems, int steps) {
  // Before the server: a push that fails may leave ZeroMQ still reading it
  // until the ZmqPs is gone.
  const std::vector<float> grad(elems, 1e-3f);
  absl::StatusOr<std::unique_ptr<ZmqPs>> ps = ZmqPs::Start(elems);
  if (!ps.ok()) return ps.status();
  return TimePullPushSteps(**ps, grad, steps);
}

}  // namespace pstrain::bench
