#include "common/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "common/metrics_http.h"

namespace pstrain {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndHistograms) {
  MetricsRegistry r;
  Counter* c =
      r.AddCounter("pstrain_test_bytes_total", "Bytes.", {{"role", "server"}});
  Gauge* g = r.AddGauge("pstrain_test_loss", "Loss.");
  Histogram* h = r.AddHistogram("pstrain_test_seconds", "Latency.", {0.1, 1.0});
  r.AddCallback("pstrain_test_live", "Live.", false, [] { return 3.0; });
  c->Inc(5);
  c->Inc();
  g->Set(0.25);
  h->Observe(0.05);
  h->Observe(0.5);
  h->Observe(7);
  const std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE pstrain_test_bytes_total counter\n"),
            std::string::npos);
  EXPECT_NE(text.find("pstrain_test_bytes_total{role=\"server\"} 6\n"),
            std::string::npos);
  EXPECT_NE(text.find("pstrain_test_loss 0.25\n"), std::string::npos);
  EXPECT_NE(
      text.find("pstrain_test_seconds_bucket{le=\"0.10000000000000001\"} 1\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("pstrain_test_seconds_bucket{le=\"1\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("pstrain_test_seconds_bucket{le=\"+Inf\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("pstrain_test_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("pstrain_test_seconds_sum 7.5499999999999998\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("pstrain_test_live 3\n"), std::string::npos);
}

TEST(MetricsTest, ServesOverHttpWithMovingValues) {
  MetricsRegistry r;
  Counter* c = r.AddCounter("pstrain_test_steps_total", "Steps.");
  auto server = MetricsHttpServer::Start(&r, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto first = client.Get("/metrics");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_NE(first->body.find("pstrain_test_steps_total 0\n"),
            std::string::npos);
  c->Inc(3);
  auto second = client.Get("/metrics");
  ASSERT_TRUE(second);
  EXPECT_NE(second->body.find("pstrain_test_steps_total 3\n"),
            std::string::npos);
}

}  // namespace
}  // namespace pstrain
