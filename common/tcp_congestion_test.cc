#include "common/tcp_congestion.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(TcpCongestion, ReadsTheSysctlsFirstWord) {
  const std::string path = TempPath("tcp_congestion_control");
  std::ofstream(path) << "bbr\n";
  EXPECT_EQ(TcpCongestionControl(path), "bbr");
  std::ofstream(path, std::ios::trunc) << "cubic\n";
  EXPECT_EQ(TcpCongestionControl(path), "cubic");
}

TEST(TcpCongestion, EmptyWhenUnreadable) {
  EXPECT_EQ(TcpCongestionControl(TempPath("no-such-file")), "");
  const std::string empty = TempPath("empty");
  std::ofstream(empty).flush();
  EXPECT_EQ(TcpCongestionControl(empty), "");
}

TEST(TcpCongestion, AvailableIsAWordOfTheList) {
  const std::string path = TempPath("tcp_available_congestion_control");
  std::ofstream(path) << "reno bbr cubic\n";
  EXPECT_TRUE(TcpCongestionControlAvailable("cubic", path));
  EXPECT_TRUE(TcpCongestionControlAvailable("reno", path));
  EXPECT_FALSE(TcpCongestionControlAvailable("cub", path));
  EXPECT_FALSE(TcpCongestionControlAvailable("dctcp", path));
  EXPECT_FALSE(TcpCongestionControlAvailable("cubic", TempPath("none")));
}

TEST(TcpCongestion, OnlyBbrPacesEveryConnection) {
  EXPECT_TRUE(PacesEveryConnection("bbr"));
  EXPECT_TRUE(PacesEveryConnection("bbr3"));
  EXPECT_FALSE(PacesEveryConnection("cubic"));
  EXPECT_FALSE(PacesEveryConnection("reno"));
  EXPECT_FALSE(PacesEveryConnection(""));
}

}  // namespace
}  // namespace pstrain
