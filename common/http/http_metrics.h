// HttpRequestMetrics: what an HttpServer served, as Prometheus metrics.
//
//   eft_http_requests_total{method,route,code}           counter
//   eft_http_request_duration_seconds{method,route}      histogram (header received -> last byte written)
//
// Labels are bounded whatever clients send: `route` is the matched route pattern ("/v1/jobs/{id}"),
// never the raw path, and "unmatched" when no route matched (404s, and requests the server refused
// before routing); `method` is one of the standard methods or "OTHER"; `code` is the HTTP status.
// Record() is thread-safe and does not block (HttpServerConfig::on_request runs on server threads).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/http/http_server.h"
#include "common/metrics.h"
#include "common/status.h"

namespace eft::http {

class HttpRequestMetrics {
 public:
  // Registers both families on `registry`, which must outlive this object.
  static Result<std::unique_ptr<HttpRequestMetrics>> Create(MetricsRegistry* registry);

  void Record(const HttpRequestRecord& record);
  // For HttpServerConfig::on_request; `this` must outlive the server.
  std::function<void(const HttpRequestRecord&)> Hook() {
    return [this](const HttpRequestRecord& r) { Record(r); };
  }

 private:
  HttpRequestMetrics(CounterFamily* requests, HistogramFamily* duration) : requests_(requests), duration_(duration) {}
  CounterFamily* requests_;
  HistogramFamily* duration_;
};

// A handler for a process whose only HTTP face is monitoring (eft-worker): GET /metrics answers
// `metrics_text()` as text exposition 0.0.4, GET /healthz "ok"; other paths 404, other methods 405.
HttpHandler MetricsEndpoint(std::function<std::string()> metrics_text);

// The method label: GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS as sent, anything else "OTHER".
std::string MethodLabel(const std::string& method);
// The route label: the pattern, or "unmatched" for "".
std::string RouteLabel(const std::string& route);

}  // namespace eft::http
