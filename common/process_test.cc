#include "common/process.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace pstrain {
namespace {

TEST(ProcessTest, OrdinalFromHostname) {
  EXPECT_EQ(*OrdinalFromHostname("ps-0"), 0);
  EXPECT_EQ(*OrdinalFromHostname("my-job-ps-12"), 12);
  EXPECT_EQ(OrdinalFromHostname("ps").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OrdinalFromHostname("ps-x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProcessTest, IndexFromEnv) {
  EXPECT_EQ(*IndexFromEnv("JOB_COMPLETION_INDEX", "3"), 3);
  auto unset = IndexFromEnv("JOB_COMPLETION_INDEX", nullptr);
  EXPECT_NE(unset.status().message().find("JOB_COMPLETION_INDEX is not set"),
            std::string::npos);
  EXPECT_FALSE(IndexFromEnv("X", "-1").ok());
  EXPECT_FALSE(IndexFromEnv("X", "two").ok());
}

TEST(ProcessTest, TlsFlagsOverrideTheJobFile) {
  JobConfig c = DefaultJobConfig();
  c.mutable_network()->set_tls_cert("/file/cert");
  c.mutable_network()->set_tls_key("/file/key");
  c.mutable_network()->set_tls_ca("/file/ca");
  TlsFiles t = ResolveTls(c, "/flag/cert", "", "/flag/ca");
  EXPECT_EQ(t.cert, "/flag/cert");
  EXPECT_EQ(t.key, "/file/key");
  EXPECT_EQ(t.ca, "/flag/ca");
}

TEST(ProcessTest, ConfigFlagErrorsNameTheFlagAndFile) {
  auto c = LoadConfigFlag("/nonexistent/job.yaml");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("--config: "), std::string::npos);
  EXPECT_NE(c.status().message().find("/nonexistent/job.yaml"),
            std::string::npos);
  EXPECT_TRUE(LoadConfigFlag("").ok());
}

TEST(ProcessTest, MetricsOffByDefault) {
  MetricsRegistry r;
  auto off = MaybeServeMetrics(&r, "127.0.0.1", -1);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, nullptr);
  auto on = MaybeServeMetrics(&r, "127.0.0.1", 0);
  ASSERT_TRUE(on.ok());
  EXPECT_GT((*on)->port(), 0);
}

// ExitNow ends the process with the code given, after flushing stderr
// (made fully buffered here, so only the flush can show the line).
TEST(ProcessDeathTest, ExitNowFlushesAndExits) {
  EXPECT_EXIT(
      {
        static char buffer[4096];
        std::setvbuf(stderr, buffer, _IOFBF, sizeof(buffer));
        std::fprintf(stderr, "last words");
        ExitNow(7);
      },
      ::testing::ExitedWithCode(7), "last words");
}

TEST(ProcessTest, ExitCodes) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), kExitOk);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("x")), kExitFailed);
  // Only the marked status is "job over", not any FAILED_PRECONDITION.
  EXPECT_EQ(ExitCodeFor(absl::FailedPreconditionError("x")), kExitFailed);
  const absl::Status over = JobOverError("job 'j' has already finished");
  EXPECT_EQ(over.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(over.message(), "job 'j' has already finished");
  EXPECT_TRUE(IsJobOver(over));
  EXPECT_EQ(ExitCodeFor(over), kExitJobOver);
  EXPECT_EQ(kExitJobOver, 3);
  EXPECT_EQ(kExitBadStart, 2);
}

}  // namespace
}  // namespace pstrain
