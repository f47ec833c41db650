#include "common/tcp_congestion.h"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

std::string WordsOf(const std::string& path) {
  std::ifstream in(path);
  std::string words, word;
  while (in >> word) absl::StrAppend(&words, words.empty() ? "" : " ", word);
  return words.empty() ? "unknown" : words;
}

// setsockopt(TCP_CONGESTION) on `fd`: 0 or errno.
int SetCongestion(int fd, absl::string_view name) {
  const std::string n(name);
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, n.data(), n.size()) == 0) {
    return 0;
  }
  return errno;
}

absl::Status Refused(absl::string_view key, absl::string_view name, int err) {
  if (err == EPERM) {
    return absl::InvalidArgumentError(absl::StrCat(
        key,
        ": this host lets a non-privileged process choose only its "
        "default (",
        TcpCongestionControlName(), ") or ",
        WordsOf(kTcpAllowedCongestionControlPath), ", not '", name,
        "' (net.ipv4.tcp_allowed_congestion_control)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(key, ": this host's kernel has no congestion control '",
                   name, "' (", std::strerror(err), "); it has ",
                   WordsOf(kTcpAvailableCongestionControlPath)));
}

// The port `fd` is bound to if it is a listening TCP socket, else -1.
int ListeningTcpPort(int fd) {
  int value = 0;
  socklen_t len = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &len) != 0 ||
      value == 0) {
    return -1;
  }
  len = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &value, &len) != 0 ||
      value != IPPROTO_TCP) {
    return -1;
  }
  sockaddr_storage addr{};
  len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return -1;
  }
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  return -1;
}

}  // namespace

std::string TcpCongestionControl(const std::string& path) {
  std::ifstream in(path);
  std::string name;
  if (!(in >> name)) return "";
  return name;
}

std::string TcpCongestionControlName() {
  const std::string name = TcpCongestionControl();
  return name.empty() ? "unknown" : name;
}

bool PacesEveryConnection(absl::string_view name) {
  return name == "bbr" || name == "bbr2" || name == "bbr3";
}

absl::Status CheckCongestionControl(absl::string_view key,
                                    absl::string_view name) {
  if (name.empty()) return absl::OkStatus();
  if (name.size() > kMaxTcpCongestionControlName) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": '", name, "' is longer than ",
                     kMaxTcpCongestionControlName, " characters"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        key, ": cannot open a TCP socket to try it: ", std::strerror(errno)));
  }
  const int err = SetCongestion(fd, name);
  close(fd);
  return err == 0 ? absl::OkStatus() : Refused(key, name, err);
}

absl::StatusOr<int> SetListenersCongestionControl(int port,
                                                  absl::string_view name) {
  constexpr char kKey[] = "network.tcp_congestion_control";
  if (name.empty()) return 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        kKey, ": cannot list /proc/self/fd: ", std::strerror(errno)));
  }
  const int own = dirfd(dir);
  int set = 0;
  int refused = 0;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == own) continue;
    if (ListeningTcpPort(static_cast<int>(fd)) != port) continue;
    if (const int err = SetCongestion(static_cast<int>(fd), name); err != 0) {
      refused = err;
      break;
    }
    ++set;
  }
  closedir(dir);
  if (refused != 0) return Refused(kKey, name, refused);
  if (set == 0) {
    return absl::NotFoundError(absl::StrCat(
        kKey, ": no listening TCP socket of this process on port ", port));
  }
  return set;
}

std::string SocketCongestionControl(int fd) {
  char name[kMaxTcpCongestionControlName + 1] = {0};
  socklen_t len = sizeof(name) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, len));
}

}  // namespace pstrain
