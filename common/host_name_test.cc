#include "common/host_name.h"

#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(ValidateHostNameTest, AcceptsAddressesAndNames) {
  for (const char* host :
       {"127.0.0.1", "10.213.0.7", "::1", "[::1]", "fe80::1", "localhost",
        "ps-0.ps", "ps-0.ps.default.svc.cluster.local",
        "ps-0.ps.default.svc.cluster.local.", "3com.example", "a"}) {
    EXPECT_TRUE(ValidateHostName("--advertise_host", host).ok()) << host;
  }
}

TEST(ValidateHostNameTest, RejectsAnUnexpandedKubernetesVariable) {
  const absl::Status st =
      ValidateHostName("--advertise_host", "$(POD_NAME).ps");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--advertise_host '$(POD_NAME).ps'"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("contains '$'"), std::string::npos)
      << st.message();
}

TEST(ValidateHostNameTest, RejectsMalformedNames) {
  for (const std::string& host :
       {std::string(""), std::string("."), std::string("ps..ps"),
        std::string("-ps.ps"), std::string("ps-.ps"), std::string("ps_0.ps"),
        std::string("ps 0"), std::string("host:50051"), std::string("[::1"),
        std::string(64, 'a') + ".ps", std::string(300, 'a'),
        std::string("a\0b", 3)}) {
    const absl::Status st = ValidateHostName("--advertise_host", host);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << host;
  }
}

TEST(ValidateHostNameTest, LongValuesAreShortenedInTheMessage) {
  const absl::Status st =
      ValidateHostName("--advertise_host", std::string(5000, '$'));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(st.message().size(), 400u);
}

}  // namespace
}  // namespace pstrain
