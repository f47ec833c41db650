#include "tools/bench/raw_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain::bench {
namespace {

absl::Status Errno(const char* what) {
  return absl::UnavailableError(
      absl::StrCat("raw TCP PS: ", what, ": ", strerror(errno)));
}

// Send and receive timeouts (SO_SNDTIMEO, SO_RCVTIMEO) and TCP_NODELAY, so
// that the one-byte acknowledgement is not held back.
absl::Status Configure(int fd, absl::Duration timeout) {
  const timeval tv = absl::ToTimeval(timeout);
  const int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return Errno("setsockopt");
  }
  return absl::OkStatus();
}

absl::Status SendAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return absl::DeadlineExceededError("raw TCP PS: send timed out");
    }
    if (k < 0) return Errno("send");
    p += k;
    n -= static_cast<size_t>(k);
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return absl::DeadlineExceededError("raw TCP PS: receive timed out");
    }
    if (k < 0) return Errno("recv");
    if (k == 0) {
      return absl::UnavailableError("raw TCP PS: the peer closed");
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RawTcpPs>> RawTcpPs::Start(
    uint64_t elems, uint64_t chunk_elems, absl::Duration io_timeout) {
  if (elems == 0 || chunk_elems == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw TCP PS: elems (", elems, ") and chunk_elems (",
                     chunk_elems, ") must be >= 1"));
  }
  pstrain::v1::OptimizerConfig config;
  config.set_kind(pstrain::v1::OptimizerConfig::SGD);
  config.set_base_lr(0.01);
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      Optimizer::Create(config);
  if (!optimizer.ok()) return optimizer.status();
  std::unique_ptr<RawTcpPs> ps(
      new RawTcpPs(elems, chunk_elems, std::move(*optimizer)));
  ps->weights_.assign(elems, 0.0f);
  ps->grad_.resize(elems);

  const int listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listen_fd, 1) != 0 ||
      getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    absl::Status s = Errno("bind/listen");
    close(listen_fd);
    return s;
  }
  // The kernel completes the handshake into the backlog, so the client
  // connects before the accept.
  ps->client_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ps->client_fd_ < 0 ||
      connect(ps->client_fd_, reinterpret_cast<sockaddr*>(&addr),
              sizeof addr) != 0) {
    absl::Status s = Errno("connect");
    close(listen_fd);
    return s;
  }
  pollfd p{listen_fd, POLLIN, 0};
  const int ready =
      poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(io_timeout)));
  const int fd =
      ready > 0 ? accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC) : -1;
  close(listen_fd);
  if (ready == 0) return absl::DeadlineExceededError("raw TCP PS: accept");
  if (fd < 0) return Errno("accept");
  if (absl::Status s = Configure(fd, io_timeout); !s.ok()) {
    close(fd);
    return s;
  }
  if (absl::Status s = Configure(ps->client_fd_, io_timeout); !s.ok()) {
    close(fd);
    return s;
  }
  ps->server_ = std::thread([raw = ps.get(), fd] { raw->Serve(fd); });
  return ps;
}

RawTcpPs::~RawTcpPs() {
  if (client_fd_ >= 0) {
    shutdown(client_fd_, SHUT_RDWR);
    close(client_fd_);
  }
  if (server_.joinable()) server_.join();
}

void RawTcpPs::Serve(int fd) {
  while (true) {
    char op = 0;
    const ssize_t k = recv(fd, &op, 1, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) break;  // the client closed: done
    if (k < 0) {
      server_status_ = Errno("server recv");
      break;
    }
    if (op == 'L') {
      server_status_ =
          SendAll(fd, weights_.data(), weights_.size() * sizeof(float));
    } else if (op == 'P') {
      // Each chunk applied once it is complete, as a shard applies a
      // one-worker chunk (the same rule, common/optimizer).
      for (uint64_t off = 0; off < elems_ && server_status_.ok();
           off += chunk_elems_) {
        const uint64_t n = std::min(chunk_elems_, elems_ - off);
        server_status_ = RecvAll(fd, grad_.data() + off, n * sizeof(float));
        if (server_status_.ok()) {
          optimizer_->Apply(applied_, applied_, weights_.data() + off,
                            grad_.data() + off, nullptr, n);
        }
      }
      ++applied_;
      if (server_status_.ok()) server_status_ = SendAll(fd, "A", 1);
    } else {
      server_status_ = absl::InvalidArgumentError(
          absl::StrCat("raw TCP PS: unknown op byte ", int(op)));
    }
    if (!server_status_.ok()) break;
  }
  close(fd);
}

absl::Status RawTcpPs::Pull(std::vector<float>* weights) {
  weights->resize(elems_);
  if (absl::Status s = SendAll(client_fd_, "L", 1); !s.ok()) return s;
  return RecvAll(client_fd_, weights->data(), elems_ * sizeof(float));
}

absl::Status RawTcpPs::Push(const std::vector<float>& grad) {
  if (grad.size() != elems_) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw TCP PS: push of ", grad.size(),
                     " values to a tensor of ", elems_));
  }
  if (absl::Status s = SendAll(client_fd_, "P", 1); !s.ok()) return s;
  if (absl::Status s =
          SendAll(client_fd_, grad.data(), grad.size() * sizeof(float));
      !s.ok()) {
    return s;
  }
  char ack = 0;
  if (absl::Status s = RecvAll(client_fd_, &ack, 1); !s.ok()) return s;
  if (ack != 'A') {
    return absl::InternalError(
        absl::StrCat("raw TCP PS: acknowledgement ", int(ack)));
  }
  return absl::OkStatus();
}

absl::StatusOr<PullPushSeconds> MeasureRawTcpPs(uint64_t elems, int steps) {
  // Small and finite, as the ps_path benchmark's gradient.
  const std::vector<float> grad(elems, 1e-3f);
  absl::StatusOr<std::unique_ptr<RawTcpPs>> ps = RawTcpPs::Start(elems);
  if (!ps.ok()) return ps.status();
  return TimePullPushSteps(**ps, grad, steps);
}

}  // namespace pstrain::bench
