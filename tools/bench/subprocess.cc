#include "tools/bench/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/cpu_placement.h"

namespace pstrain::bench {
namespace {

// VmHWM of `pid` in bytes; 0 when unreadable (e.g. already a zombie).
int64_t ReadVmHwm(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::strtoll(line.c_str() + 6, nullptr, 10) * 1024;
    }
  }
  return 0;
}

int OpenOrNull(const std::string& path, int flags) {
  return open(path.empty() ? "/dev/null" : path.c_str(), flags | O_CLOEXEC,
              0644);
}

}  // namespace

absl::StatusOr<Child> Child::Start(const std::vector<std::string>& argv,
                                   bool pipe_stdio,
                                   const std::string& stdout_file,
                                   const std::string& stderr_file,
                                   const std::vector<int>& cpus,
                                   const std::vector<std::string>* env) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
  if (pipe_stdio &&
      (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0)) {
    return absl::ErrnoToStatus(errno, "pipe");
  }
  const int in_fd = pipe_stdio ? in_pipe[0] : OpenOrNull("", O_RDONLY);
  const int out_fd =
      pipe_stdio ? out_pipe[1]
                 : OpenOrNull(stdout_file, O_WRONLY | O_CREAT | O_TRUNC);
  const int err_fd = OpenOrNull(stderr_file, O_WRONLY | O_CREAT | O_TRUNC);
  if (in_fd < 0 || out_fd < 0 || err_fd < 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot open output files for ", argv[0]));
  }
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  if (env != nullptr) {
    for (const std::string& e : *env)
      envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  // Closed by a successful exec (O_CLOEXEC): Start returns only once the
  // child runs its own program, so no memory sample ever reads the forked
  // copy of this process.
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0)
    return absl::ErrnoToStatus(errno, "pipe");
  const cpu_set_t cpu_set = CpuSetOf(cpus);
  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    dup2(in_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (!cpus.empty()) sched_setaffinity(0, sizeof(cpu_set), &cpu_set);
    if (env != nullptr) {
      execvpe(args[0], args.data(), envp.data());
    } else {
      execvp(args[0], args.data());
    }
    _exit(127);
  }
  close(exec_pipe[1]);
  char byte;
  while (read(exec_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  close(exec_pipe[0]);
  close(in_fd);
  close(out_fd);
  close(err_fd);
  Child child;
  child.pid_ = pid;
  if (pipe_stdio) {
    child.in_fd_ = in_pipe[1];
    child.out_fd_ = out_pipe[0];
  }
  return child;
}

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      in_fd_(std::exchange(other.in_fd_, -1)),
      out_fd_(std::exchange(other.out_fd_, -1)),
      buffer_(std::move(other.buffer_)),
      peak_hwm_(other.peak_hwm_) {}

void Child::SampleMemory() {
  if (pid_ > 0) peak_hwm_ = std::max(peak_hwm_, ReadVmHwm(pid_));
}

Child::~Child() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (in_fd_ >= 0) close(in_fd_);
  if (out_fd_ >= 0) close(out_fd_);
}

absl::StatusOr<std::string> Child::ReadLine(absl::Time deadline) {
  for (;;) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (out_fd_ < 0) return absl::UnavailableError("stdout is not a pipe");
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("no line from the child");
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1000))) <= 0) {
      continue;
    }
    char buf[4096];
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) return absl::UnavailableError("the child closed its stdout");
    buffer_.append(buf, n);
  }
}

absl::StatusOr<int> Child::ReadPort(absl::Time deadline) {
  absl::StatusOr<std::string> line = ReadLine(deadline);
  int port = 0;
  absl::string_view rest = line.ok() ? absl::string_view(*line) : "";
  if (!line.ok() || !absl::ConsumePrefix(&rest, "port ") ||
      !absl::SimpleAtoi(rest, &port) || port < 1 || port > 65535) {
    return absl::UnavailableError(absl::StrCat(
        "printed no port: ", line.ok() ? *line : line.status().ToString()));
  }
  return port;
}

absl::StatusOr<std::string> Child::ReadAll(absl::Time deadline) {
  if (out_fd_ < 0) return absl::UnavailableError("stdout is not a pipe");
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("the child's output");
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1000))) <= 0) {
      continue;
    }
    char buf[65536];
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) return std::exchange(buffer_, "");
    buffer_.append(buf, n);
  }
}

void Child::CloseStdin() {
  if (in_fd_ >= 0) close(in_fd_);
  in_fd_ = -1;
}

void Child::Signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

absl::StatusOr<Finished> Child::Wait(absl::Time deadline) {
  if (pid_ <= 0) return absl::FailedPreconditionError("no child");
  Finished f;
  int status = 0;
  bool killed = false;
  for (;;) {
    SampleMemory();
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0) return absl::ErrnoToStatus(errno, "waitpid");
    if (absl::Now() >= deadline && !killed) {
      kill(pid_, SIGKILL);
      killed = true;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  pid_ = -1;
  if (out_fd_ >= 0) {
    // Whatever the child wrote and nobody read yet.
    char buf[65536];
    ssize_t n;
    fcntl(out_fd_, F_SETFL, O_NONBLOCK);
    while ((n = read(out_fd_, buf, sizeof buf)) > 0) buffer_.append(buf, n);
  }
  f.output = std::exchange(buffer_, "");
  f.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  f.max_rss_bytes = peak_hwm_;
  if (killed) return absl::DeadlineExceededError("the child ran past its time");
  return f;
}

absl::StatusOr<Finished> RunCapture(const std::vector<std::string>& argv,
                                    absl::Duration timeout,
                                    const std::string& stderr_file) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<Child> child = Child::Start(argv, true, "", stderr_file);
  if (!child.ok()) return child.status();
  child->CloseStdin();
  absl::StatusOr<std::string> out = child->ReadAll(deadline);
  absl::StatusOr<Finished> f = child->Wait(deadline);
  if (!f.ok()) {
    return absl::Status(
        f.status().code(),
        absl::StrCat(absl::StrJoin(argv, " "), ": ", f.status().message()));
  }
  if (out.ok()) f->output = *out + f->output;
  return f;
}

absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    close(fd);
    return absl::ErrnoToStatus(e, "bind 127.0.0.1:0");
  }
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace pstrain::bench
