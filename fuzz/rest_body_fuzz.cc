// The controller's REST requests past routing (controller/http/rest_codec.h): the body of POST
// /v1/jobs, JSON or YAML by its Content-Type (the input's first byte picks one), and the same bytes
// as a query string for GET /v1/jobs, GET /v1/jobs/{id}/logs and POST /v1/nodes/{name}:drain.
// A submit the API accepts is what GET /v1/jobs/{id} would show in protobuf's JSON mapping, and
// that JSON, posted again, must read back as the same request.
#include <google/protobuf/util/message_differencer.h>

#include "common/http/url.h"
#include "controller/http/rest_codec.h"
#include "fuzz/fuzz_target.h"

namespace {

namespace rest = eft::controller::http;

void Submit(const std::string& content_type, const std::string& body) {
  auto req = rest::ParseSubmitJobBody(content_type, body);
  if (!req.ok()) {
    FUZZ_CHECK(!req.status().message().empty(), "a refusal without a message");
    return;
  }
  const eft::http::HttpReply reply = rest::MessageReply(*req);
  FUZZ_CHECK(reply.status == 200, "an accepted request cannot be written as JSON: " + reply.body);
  auto again = rest::ParseSubmitJobBody("application/json", reply.body);
  FUZZ_CHECK(again.ok(), "its own JSON is refused: " + reply.body + ": " + again.status().message());
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(*req, *again),
             "its own JSON reads back otherwise: " + reply.body);
}

void Queries(const std::string& text) {
  auto target = eft::http::ParseTarget("/v1/jobs?" + text);
  if (!target.ok()) return;
  if (auto list = rest::ParseListJobsQuery(target->query); list.ok()) {
    for (int state : list->states()) {
      FUZZ_CHECK(eft::v1::JobState_IsValid(state) && state != eft::v1::JOB_STATE_UNSPECIFIED,
                 "state " + std::to_string(state) + " taken from " + text);
    }
  }
  if (auto logs = rest::ParseLogsQuery("job-1", target->query); logs.ok()) {
    FUZZ_CHECK(logs->rank() >= 0 && logs->attempt() >= 0, "a negative rank or attempt taken from " + text);
  }
  (void)rest::ParseDrainQuery("node-1", target->query);
  (void)rest::CheckQueryParams(target->query, {"state", "pageSize"});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 64 * 1024) return 0;
  static const char* const kContentTypes[] = {"application/json", "application/yaml", "text/yaml; charset=utf-8",
                                              "application/x-www-form-urlencoded"};
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  Submit(kContentTypes[data[0] % 4], body);
  Queries(body);
  return 0;
}
