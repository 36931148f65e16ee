// Request metrics of the generic HTTP server and the monitoring-only endpoint (/metrics, /healthz),
// in-process and over a real loopback server.
#include "common/http/http_metrics.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/unit/common/exposition_test_util.h"
#include "tests/unit/common/http/http_test_client.h"

namespace eft::http {
namespace {

using eft::testing::SampleValue;

TEST(HttpMetricsTest, LabelsAreBoundedWhateverClientsSend) {
  EXPECT_EQ(MethodLabel("GET"), "GET");
  EXPECT_EQ(MethodLabel("DELETE"), "DELETE");
  EXPECT_EQ(MethodLabel("get"), "OTHER");
  EXPECT_EQ(MethodLabel("X-RANDOM-12345"), "OTHER");
  EXPECT_EQ(RouteLabel(""), "unmatched");
  EXPECT_EQ(RouteLabel("/v1/jobs/{id}"), "/v1/jobs/{id}");
}

TEST(HttpMetricsTest, RecordsCountsAndDurations) {
  MetricsRegistry registry;
  auto m = HttpRequestMetrics::Create(&registry);
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->Record({"GET", "/v1/jobs/{id}", 200, std::chrono::duration<double>(0.02)});
  (*m)->Record({"GET", "/v1/jobs/{id}", 404, std::chrono::duration<double>(0.004)});
  (*m)->Record({"BREW", "", 404, std::chrono::duration<double>(0.001)});
  std::string text = registry.Serialize();
  EXPECT_EQ(SampleValue(text, "eft_http_requests_total", {{"method", "GET"}, {"route", "/v1/jobs/{id}"}, {"code", "200"}}),
            1.0);
  EXPECT_EQ(SampleValue(text, "eft_http_requests_total", {{"method", "GET"}, {"route", "/v1/jobs/{id}"}, {"code", "404"}}),
            1.0);
  EXPECT_EQ(SampleValue(text, "eft_http_requests_total", {{"method", "OTHER"}, {"route", "unmatched"}, {"code", "404"}}),
            1.0);
  EXPECT_EQ(SampleValue(text, "eft_http_request_duration_seconds_count", {{"method", "GET"}, {"route", "/v1/jobs/{id}"}}),
            2.0);
  EXPECT_EQ(SampleValue(text, "eft_http_request_duration_seconds_bucket",
                        {{"method", "GET"}, {"route", "/v1/jobs/{id}"}, {"le", "0.005"}}),
            1.0);
  // Registering twice on one registry is refused, not silently merged.
  EXPECT_FALSE(HttpRequestMetrics::Create(&registry).ok());
}

TEST(HttpMetricsTest, MetricsEndpointRoutes) {
  HttpHandler handler = MetricsEndpoint([] { return std::string("up 1\n"); });
  HttpReply r = handler({"GET", "/metrics", "", ""});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "up 1\n");
  EXPECT_EQ(r.content_type, kMetricsContentType);
  EXPECT_EQ(r.route, "/metrics");
  r = handler({"GET", "/metrics?x=1", "", ""});
  EXPECT_EQ(r.status, 200) << "a query string (some scrapers add one) is ignored";
  r = handler({"GET", "/healthz", "", ""});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok");
  r = handler({"GET", "/v1/jobs", "", ""});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.route, "");
  r = handler({"POST", "/metrics", "", ""});
  EXPECT_EQ(r.status, 405);
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].second, "GET");
  r = handler({"GET", "/%zz", "", ""});
  EXPECT_EQ(r.status, 400);
}

TEST(HttpMetricsTest, ServerRecordsWhatItServes) {
  MetricsRegistry registry;
  auto m = HttpRequestMetrics::Create(&registry);
  ASSERT_TRUE(m.ok());
  HttpServerConfig config;
  config.address = "127.0.0.1:0";
  config.on_request = (*m)->Hook();
  HttpServer server(config, MetricsEndpoint([&registry] { return registry.Serialize(); }));
  ASSERT_TRUE(server.Start().ok());
  auto first = eft::testing::HttpCall(server.port(), "GET", "/metrics");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->header("server"), "eft");
  ASSERT_TRUE(eft::testing::HttpCall(server.port(), "GET", "/nope"));
  // on_request runs after the reply is written: poll until both requests are recorded.
  std::string text;
  for (int i = 0; i < 100; ++i) {
    auto scrape = eft::testing::HttpCall(server.port(), "GET", "/metrics");
    ASSERT_TRUE(scrape);
    text = scrape->body;
    // Both: the server's threads may record the second request before the first (seen under TSan).
    if (SampleValue(text, "eft_http_requests_total", {{"method", "GET"}, {"route", "unmatched"}, {"code", "404"}}) &&
        SampleValue(text, "eft_http_requests_total", {{"method", "GET"}, {"route", "/metrics"}, {"code", "200"}}))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(SampleValue(text, "eft_http_requests_total", {{"method", "GET"}, {"route", "/metrics"}, {"code", "200"}})
                .value_or(0),
            1.0)
      << text;
  EXPECT_EQ(SampleValue(text, "eft_http_requests_total", {{"method", "GET"}, {"route", "unmatched"}, {"code", "404"}}),
            1.0)
      << text;
  server.Stop();
}

}  // namespace
}  // namespace eft::http
