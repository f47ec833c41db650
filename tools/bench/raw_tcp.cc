#include "tools/bench/raw_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/optimizer.h"
#include "common/sharding.h"
#include "tools/bench/stats.h"
#include "tools/bench/subprocess.h"

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

// A listening socket on 127.0.0.1, port 0 (chosen by the kernel); its fd
// and port.
absl::Status ListenOnLoopback(int* listen_fd, int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd, 1) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    absl::Status s = Errno("bind/listen");
    close(fd);
    return s;
  }
  *listen_fd = fd;
  *port = ntohs(addr.sin_port);
  return absl::OkStatus();
}

absl::StatusOr<int> ConnectToLoopback(int port, absl::Duration io_timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    absl::Status s = Errno("connect");
    close(fd);
    return s;
  }
  if (absl::Status s = Configure(fd, io_timeout); !s.ok()) {
    close(fd);
    return s;
  }
  return fd;
}

absl::StatusOr<std::unique_ptr<Optimizer>> FloorSgd() {
  pstrain::v1::OptimizerConfig config;
  config.set_kind(pstrain::v1::OptimizerConfig::SGD);
  config.set_base_lr(0.01);
  return Optimizer::Create(config);
}

}  // namespace

// The server's side: its weights, receive buffer and rule; Serve runs the
// protocol over one accepted connection until the client closes it.
class RawTcpServer {
 public:
  RawTcpServer(uint64_t elems, uint64_t chunk_elems,
               std::unique_ptr<Optimizer> optimizer)
      : elems_(elems),
        chunk_elems_(chunk_elems),
        optimizer_(std::move(optimizer)),
        weights_(elems, 0.0f),
        grad_(elems) {}

  // Serves `fd` (closed on return) until the client closes it: OK, or the
  // first error.
  absl::Status Serve(int fd) {
    absl::Status status;
    while (status.ok()) {
      char op = 0;
      const ssize_t k = recv(fd, &op, 1, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k == 0) break;  // the client closed: done
      if (k < 0) {
        status = Errno("server recv");
      } else if (op == 'L') {
        status = SendAll(fd, weights_.data(), weights_.size() * sizeof(float));
      } else if (op == 'P' || op == 'U') {
        // Each chunk applied once it is complete, as a shard applies a
        // one-worker chunk (the same rule, common/optimizer); an upload
        // receives the same chunks and applies none.
        for (uint64_t off = 0; off < elems_ && status.ok();
             off += chunk_elems_) {
          const uint64_t n = std::min(chunk_elems_, elems_ - off);
          status = RecvAll(fd, grad_.data() + off, n * sizeof(float));
          if (status.ok() && op == 'P') {
            optimizer_->Apply(applied_, applied_, weights_.data() + off,
                              grad_.data() + off, nullptr, n);
          }
        }
        if (op == 'P') ++applied_;
        if (status.ok()) status = SendAll(fd, "A", 1);
      } else {
        status = absl::InvalidArgumentError(
            absl::StrCat("raw TCP PS: unknown op byte ", int(op)));
      }
    }
    close(fd);
    return status;
  }

 private:
  const uint64_t elems_;
  const uint64_t chunk_elems_;
  const std::unique_ptr<Optimizer> optimizer_;
  std::vector<float> weights_;
  std::vector<float> grad_;  // the receive buffer
  uint64_t applied_ = 0;     // pushes applied
};

RawTcpPs::RawTcpPs(uint64_t elems, int client_fd)
    : elems_(elems), client_fd_(client_fd) {}

absl::StatusOr<std::unique_ptr<RawTcpPs>> RawTcpPs::Start(
    uint64_t elems, uint64_t chunk_elems, absl::Duration io_timeout) {
  if (elems == 0 || chunk_elems == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw TCP PS: elems (", elems, ") and chunk_elems (",
                     chunk_elems, ") must be >= 1"));
  }
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = FloorSgd();
  if (!optimizer.ok()) return optimizer.status();
  auto server =
      std::make_unique<RawTcpServer>(elems, chunk_elems, std::move(*optimizer));
  int listen_fd = -1, port = 0;
  if (absl::Status s = ListenOnLoopback(&listen_fd, &port); !s.ok()) return s;
  // The kernel completes the handshake into the backlog, so the client
  // connects before the accept.
  absl::StatusOr<int> client_fd = ConnectToLoopback(port, io_timeout);
  if (!client_fd.ok()) {
    close(listen_fd);
    return client_fd.status();
  }
  std::unique_ptr<RawTcpPs> ps(new RawTcpPs(elems, *client_fd));
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
  ps->server_ = std::move(server);
  ps->server_thread_ = std::thread(
      [server = ps->server_.get(), fd] { server->Serve(fd).IgnoreError(); });
  return ps;
}

absl::StatusOr<std::unique_ptr<RawTcpPs>> RawTcpPs::Connect(
    int port, uint64_t elems, absl::Duration io_timeout) {
  if (elems == 0 || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("raw TCP PS: elems (", elems,
                                                   ") must be >= 1 and port (",
                                                   port, ") in 1..65535"));
  }
  absl::StatusOr<int> fd = ConnectToLoopback(port, io_timeout);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<RawTcpPs>(new RawTcpPs(elems, *fd));
}

RawTcpPs::~RawTcpPs() {
  shutdown(client_fd_, SHUT_RDWR);
  close(client_fd_);
  if (server_thread_.joinable()) server_thread_.join();
}

absl::Status RawTcpPs::Pull(std::vector<float>* weights) {
  weights->resize(elems_);
  if (absl::Status s = SendAll(client_fd_, "L", 1); !s.ok()) return s;
  return RecvAll(client_fd_, weights->data(), elems_ * sizeof(float));
}

absl::Status RawTcpPs::Push(const std::vector<float>& grad) {
  return Send('P', grad);
}

absl::Status RawTcpPs::Upload(const std::vector<float>& grad) {
  return Send('U', grad);
}

absl::Status RawTcpPs::Send(char op, const std::vector<float>& grad) {
  if (grad.size() != elems_) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw TCP PS: ", op == 'P' ? "push" : "upload", " of ",
                     grad.size(), " values to a tensor of ", elems_));
  }
  if (absl::Status s = SendAll(client_fd_, &op, 1); !s.ok()) return s;
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

uint64_t RawTcpApartChunkElems() { return kAutoMaxChunkBytes / sizeof(float); }

int ServeRawTcpPs(absl::string_view elems_flag) {
  uint64_t elems = 0;
  if (!absl::SimpleAtoi(elems_flag, &elems) || elems == 0) {
    std::fprintf(stderr,
                 "--serve_raw_tcp: '%s' is not a count of values >= 1\n",
                 std::string(elems_flag).c_str());
    return 2;
  }
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "--serve_raw_tcp: %s\n", s.ToString().c_str());
    return 1;
  };
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = FloorSgd();
  if (!optimizer.ok()) return fail(optimizer.status());
  RawTcpServer server(elems, RawTcpApartChunkElems(), std::move(*optimizer));
  int listen_fd = -1, port = 0;
  if (absl::Status s = ListenOnLoopback(&listen_fd, &port); !s.ok()) {
    return fail(s);
  }
  std::printf("port %d\n", port);
  std::fflush(stdout);
  // The client, or our stdin's end (the parent gone), or 60 s.
  const absl::Duration timeout = absl::Seconds(60);
  pollfd p[2] = {{listen_fd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
  int ready = 0;
  do {
    ready = poll(p, 2, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0 || (p[0].revents & POLLIN) == 0) {
    close(listen_fd);
    return fail(absl::DeadlineExceededError(
        ready == 0 ? "no client within 60 s"
                   : "stdin closed (the parent is gone) before a client came"));
  }
  const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  close(listen_fd);
  if (fd < 0) return fail(Errno("accept"));
  if (absl::Status s = Configure(fd, timeout); !s.ok()) {
    close(fd);
    return fail(s);
  }
  absl::Status served = server.Serve(fd);
  return served.ok() ? 0 : fail(served);
}

absl::StatusOr<RawApartSeconds> MeasureRawTcpPsApart(
    const std::string& binary, uint64_t elems, int steps,
    const std::vector<int>& cpus) {
  absl::StatusOr<Child> child =
      Child::Start({binary, absl::StrCat("--serve_raw_tcp=", elems)},
                   /*pipe_stdio=*/true, /*stdout_file=*/"",
                   /*stderr_file=*/"", cpus);
  if (!child.ok()) return child.status();
  absl::StatusOr<int> port = child->ReadPort(absl::Now() + absl::Seconds(30));
  if (!port.ok()) {
    return absl::UnavailableError(absl::StrCat(
        binary, " --serve_raw_tcp=", elems, " ", port.status().message()));
  }
  absl::StatusOr<RawApartSeconds> out =
      [&]() -> absl::StatusOr<RawApartSeconds> {
    absl::StatusOr<std::unique_ptr<RawTcpPs>> ps =
        RawTcpPs::Connect(*port, elems);
    if (!ps.ok()) return ps.status();
    const std::vector<float> grad(elems, 1e-3f);  // as MeasureRawTcpPs's
    std::vector<float> weights;
    RawApartSeconds seconds;
    for (int step = 0; step < StepsTimed(steps); ++step) {
      const bool push_first = step % 2 == 0;
      for (int i = 0; i < 2; ++i) {
        const bool push = (i == 0) == push_first;
        absl::Time start = absl::Now();
        absl::Status s = (*ps)->Pull(&weights);
        if (!s.ok()) {
          return absl::Status(
              s.code(), absl::StrCat("step ", step, " pull: ", s.message()));
        }
        if (i == 0) {
          seconds.pull_s.push_back(absl::ToDoubleSeconds(absl::Now() - start));
        }
        start = absl::Now();
        s = push ? (*ps)->Push(grad) : (*ps)->Upload(grad);
        if (!s.ok()) {
          return absl::Status(
              s.code(),
              absl::StrCat("step ", step,
                           push ? " push: " : " upload: ", s.message()));
        }
        (push ? seconds.push_s : seconds.upload_s)
            .push_back(absl::ToDoubleSeconds(absl::Now() - start));
      }
    }
    return seconds;
  }();  // the connection closed here ends the child's server
  absl::StatusOr<Finished> done = child->Wait(absl::Now() + absl::Seconds(30));
  if (!out.ok()) return out.status();
  if (!done.ok()) return done.status();
  if (done->exit_code != 0) {
    return absl::InternalError(absl::StrCat(binary, " --serve_raw_tcp=", elems,
                                            " exited with status ",
                                            done->exit_code));
  }
  return out;
}

}  // namespace pstrain::bench
