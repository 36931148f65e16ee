#include "common/http/http_metrics.h"

#include <array>
#include <memory>
#include <string_view>

#include "common/http/replies.h"
#include "common/http/router.h"

namespace eft::http {

std::string MethodLabel(const std::string& method) {
  static constexpr std::array<std::string_view, 7> kKnown = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH",
                                                             "OPTIONS"};
  for (std::string_view m : kKnown) {
    if (method == m) return method;
  }
  return "OTHER";
}

std::string RouteLabel(const std::string& route) { return route.empty() ? "unmatched" : route; }

HttpHandler MetricsEndpoint(std::function<std::string()> metrics_text) {
  auto router = std::make_shared<Router>();
  router->Add("GET", "/healthz", [](const RouteContext&) { return TextReply(200, "ok"); });
  router->Add("GET", "/metrics", [metrics_text = std::move(metrics_text)](const RouteContext&) {
    HttpReply r = TextReply(200, metrics_text());
    r.content_type = kMetricsContentType;
    return r;
  });
  return [router](const HttpRequest& request) {
    auto target = ParseTarget(request.target);
    if (!target.ok()) return JsonErrorReply(400, StatusCode::kInvalidArgument, target.status().message());
    Router::Match match = router->Find(request.method, *target);
    if (match.kind == Router::Match::kNoRoute) {
      return JsonErrorReply(404, StatusCode::kNotFound, "no route; this server has GET /metrics and GET /healthz");
    }
    if (match.kind == Router::Match::kWrongMethod) {
      HttpReply r = JsonErrorReply(405, StatusCode::kUnimplemented, "method not allowed; use GET");
      r.headers.emplace_back("Allow", "GET");
      r.route = match.pattern;
      return r;
    }
    HttpReply reply = (*match.handler)(RouteContext{request, *target, std::move(match.params)});
    reply.route = match.pattern;
    return reply;
  };
}

Result<std::unique_ptr<HttpRequestMetrics>> HttpRequestMetrics::Create(MetricsRegistry* registry) {
  EFT_ASSIGN_OR_RETURN(CounterFamily * requests,
                       registry->AddCounter("eft_http_requests_total",
                                            "HTTP requests answered, by method, matched route pattern and status code.",
                                            {"method", "route", "code"}));
  // Up to 10 s: longer requests are log follows, which the +Inf bucket counts well enough.
  auto duration = registry->AddHistogram("eft_http_request_duration_seconds",
                                         "Time from a request's complete header to the last byte of its reply.",
                                         {"method", "route"});
  if (!duration.ok()) {
    (void)registry->Unregister("eft_http_requests_total");
    return duration.status();
  }
  return std::unique_ptr<HttpRequestMetrics>(new HttpRequestMetrics(requests, *duration));
}

void HttpRequestMetrics::Record(const HttpRequestRecord& r) {
  const std::string method = MethodLabel(r.method);
  const std::string route = RouteLabel(r.route);
  requests_->WithLabels({method, route, std::to_string(r.status)})->Inc();
  duration_->WithLabels({method, route})->Observe(r.duration.count());
}

}  // namespace eft::http
