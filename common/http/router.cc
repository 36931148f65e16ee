#include "common/http/router.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace eft::http {

namespace {

bool IsParam(const std::string& seg) { return seg.size() > 2 && seg.front() == '{' && seg.back() == '}'; }

}  // namespace

void Router::Add(const std::string& method, const std::string& pattern, RouteHandler handler) {
  auto target = ParseTarget(pattern);
  if (!target.ok() || !target->query.empty()) {
    std::fprintf(stderr, "bad route pattern '%s'\n", pattern.c_str());
    std::abort();
  }
  routes_.push_back(Route{method, pattern, target->segments, target->verb, std::move(handler)});
}

bool Router::Matches(const Route& route, const Target& target, std::map<std::string, std::string>* params) {
  if (route.segments.size() != target.segments.size() || route.verb != target.verb) return false;
  params->clear();
  for (size_t i = 0; i < route.segments.size(); ++i) {
    const std::string& want = route.segments[i];
    const std::string& got = target.segments[i];
    if (IsParam(want)) {
      if (got.empty()) return false;
      (*params)[want.substr(1, want.size() - 2)] = got;
    } else if (want != got) {
      return false;
    }
  }
  return true;
}

Router::Match Router::Find(const std::string& method, const Target& target) const {
  Match m;
  std::map<std::string, std::string> params;
  for (const Route& r : routes_) {
    if (!Matches(r, target, &params)) continue;
    if (r.method == method) {
      m.kind = Match::kFound;
      m.handler = &r.handler;
      m.pattern = r.pattern;
      m.params = std::move(params);
      m.allowed.clear();
      return m;
    }
    m.kind = Match::kWrongMethod;
    m.pattern = r.pattern;
    if (std::find(m.allowed.begin(), m.allowed.end(), r.method) == m.allowed.end()) m.allowed.push_back(r.method);
  }
  std::sort(m.allowed.begin(), m.allowed.end());
  return m;
}

}  // namespace eft::http
