// Router: maps (method, parsed target) onto the handler registered for a route pattern.
//
// Patterns are grpc-gateway style: literal segments, "{name}" parameters (one non-empty segment
// each) and an optional ":verb" on the last segment, e.g. "/v1/jobs/{id}:cancel". A path that
// matches some pattern but not with this method is told apart from one that matches none, so the
// API can answer 405 with an Allow header instead of 404.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/http/http_types.h"
#include "common/http/url.h"

namespace eft::http {

struct RouteContext {
  const HttpRequest& request;
  const Target& target;
  std::map<std::string, std::string> params;  // "{id}" -> decoded segment
};

using RouteHandler = std::function<HttpReply(const RouteContext&)>;

class Router {
 public:
  // Registers `handler` for `method` on `pattern`. Patterns are fixed at startup, so a malformed
  // one is a programming error and aborts.
  void Add(const std::string& method, const std::string& pattern, RouteHandler handler);

  struct Match {
    enum Kind { kFound, kNoRoute, kWrongMethod } kind = kNoRoute;
    const RouteHandler* handler = nullptr;
    std::string pattern;                        // kFound and kWrongMethod
    std::map<std::string, std::string> params;  // kFound
    std::vector<std::string> allowed;           // kWrongMethod: methods the path accepts, sorted
  };
  Match Find(const std::string& method, const Target& target) const;

 private:
  struct Route {
    std::string method;
    std::string pattern;
    std::vector<std::string> segments;  // "{id}" marks a parameter
    std::string verb;
    RouteHandler handler;
  };
  static bool Matches(const Route& route, const Target& target, std::map<std::string, std::string>* params);
  std::vector<Route> routes_;
};

}  // namespace eft::http
