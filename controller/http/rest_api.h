// RestApi: the REST face of JobService and NodeService (grpc-gateway style), plus the probes
// /healthz, /readyz and /metrics. It maps an HttpRequest to an HttpReply and knows nothing about
// sockets, so it is exercised directly in unit tests and served by HttpServer in eft-controller.
//
// Every endpoint calls the same Controller method as its gRPC twin and returns the same message as
// JSON, so REST and gRPC cannot drift apart in behaviour, only in encoding.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "common/http/http_types.h"
#include "common/http/router.h"
#include "controller/auth.h"
#include "controller/controller.h"
#include "controller/http/rest_codec.h"
#include "controller/log_follower.h"

namespace eft::controller::http {

using eft::http::BodyStream;
using eft::http::RouteContext;
using eft::http::Router;

struct RestApiOptions {
  // Serves GET /metrics (Prometheus text exposition 0.0.4) when set; without it /metrics is 404.
  // Called on a server thread for every scrape, possibly on several at once.
  std::function<std::string()> metrics_text;
  // Set: every /v1 call needs a bearer token the role of which allows it (docs/auth.md): 401 with
  // `WWW-Authenticate: Bearer` without a valid user token, 403 when the role may not. /healthz and
  // /readyz stay open; /metrics needs a user token (any role) unless metrics_open. Must outlive this.
  const Authenticator* auth = nullptr;
  bool metrics_open = false;
  // Log streams are polled from the server's few threads, so each poll is capped in size.
  LogFollowerOptions logs = [] {
    LogFollowerOptions o;
    o.max_bytes_per_poll = 256 * 1024;
    return o;
  }();
};

class RestApi {
 public:
  explicit RestApi(RestApiOptions options = {});

  // The API answers UNAVAILABLE (and /readyz 503) until the controller has loaded its state and is
  // set here; the server can thus listen (and answer /healthz) while the database loads.
  void SetController(Controller* controller) { controller_.store(controller); }
  // /readyz turns 503 so that load balancers stop sending before the server stops.
  void SetShuttingDown() { shutting_down_.store(true); }

  // Thread-safe; never throws.
  HttpReply Handle(const HttpRequest& request);

 private:
  void AddRoutes();
  // The controller, or nullptr with *error set to 503.
  Controller* Ready(HttpReply* error) const;
  // The caller, or nullopt with *error set to 401/403 (or 404 for kCancelJob of a missing job).
  std::optional<Principal> Access(const RouteContext& ctx, Action action, HttpReply* error, Controller* c = nullptr,
                                  const std::string& job_id = "") const;

  HttpReply Healthz(const RouteContext& ctx);
  HttpReply Readyz(const RouteContext& ctx);
  HttpReply Metrics(const RouteContext& ctx);
  HttpReply SubmitJob(const RouteContext& ctx);
  HttpReply ListJobs(const RouteContext& ctx);
  HttpReply GetJob(const RouteContext& ctx);
  HttpReply CancelJob(const RouteContext& ctx);
  HttpReply GetLogs(const RouteContext& ctx);
  HttpReply ListNodes(const RouteContext& ctx);
  HttpReply SetDrained(const RouteContext& ctx, bool drained);

  RestApiOptions options_;
  Router router_;
  std::atomic<Controller*> controller_{nullptr};
  std::atomic<bool> shutting_down_{false};
};

}  // namespace eft::controller::http
