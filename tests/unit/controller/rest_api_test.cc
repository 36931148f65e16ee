// RestApi against a real Controller (SQLite in a temp dir), without sockets: every endpoint, its
// JSON, its errors, and the readiness and metrics probes.
#include "controller/http/rest_api.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/yaml_json.h"
#include "eft/v1/node.pb.h"

namespace eft::controller::http {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

class RestApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-rest-api-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ControllerConfig config;
    config.db_path = (dir_ / "c.db").string();
    auto c = Controller::Create(config, &clock_);
    ASSERT_TRUE(c.ok()) << c.status();
    controller_ = std::move(c).value();
    api_.SetController(controller_.get());
  }
  void TearDown() override {
    controller_.reset();
    fs::remove_all(dir_);
  }

  HttpReply Call(const std::string& method, const std::string& target, const std::string& body = "",
                 const std::string& content_type = "application/json") {
    HttpRequest req{method, target, content_type, body};
    return api_.Handle(req);
  }
  json CallJson(const std::string& method, const std::string& target, int want_status, const std::string& body = "") {
    HttpReply r = Call(method, target, body);
    EXPECT_EQ(r.status, want_status) << method << " " << target << ": " << r.body;
    EXPECT_EQ(r.content_type, "application/json");
    return json::parse(r.body);
  }
  // Drains a BodyStream that must end without waiting.
  static std::string Drain(BodyStream& s) {
    std::string out;
    for (int i = 0; i < 1000; ++i) {
      auto piece = s.Pull();
      out += piece.data;
      if (piece.end) return out;
    }
    ADD_FAILURE() << "stream did not end";
    return out;
  }
  void RegisterNode(const std::string& name) {
    v1::RegisterRequest req;
    req.set_node_name(name);
    req.set_address("127.0.0.1");
    req.set_slots(1);
    req.set_incarnation(name + "-1");
    ASSERT_TRUE(controller_->Register(req).ok());
  }

  fs::path dir_;
  ManualClock clock_;
  std::unique_ptr<Controller> controller_;
  RestApi api_;
};

constexpr const char* kSpec = R"({"name": "demo", "command": ["/bin/true"], "resources": {"nodes": {"min": 2}}})";

TEST_F(RestApiTest, SubmitGetListCancel) {
  json job = CallJson("POST", "/v1/jobs", 200, std::string(R"({"spec": )") + kSpec + R"(, "requestId": "r-1"})");
  EXPECT_EQ(job["id"], "1");
  EXPECT_EQ(job["state"], "JOB_STATE_QUEUED");
  EXPECT_EQ(job["spec"]["resources"]["nodes"]["min"], 2);
  EXPECT_EQ(job["spec"]["training"]["globalBatchSize"], 32) << "defaults filled in, lowerCamelCase";
  // Idempotent retry with the same requestId: the same job.
  EXPECT_EQ(CallJson("POST", "/v1/jobs", 200, std::string(R"({"spec": )") + kSpec + R"(, "requestId": "r-1"})")["id"],
            "1");
  // A bare spec, and YAML.
  EXPECT_EQ(CallJson("POST", "/v1/jobs", 200, kSpec)["id"], "2");
  HttpReply yaml = Call("POST", "/v1/jobs", "name: yaml-job\ncommand: [/bin/true]\n", "application/yaml");
  ASSERT_EQ(yaml.status, 200) << yaml.body;
  EXPECT_EQ(json::parse(yaml.body)["spec"]["name"], "yaml-job");

  json got = CallJson("GET", "/v1/jobs/1", 200);
  EXPECT_EQ(got["spec"]["name"], "demo");
  ASSERT_TRUE(got.contains("events"));

  json list = CallJson("GET", "/v1/jobs", 200);
  ASSERT_EQ(list["jobs"].size(), 3u);
  EXPECT_EQ(list["jobs"][0]["id"], "3") << "newest first";

  json page = CallJson("GET", "/v1/jobs?pageSize=2", 200);
  ASSERT_EQ(page["jobs"].size(), 2u);
  ASSERT_TRUE(page.contains("nextPageToken"));
  json rest = CallJson("GET", "/v1/jobs?pageSize=2&pageToken=" + page["nextPageToken"].get<std::string>(), 200);
  ASSERT_EQ(rest["jobs"].size(), 1u);
  EXPECT_EQ(rest["jobs"][0]["id"], "1");
  EXPECT_FALSE(rest.contains("nextPageToken"));

  json cancelled = CallJson("POST", "/v1/jobs/2:cancel", 200);
  EXPECT_EQ(cancelled["state"], "JOB_STATE_CANCELLED");
  json filtered = CallJson("GET", "/v1/jobs?state=CANCELLED", 200);
  ASSERT_EQ(filtered["jobs"].size(), 1u);
  EXPECT_EQ(filtered["jobs"][0]["id"], "2");
  json both = CallJson("GET", "/v1/jobs?state=JOB_STATE_CANCELLED&state=queued", 200);
  EXPECT_EQ(both["jobs"].size(), 3u);
  json none = CallJson("GET", "/v1/jobs?state=RUNNING", 200);
  EXPECT_TRUE(!none.contains("jobs") || none["jobs"].empty()) << none;
}

TEST_F(RestApiTest, ErrorsAreJsonWithTheMappedStatus) {
  json e = CallJson("GET", "/v1/jobs/99", 404);
  EXPECT_EQ(e, json::parse(R"({"code":5,"message":"job 99 not found","details":[]})"));
  e = CallJson("POST", "/v1/jobs/99:cancel", 404);
  EXPECT_EQ(e["code"], 5);
  e = CallJson("POST", "/v1/jobs", 400, R"({"name": "x", "training": {"lr": "fast"}})");
  EXPECT_EQ(e["code"], 3);
  EXPECT_NE(e["message"].get<std::string>().find("spec.training.lr"), std::string::npos) << e;
  e = CallJson("POST", "/v1/jobs", 400, R"({"name": "Bad_Name", "command": ["/bin/true"]})");
  EXPECT_NE(e["message"].get<std::string>().find("spec.name"), std::string::npos) << e;
  e = CallJson("GET", "/v1/jobs?pageSize=5000", 400);
  EXPECT_NE(e["message"].get<std::string>().find("page_size"), std::string::npos);
  e = CallJson("GET", "/v1/jobs?pageToken=nope", 400);
  EXPECT_EQ(e["code"], 3);
  e = CallJson("GET", "/v1/jobs?state=SLEEPING", 400);
  EXPECT_NE(e["message"].get<std::string>().find("SLEEPING"), std::string::npos);

  CallJson("POST", "/v1/jobs", 200, kSpec);
  CallJson("POST", "/v1/jobs/1:cancel", 200);
  CallJson("POST", "/v1/jobs/1:cancel", 200);  // cancelling a cancelled job is a no-op

  e = CallJson("GET", "/nope", 404);
  EXPECT_EQ(e["code"], 5);
  EXPECT_EQ(e["message"], "no route for GET /nope");
  HttpReply wrong = Call("DELETE", "/v1/jobs/1");
  EXPECT_EQ(wrong.status, 405);
  ASSERT_EQ(wrong.headers.size(), 1u);
  EXPECT_EQ(wrong.headers[0], (std::pair<std::string, std::string>{"Allow", "GET"}));
  EXPECT_EQ(json::parse(wrong.body)["code"], 12);
  EXPECT_EQ(Call("PUT", "/v1/jobs").headers.at(0).second, "GET, POST");
  EXPECT_EQ(Call("GET", "/v1/jobs/%zz").status, 400);
  EXPECT_EQ(Call("GET", "/v1/jobs/%ff").status, 400);
  EXPECT_EQ(Call("GET", "/v1/jobs/1?verbose=1").status, 400);
}

TEST_F(RestApiTest, NodesDrainUndrain) {
  RegisterNode("n1");
  json nodes = CallJson("GET", "/v1/nodes", 200);
  ASSERT_EQ(nodes["nodes"].size(), 1u);
  EXPECT_EQ(nodes["nodes"][0]["name"], "n1");
  EXPECT_EQ(nodes["nodes"][0]["state"], "NODE_STATE_READY");
  EXPECT_EQ(CallJson("POST", "/v1/nodes/n1:drain", 200)["drained"], true);
  EXPECT_FALSE(CallJson("POST", "/v1/nodes/n1:undrain", 200).contains("drained")) << "false is omitted";
  EXPECT_EQ(CallJson("POST", "/v1/nodes/..%2F..%2Fetc:drain", 404)["message"], "node ../../etc not found");
  EXPECT_EQ(Call("POST", "/v1/nodes/n1:reboot").status, 404);
  EXPECT_EQ(Call("GET", "/v1/nodes/n1:drain").status, 405);
}

TEST_F(RestApiTest, DrainWithEvictStopsWhatRunsThere) {
  RegisterNode("n1");
  json job = CallJson("POST", "/v1/jobs", 200, R"({"name": "one", "command": ["/bin/true"]})");
  ASSERT_EQ(job["state"], "JOB_STATE_STARTING");
  EXPECT_EQ(CallJson("POST", "/v1/nodes/n1:drain?evict=maybe", 400)["message"],
            "evict: expected true or false, got 'maybe'");
  EXPECT_EQ(CallJson("POST", "/v1/nodes/n1:drain?force=1", 400)["message"],
            "unknown query parameter 'force' (known: evict)");
  EXPECT_EQ(Call("POST", "/v1/nodes/n1:undrain?evict=true").status, 400);
  EXPECT_EQ(CallJson("GET", "/v1/jobs/" + job["id"].get<std::string>(), 200)["state"], "JOB_STATE_STARTING")
      << "nothing happened on a refused request";
  json node = CallJson("POST", "/v1/nodes/n1:drain?evict=true", 200);
  EXPECT_EQ(node["drained"], true);
  job = CallJson("GET", "/v1/jobs/" + job["id"].get<std::string>(), 200);
  EXPECT_EQ(job["state"], "JOB_STATE_RECOVERING");
  EXPECT_EQ(job["attempts"][0]["endReason"],
            "resized: n1 drained with --evict, 1 -> 0 nodes, below nodes.min 1: the job waits for nodes");
}

TEST_F(RestApiTest, LogsStreamRawForOneRankAndPrefixedForAll) {
  CallJson("POST", "/v1/jobs", 200, kSpec);
  ASSERT_TRUE(controller_->logs().Append({"1", 1, 0}, 0, "a0\nb0\n").ok());
  ASSERT_TRUE(controller_->logs().Append({"1", 1, 1}, 0, "a1\npartial").ok());
  HttpReply r = Call("GET", "/v1/jobs/1/logs?rank=0");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/plain; charset=utf-8");
  ASSERT_TRUE(r.stream);
  EXPECT_EQ(Drain(*r.stream), "a0\nb0\n");
  r = Call("GET", "/v1/jobs/1/logs");
  ASSERT_TRUE(r.stream);
  EXPECT_EQ(Drain(*r.stream), "[attempt 1 rank 0] a0\n[attempt 1 rank 0] b0\n[attempt 1 rank 1] a1\n"
                              "[attempt 1 rank 1] partial\n");
  r = Call("GET", "/v1/jobs/1/logs?attempt=2");
  ASSERT_TRUE(r.stream);
  EXPECT_EQ(Drain(*r.stream), "");
  EXPECT_EQ(Call("GET", "/v1/jobs/42/logs").status, 404);
  // Not a job id at all (a path here): refused as such, before anything is looked up.
  EXPECT_EQ(Call("GET", "/v1/jobs/..%2F..%2Fetc/logs").status, 400);
  EXPECT_EQ(Call("GET", "/v1/jobs/007").status, 400);
  EXPECT_EQ(Call("POST", "/v1/jobs/1x:cancel").status, 400);
  EXPECT_EQ(Call("GET", "/v1/jobs?pageToken=+5").status, 400);
  EXPECT_EQ(Call("GET", "/v1/jobs/1/logs?rank=-1").status, 400);

  // Following a job that is not over: nothing now, ask again after the poll interval.
  r = Call("GET", "/v1/jobs/1/logs?follow=true&rank=0");
  ASSERT_TRUE(r.stream);
  auto piece = r.stream->Pull();
  EXPECT_EQ(piece.data, "a0\nb0\n");
  EXPECT_FALSE(piece.end);
  piece = r.stream->Pull();
  EXPECT_EQ(piece.data, "");
  EXPECT_FALSE(piece.end);
  EXPECT_GT(piece.retry.count(), 0);
  ASSERT_TRUE(controller_->logs().Append({"1", 1, 0}, 6, "c0\n").ok());
  EXPECT_EQ(r.stream->Pull().data, "c0\n");
  // Once the job ended, the stream ends after the logs stayed quiet for the quiet period (real time).
  CallJson("POST", "/v1/jobs/1:cancel", 200);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  bool ended = false;
  while (!ended && std::chrono::steady_clock::now() < deadline) {
    piece = r.stream->Pull();
    ended = piece.end;
    if (!ended) std::this_thread::sleep_for(piece.retry);
  }
  EXPECT_TRUE(ended);
}

TEST_F(RestApiTest, ProbesAndMetricsHook) {
  HttpReply h = Call("GET", "/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "ok");
  EXPECT_EQ(Call("GET", "/readyz").status, 200);
  EXPECT_EQ(Call("GET", "/metrics").status, 404);
  EXPECT_EQ(Call("GET", "/metrics").route, "/metrics");

  RestApi loading;  // no controller yet: alive, not ready, API unavailable
  EXPECT_EQ(loading.Handle({"GET", "/healthz", "", ""}).status, 200);
  HttpReply ready = loading.Handle({"GET", "/readyz", "", ""});
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(ready.body, "not ready: loading state");
  HttpReply unavailable = loading.Handle({"GET", "/v1/jobs", "", ""});
  EXPECT_EQ(unavailable.status, 503);
  EXPECT_EQ(json::parse(unavailable.body)["code"], 14);
  loading.SetController(controller_.get());
  EXPECT_EQ(loading.Handle({"GET", "/readyz", "", ""}).status, 200);
  loading.SetShuttingDown();
  EXPECT_EQ(loading.Handle({"GET", "/readyz", "", ""}).status, 503);

  RestApiOptions options;
  options.metrics_text = [] { return std::string("# TYPE eft_up gauge\neft_up 1\n"); };
  RestApi with_metrics(options);
  HttpReply m = with_metrics.Handle({"GET", "/metrics", "", ""});
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(m.body, "# TYPE eft_up gauge\neft_up 1\n");
}

// The JSON types a schema allows: its `type`(s), or those of its anyOf/oneOf branches, through $refs.
std::set<std::string> SchemaTypes(const json& schemas, const json& schema) {
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"].get<std::string>();
    const std::string prefix = "#/components/schemas/";
    EXPECT_EQ(ref.rfind(prefix, 0), 0u) << ref;
    const std::string name = ref.substr(prefix.size());
    EXPECT_TRUE(schemas.contains(name)) << ref;
    return schemas.contains(name) ? SchemaTypes(schemas, schemas[name]) : std::set<std::string>{};
  }
  std::set<std::string> types;
  if (schema.contains("type")) {  // OpenAPI 3.1: one type or a list of them
    const json& type = schema["type"];
    for (const json& t : type.is_array() ? type : json::array({type})) types.insert(t.get<std::string>());
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    for (const json& branch : schema[key]) {
      for (const std::string& t : SchemaTypes(schemas, branch)) types.insert(t);
    }
  }
  return types;
}

// The JSON type protobuf's JSON mapping gives a field (64-bit integers are strings).
std::string JsonType(const google::protobuf::FieldDescriptor* f) {
  using F = google::protobuf::FieldDescriptor;
  if (f->is_map()) return "object";
  if (f->is_repeated()) return "array";
  switch (f->cpp_type()) {
    case F::CPPTYPE_MESSAGE: return f->message_type()->full_name() == "google.protobuf.Timestamp" ? "string" : "object";
    case F::CPPTYPE_STRING:
    case F::CPPTYPE_ENUM:
    case F::CPPTYPE_INT64:
    case F::CPPTYPE_UINT64: return "string";
    case F::CPPTYPE_BOOL: return "boolean";
    case F::CPPTYPE_INT32:
    case F::CPPTYPE_UINT32: return "integer";
    case F::CPPTYPE_DOUBLE:
    case F::CPPTYPE_FLOAT: return "number";
  }
  return "?";
}

// docs/openapi.yaml is hand-written (no packaged generator writes OpenAPI 3.1 with the server's
// constraints): check that it parses, that it documents exactly the routes the server has, and that
// its schemas name exactly the proto fields (by their JSON names) with the JSON type protobuf's
// mapping gives each. Its constraints (ranges, patterns, enums, required fields) are checked against
// the server itself by Schemathesis (tests/api/openapi_contract_test.sh).
TEST(RestDocs, OpenApiMatchesRoutesAndMessages) {
  const char* src = std::getenv("EFT_SOURCE_DIR");
  std::string root = src ? src : EFT_SOURCE_DIR_DEFAULT;
  auto doc = LoadYamlOrJsonFile(root + "/docs/openapi.yaml");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ((*doc)["openapi"].get<std::string>().substr(0, 2), "3.");

  std::set<std::string> documented;
  for (const auto& [path, ops] : (*doc)["paths"].items()) {
    for (const auto& [method, op] : ops.items()) {
      std::string upper = method;
      for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      documented.insert(upper + " " + path);
    }
  }
  std::set<std::string> served = {"POST /v1/jobs", "GET /v1/jobs", "GET /v1/jobs/{id}", "POST /v1/jobs/{id}:cancel",
                                  "GET /v1/jobs/{id}/logs", "GET /v1/nodes", "POST /v1/nodes/{name}:drain",
                                  "POST /v1/nodes/{name}:undrain", "GET /healthz", "GET /readyz", "GET /metrics"};
  EXPECT_EQ(documented, served);
  // Each of them is routed (so `served` is the server's real list).
  RestApi api;
  for (const std::string& route : served) {
    std::string method = route.substr(0, route.find(' '));
    std::string target = route.substr(route.find(' ') + 1);
    for (const char* param : {"{id}", "{name}"}) {
      if (size_t at = target.find(param); at != std::string::npos) target.replace(at, std::string(param).size(), "1");
    }
    HttpReply r = api.Handle({method, target, "", ""});
    EXPECT_EQ(r.route, route.substr(route.find(' ') + 1)) << route;
  }

  const json& schemas = (*doc)["components"]["schemas"];
  const std::vector<const google::protobuf::Descriptor*> messages = {
      v1::SubmitJobRequest::descriptor(), v1::JobSpec::descriptor(),       v1::DataSpec::descriptor(),
      v1::NodeRange::descriptor(),        v1::ResourceSpec::descriptor(),  v1::ScheduleSpec::descriptor(),
      v1::TrainingSpec::descriptor(),     v1::CheckpointSpec::descriptor(), v1::FaultToleranceSpec::descriptor(),
      v1::Attempt::descriptor(),          v1::Checkpoint::descriptor(),     v1::TrainingProgress::descriptor(),
      v1::JobEvent::descriptor(),         v1::Job::descriptor(),            v1::ListJobsResponse::descriptor(),
      v1::Node::descriptor(),             v1::ListNodesResponse::descriptor(), v1::LossPoint::descriptor(),
      v1::LossHistory::descriptor(),      v1::EvalSet::descriptor(),        v1::LoraSpec::descriptor(),
      v1::ParallelSpec::descriptor(),     v1::EvalLoss::descriptor()};
  for (const auto* d : messages) {
    ASSERT_TRUE(schemas.contains(d->name())) << d->name();
    std::set<std::string> fields, properties;
    for (int i = 0; i < d->field_count(); ++i) fields.insert(d->field(i)->json_name());
    for (const auto& [name, value] : schemas[d->name()]["properties"].items()) properties.insert(name);
    EXPECT_EQ(properties, fields) << d->name();
    for (int i = 0; i < d->field_count(); ++i) {
      const auto* f = d->field(i);
      if (!schemas[d->name()]["properties"].contains(f->json_name())) continue;
      const std::set<std::string> types = SchemaTypes(schemas, schemas[d->name()]["properties"][f->json_name()]);
      EXPECT_TRUE(types.count(JsonType(f))) << d->name() << "." << f->json_name() << ": the document allows "
                                            << testing::PrintToString(types) << ", proto's JSON has " << JsonType(f);
    }
  }
  for (const auto* e : {v1::JobState_descriptor(), v1::NodeState_descriptor()}) {
    std::set<std::string> values, documented_values;
    for (int i = 0; i < e->value_count(); ++i) values.insert(e->value(i)->name());
    for (const auto& v : schemas[e->name()]["enum"]) documented_values.insert(v.get<std::string>());
    EXPECT_EQ(documented_values, values) << e->name();
  }
}

}  // namespace
}  // namespace eft::controller::http
