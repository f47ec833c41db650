#include "common/client_text.h"

#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(EchoClientTextTest, ShortTextIsUnchanged) {
  EXPECT_EQ(EchoClientText("layer0/w"), "layer0/w");
  EXPECT_EQ(EchoClientText(""), "");
}

TEST(EchoClientTextTest, LongTextIsCutAndSaysItsLength) {
  const std::string name(8 << 10, 'x');
  const std::string echoed = EchoClientText(name);
  EXPECT_EQ(echoed, std::string(kMaxEchoBytes, 'x') + "...(8192 bytes)");
  EXPECT_EQ(EchoClientText("abcdef", 3), "abc...(6 bytes)");
}

TEST(EchoClientTextTest, ExactlyTheLimitIsNotCut) {
  const std::string name(kMaxEchoBytes, 'y');
  EXPECT_EQ(EchoClientText(name), name);
}

TEST(EchoClientTextTest, ControlBytesAreEscaped) {
  EXPECT_EQ(EchoClientText(std::string("a\nb\0c", 5)), "a\\nb\\000c");
  // Escaping happens after the cut, so the output stays bounded.
  EXPECT_LE(EchoClientText(std::string(1 << 20, '\x01')).size(),
            4 * kMaxEchoBytes + 32);
}

}  // namespace
}  // namespace pstrain
