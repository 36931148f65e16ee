// The REST API's request line (common/http/url.h, router.h): the target's path, ":verb" and query
// decoded, then routed over the controller's routes (controller/http/rest_api.cc) by a method the
// input's first byte picks. A match's parameters must be the decoded segments it names.
#include "common/http/router.h"
#include "common/http/url.h"
#include "fuzz/fuzz_target.h"

namespace {

const eft::http::Router& Routes() {
  static const eft::http::Router* router = [] {
    auto* r = new eft::http::Router;
    auto none = [](const eft::http::RouteContext&) { return eft::http::HttpReply{}; };
    for (const char* get : {"/healthz", "/readyz", "/metrics", "/v1/jobs", "/v1/jobs/{id}", "/v1/jobs/{id}/logs", "/v1/nodes"})
      r->Add("GET", get, none);
    for (const char* post : {"/v1/jobs", "/v1/jobs/{id}:cancel", "/v1/nodes/{name}:drain", "/v1/nodes/{name}:undrain"})
      r->Add("POST", post, none);
    return r;
  }();
  return *router;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const kMethods[] = {"GET", "POST", "DELETE", "PUT"};
  const std::string method = kMethods[data[0] % 4];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto target = eft::http::ParseTarget(text);
  if (!target.ok()) {
    FUZZ_CHECK(!target.status().message().empty(), "a refusal without a message");
    return 0;
  }
  for (const auto& [k, v] : target->query) eft::http::IsPrintableUtf8(k), eft::http::IsValidUtf8(v);
  const auto match = Routes().Find(method, *target);
  if (match.kind == eft::http::Router::Match::kFound) {
    for (const auto& [name, value] : match.params) FUZZ_CHECK(!value.empty(), "an empty {" + name + "}");
  } else if (match.kind == eft::http::Router::Match::kWrongMethod) {
    FUZZ_CHECK(!match.allowed.empty(), "405 without an Allow list");
  }
  return 0;
}
