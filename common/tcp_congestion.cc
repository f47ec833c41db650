#include "common/tcp_congestion.h"

#include <fstream>

namespace pstrain {

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

bool TcpCongestionControlAvailable(absl::string_view name,
                                   const std::string& path) {
  std::ifstream in(path);
  std::string word;
  while (in >> word) {
    if (word == name) return true;
  }
  return false;
}

bool PacesEveryConnection(absl::string_view name) {
  return name == "bbr" || name == "bbr2" || name == "bbr3";
}

}  // namespace pstrain
