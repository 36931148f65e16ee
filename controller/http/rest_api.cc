#include "controller/http/rest_api.h"

#include <exception>

#include "common/logging.h"
#include "controller/grpc_services.h"
#include "controller/http/log_body_stream.h"
#include "controller/http/rest_codec.h"

namespace eft::controller::http {

using eft::http::ParseTarget;

namespace {

template <typename T>
HttpReply Reply(const Result<T>& result) {
  return result.ok() ? MessageReply(*result) : ErrorReply(result.status());
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

}  // namespace

RestApi::RestApi(RestApiOptions options) : options_(std::move(options)) { AddRoutes(); }

void RestApi::AddRoutes() {
  auto bind = [this](HttpReply (RestApi::*fn)(const RouteContext&)) {
    return [this, fn](const RouteContext& ctx) { return (this->*fn)(ctx); };
  };
  router_.Add("GET", "/healthz", bind(&RestApi::Healthz));
  router_.Add("GET", "/readyz", bind(&RestApi::Readyz));
  router_.Add("GET", "/metrics", bind(&RestApi::Metrics));
  router_.Add("POST", "/v1/jobs", bind(&RestApi::SubmitJob));
  router_.Add("GET", "/v1/jobs", bind(&RestApi::ListJobs));
  router_.Add("GET", "/v1/jobs/{id}", bind(&RestApi::GetJob));
  router_.Add("POST", "/v1/jobs/{id}:cancel", bind(&RestApi::CancelJob));
  router_.Add("GET", "/v1/jobs/{id}/logs", bind(&RestApi::GetLogs));
  router_.Add("GET", "/v1/nodes", bind(&RestApi::ListNodes));
  router_.Add("POST", "/v1/nodes/{name}:drain", [this](const RouteContext& ctx) { return SetDrained(ctx, true); });
  router_.Add("POST", "/v1/nodes/{name}:undrain", [this](const RouteContext& ctx) { return SetDrained(ctx, false); });
}

HttpReply RestApi::Handle(const HttpRequest& request) {
  auto target = ParseTarget(request.target);
  if (!target.ok()) return ErrorReply(target.status());
  Router::Match match = router_.Find(request.method, *target);
  if (match.kind == Router::Match::kNoRoute) {
    std::string path = request.target.substr(0, request.target.find('?'));
    return ErrorReply(404, StatusCode::kNotFound, "no route for " + request.method + " " + path);
  }
  if (match.kind == Router::Match::kWrongMethod) {
    HttpReply r = ErrorReply(405, StatusCode::kUnimplemented,
                             "method " + request.method + " is not allowed on " + match.pattern + "; use " +
                                 Join(match.allowed, " or "));
    r.headers.emplace_back("Allow", Join(match.allowed, ", "));
    r.route = match.pattern;
    return r;
  }
  HttpReply reply;
  try {
    reply = (*match.handler)(RouteContext{request, *target, std::move(match.params)});
  } catch (const std::exception& e) {
    // Nothing below should throw; if something does, one request fails, not the server.
    EFT_LOG(ERROR) << request.method << " " << match.pattern << ": unexpected exception: " << e.what();
    reply = ErrorReply(Status::Internal(std::string("unexpected error: ") + e.what()));
  }
  reply.route = match.pattern;
  return reply;
}

Controller* RestApi::Ready(HttpReply* error) const {
  Controller* c = controller_.load();
  if (!c) *error = ErrorReply(Status::Unavailable("the controller is still loading its state; retry shortly"));
  return c;
}

std::optional<Principal> RestApi::Access(const RouteContext& ctx, Action action, HttpReply* error, Controller* c,
                                         const std::string& job_id) const {
  auto who = CheckAccess(options_.auth, c, ctx.request.authorization, action, job_id);
  if (who.ok()) return *who;
  *error = ErrorReply(who.status());
  if (who.status().code() == StatusCode::kUnauthenticated) {
    error->headers.emplace_back("WWW-Authenticate", "Bearer realm=\"eft\"");
  }
  return std::nullopt;
}

HttpReply RestApi::Healthz(const RouteContext&) { return TextReply(200, "ok"); }

HttpReply RestApi::Readyz(const RouteContext&) {
  if (shutting_down_.load()) return TextReply(503, "not ready: shutting down");
  if (!controller_.load()) return TextReply(503, "not ready: loading state");
  return TextReply(200, "ok");
}

HttpReply RestApi::Metrics(const RouteContext& ctx) {
  if (!options_.metrics_text) return ErrorReply(404, StatusCode::kNotFound, "metrics are not enabled");
  if (!options_.metrics_open) {
    HttpReply err;
    if (!Access(ctx, Action::kMetrics, &err)) return err;
  }
  HttpReply r = TextReply(200, options_.metrics_text());
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

HttpReply RestApi::SubmitJob(const RouteContext& ctx) {
  HttpReply err;
  Controller* c = Ready(&err);
  if (!c) return err;
  auto who = Access(ctx, Action::kSubmitJob, &err);
  if (!who) return err;
  if (Status s = CheckQueryParams(ctx.target.query, {}); !s.ok()) return ErrorReply(s);
  auto req = ParseSubmitJobBody(ctx.request.content_type, ctx.request.body);
  if (!req.ok()) return ErrorReply(req.status());
  if (Status s = AuthorizePriority(*who, req->spec().priority(), c->config().max_submitter_priority); !s.ok()) {
    return ErrorReply(s);
  }
  return Reply(c->SubmitJob(req->spec(), req->request_id(), who->anonymous ? "" : who->user));
}

HttpReply RestApi::ListJobs(const RouteContext& ctx) {
  HttpReply err;
  Controller* c = Ready(&err);
  if (!c) return err;
  auto who = Access(ctx, Action::kReadJobs, &err);
  if (!who) return err;
  auto req = ParseListJobsQuery(ctx.target.query);
  if (!req.ok()) return ErrorReply(req.status());
  return Reply(c->ListJobs(*req));
}

HttpReply RestApi::GetJob(const RouteContext& ctx) {
  HttpReply err;
  Controller* c = Ready(&err);
  if (!c) return err;
  auto who = Access(ctx, Action::kReadJobs, &err);
  if (!who) return err;
  if (Status s = CheckQueryParams(ctx.target.query, {}); !s.ok()) return ErrorReply(s);
  return Reply(c->GetJob(ctx.params.at("id")));
}

HttpReply RestApi::CancelJob(const RouteContext& ctx) {
  HttpReply err;
  Controller* c = Ready(&err);
  if (!c) return err;
  auto who = Access(ctx, Action::kCancelJob, &err, c, ctx.params.at("id"));
  if (!who) return err;
  if (Status s = CheckQueryParams(ctx.target.query, {}); !s.ok()) return ErrorReply(s);
  return Reply(c->CancelJob(ctx.params.at("id")));
}

HttpReply RestApi::GetLogs(const RouteContext& ctx) {
  HttpReply err;
  Controller* c = Ready(&err);
  if (!c) return err;
  auto who = Access(ctx, Action::kReadLogs, &err);
  if (!who) return err;
  auto req = ParseLogsQuery(ctx.params.at("id"), ctx.target.query);
  if (!req.ok()) return ErrorReply(req.status());
  auto follower = LogFollower::Open(c, *req, options_.logs);
  if (!follower.ok()) return ErrorReply(follower.status());
  HttpReply r;
  r.content_type = "text/plain; charset=utf-8";
  r.headers.emplace_back("Cache-Control", "no-store");
  r.stream = std::make_unique<LogBodyStream>(std::move(follower).value(), !req->has_rank());
  return r;
}

HttpReply RestApi::ListNodes(const RouteContext& ctx) {
  HttpReply err;
  Controller* c = Ready(&err);
  if (!c) return err;
  auto who = Access(ctx, Action::kReadNodes, &err);
  if (!who) return err;
  if (Status s = CheckQueryParams(ctx.target.query, {}); !s.ok()) return ErrorReply(s);
  return MessageReply(c->ListNodes());
}

HttpReply RestApi::SetDrained(const RouteContext& ctx, bool drained) {
  HttpReply err;
  Controller* c = Ready(&err);
  if (!c) return err;
  if (!Access(ctx, Action::kDrainNode, &err)) return err;
  if (!drained) {
    if (Status s = CheckQueryParams(ctx.target.query, {}); !s.ok()) return ErrorReply(s);
    return Reply(c->SetDrained(ctx.params.at("name"), false));
  }
  auto req = ParseDrainQuery(ctx.params.at("name"), ctx.target.query);
  if (!req.ok()) return ErrorReply(req.status());
  return Reply(c->SetDrained(req->name(), true, req->evict()));
}

}  // namespace eft::controller::http
