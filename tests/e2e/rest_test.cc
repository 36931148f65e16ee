// End-to-end tests of the REST API: a real eft-controller serving --http on 127.0.0.1, real workers
// running the test workload, and raw-socket HTTP clients. REST and gRPC must see the same world.
#include <gtest/gtest.h>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include <thread>

#include "tests/e2e/cluster.h"
#include "tests/unit/common/http/http_test_client.h"

namespace eft::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;


std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &out).ok());
  return out;
}

// A REST call that must succeed with `status`; returns the parsed JSON body.
json Rest(TestCluster& c, const std::string& method, const std::string& target, int status,
          const std::string& body = "", const std::string& headers = "Content-Type: application/json\r\n") {
  auto r = HttpCall(c.http_port(), method, target, body, headers);
  EXPECT_TRUE(r) << method << " " << target << ": no response";
  if (!r) return json();
  EXPECT_EQ(r->status, status) << method << " " << target << ": " << r->body;
  EXPECT_EQ(r->header("content-type"), "application/json") << method << " " << target;
  json parsed = json::parse(r->body, nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << r->body;
  return parsed;
}

// Parses a REST reply as the proto message, strictly: the JSON must be exactly proto's mapping.
template <typename T>
T AsProto(const json& body) {
  T msg;
  auto s = google::protobuf::util::JsonStringToMessage(body.dump(), &msg);
  EXPECT_TRUE(s.ok()) << s.message() << ": " << body.dump();
  return msg;
}

std::string Message(const json& error) { return error.value("message", std::string()); }

TEST(Rest, JobsAndNodesThroughRestMatchGrpc) {
  ClusterOptions options;
  options.workers = 2;
  options.http = true;
  TestCluster c(options);
  c.StartAll();

  auto health = HttpCall(c.http_port(), "GET", "/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok");
  auto ready = HttpCall(c.http_port(), "GET", "/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  auto metrics = HttpCall(c.http_port(), "GET", "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(metrics->body.find("eft_nodes{state=\"READY\"} 2\n"), std::string::npos) << metrics->body;

  // Submit via REST (a SubmitJobRequest), see it via gRPC.
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = c.WorkloadJob("rest-a", 2, 2, 4, 20, 2);
  submit.set_request_id("req-a");
  json a = Rest(c, "POST", "/v1/jobs", 200, ToJson(submit));
  std::string id_a = a["id"];
  EXPECT_EQ(c.GetJob(id_a).spec().name(), "rest-a");
  EXPECT_EQ(Rest(c, "POST", "/v1/jobs", 200, ToJson(submit))["id"], id_a) << "requestId makes retries idempotent";

  // Submit via gRPC, see it via REST, field for field.
  v1::Job b;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("grpc-b", 1, 1, 3, 20, 0), &b).ok());
  v1::Job b_rest = AsProto<v1::Job>(Rest(c, "GET", "/v1/jobs/" + b.id(), 200));
  EXPECT_EQ(b_rest.spec().DebugString(), b.spec().DebugString());
  EXPECT_EQ(b_rest.create_time().seconds(), b.create_time().seconds());

  // A bare spec as YAML.
  std::string yaml = "name: yaml-c\nresources: {nodes: {min: 1, max: 1}}\ncommand: [" + WorkloadBinary() +
                     ", --steps, '2', --step-ms, '10', --checkpoint-every, '0',\n"
                     "          --checkpoint-dir, " + c.checkpoint_root() + "/yaml-c]\n";
  json cjob = Rest(c, "POST", "/v1/jobs", 200, yaml, "Content-Type: application/yaml\r\n");
  std::string id_c = cjob["id"];
  EXPECT_EQ(c.GetJob(id_c).spec().name(), "yaml-c");

  for (const std::string& id : {id_a, b.id(), id_c}) {
    v1::Job done = c.WaitForJob(id, IsTerminal, 60s);
    EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << id << ": " << done.reason();
  }
  // The job view carries the loss history (docs/api.md): one point per step of a short job.
  json viewed = Rest(c, "GET", "/v1/jobs/" + id_a, 200);
  ASSERT_TRUE(viewed.contains("lossHistory")) << viewed.dump();
  EXPECT_EQ(viewed["lossHistory"]["train"].size(), 4u) << viewed.dump();
  EXPECT_EQ(viewed["lossHistory"]["train"][3]["step"], "4") << "int64 as a string, as proto's JSON mapping writes it";
  EXPECT_EQ(AsProto<v1::Job>(viewed).loss_history().DebugString(), c.GetJob(id_a).loss_history().DebugString());

  // A long job to cancel through REST.
  json d = Rest(c, "POST", "/v1/jobs", 200, ToJson(c.WorkloadJob("rest-d", 1, 1, 1000, 100, 0)));
  std::string id_d = d["id"];
  c.WaitForJob(id_d, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING || IsTerminal(j); }, 30s);
  json cancelled = Rest(c, "POST", "/v1/jobs/" + id_d + ":cancel", 200);
  EXPECT_EQ(cancelled["state"], "JOB_STATE_CANCELLED");
  EXPECT_EQ(c.GetJob(id_d).state(), v1::JOB_STATE_CANCELLED);
  json twice = Rest(c, "POST", "/v1/jobs/" + id_a + ":cancel", 400);
  EXPECT_EQ(twice["code"], 9) << "FAILED_PRECONDITION: the job already succeeded";

  // List: everything, newest first, equal to gRPC's answer.
  v1::ListJobsResponse grpc_list;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(c.jobs().ListJobs(&ctx, v1::ListJobsRequest(), &grpc_list).ok());
  }
  v1::ListJobsResponse rest_list = AsProto<v1::ListJobsResponse>(Rest(c, "GET", "/v1/jobs", 200));
  ASSERT_EQ(rest_list.jobs_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rest_list.jobs(i).id(), grpc_list.jobs(i).id());
    EXPECT_EQ(rest_list.jobs(i).state(), grpc_list.jobs(i).state());
  }
  // Filters (short and full names, repeated), and paging one job at a time.
  EXPECT_EQ(Rest(c, "GET", "/v1/jobs?state=SUCCEEDED", 200)["jobs"].size(), 3u);
  json only_d = Rest(c, "GET", "/v1/jobs?state=JOB_STATE_CANCELLED", 200);
  ASSERT_EQ(only_d["jobs"].size(), 1u);
  EXPECT_EQ(only_d["jobs"][0]["id"], id_d);
  EXPECT_EQ(Rest(c, "GET", "/v1/jobs?state=RUNNING&state=cancelled&state=SUCCEEDED", 200)["jobs"].size(), 4u);
  std::vector<std::string> paged;
  std::string token;
  for (int page = 0; page < 10; ++page) {
    json p = Rest(c, "GET", "/v1/jobs?pageSize=1" + (token.empty() ? "" : "&pageToken=" + token), 200);
    for (const auto& j : p["jobs"]) paged.push_back(j["id"]);
    token = p.value("nextPageToken", "");
    if (token.empty()) break;
  }
  EXPECT_EQ(paged, (std::vector<std::string>{id_d, id_c, b.id(), id_a}));

  // Logs without follow: rank 0 raw, equal to what gRPC serves; all ranks prefixed per line.
  auto raw = HttpCall(c.http_port(), "GET", "/v1/jobs/" + id_a + "/logs?rank=0");
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->status, 200);
  EXPECT_TRUE(raw->chunked);
  EXPECT_EQ(raw->header("content-type"), "text/plain; charset=utf-8");
  std::string grpc_rank0;
  {
    grpc::ClientContext ctx;
    v1::GetLogsRequest req;
    req.set_job_id(id_a);
    req.set_rank(0);
    auto reader = c.jobs().GetLogs(&ctx, req);
    v1::LogChunk chunk;
    while (reader->Read(&chunk)) grpc_rank0 += chunk.data();
    EXPECT_TRUE(reader->Finish().ok());
  }
  EXPECT_EQ(raw->body, grpc_rank0);
  EXPECT_NE(raw->body.find("step 4/4"), std::string::npos) << raw->body;
  auto all = HttpCall(c.http_port(), "GET", "/v1/jobs/" + id_a + "/logs");
  ASSERT_TRUE(all);
  EXPECT_NE(all->body.find("[attempt 1 rank 0] step 4/4"), std::string::npos) << all->body;
  EXPECT_NE(all->body.find("[attempt 1 rank 1] eft-test-workload job=" + id_a), std::string::npos) << all->body;
  EXPECT_EQ(HttpCall(c.http_port(), "GET", "/v1/jobs/" + id_a + "/logs?attempt=7")->body, "");

  // Nodes: list, drain and undrain through REST, seen through gRPC.
  v1::ListNodesResponse nodes = AsProto<v1::ListNodesResponse>(Rest(c, "GET", "/v1/nodes", 200));
  ASSERT_EQ(nodes.nodes_size(), 2);
  EXPECT_EQ(nodes.nodes(0).state(), v1::NODE_STATE_READY);
  json drained = Rest(c, "POST", "/v1/nodes/node1:drain", 200);
  EXPECT_EQ(drained["drained"], true);
  EXPECT_TRUE(c.GetNode("node1").drained());
  Rest(c, "POST", "/v1/nodes/node1:undrain", 200);
  EXPECT_FALSE(c.GetNode("node1").drained());

  // Errors: the grpc-gateway body and status.
  EXPECT_EQ(Rest(c, "GET", "/v1/jobs/999", 404), json::parse(R"({"code":5,"message":"job 999 not found","details":[]})"));
  EXPECT_EQ(Rest(c, "POST", "/v1/jobs/999:cancel", 404)["code"], 5);
  EXPECT_EQ(Rest(c, "GET", "/v1/jobs/999/logs", 404)["code"], 5);
  EXPECT_EQ(Message(Rest(c, "POST", "/v1/nodes/nope:drain", 404)), "node nope not found");
  json bad = Rest(c, "POST", "/v1/jobs", 400, R"({"spec": {"name": "bad", "command": ["/bin/true"], "training": {"learning_rate": 0.1}}})");
  EXPECT_EQ(bad["code"], 3);
  EXPECT_EQ(Message(bad), "spec.training.learning_rate: unknown field (did you mean lr?)");
  json bad_yaml = Rest(c, "POST", "/v1/jobs", 400, "name: bad\nresources: {nodes: {min: 2, max: 1}}\ncommand: [x]\n",
                       "Content-Type: application/yaml\r\n");
  EXPECT_NE(Message(bad_yaml).find("spec.resources.nodes.max"), std::string::npos) << bad_yaml;
  auto wrong = HttpCall(c.http_port(), "DELETE", "/v1/jobs/" + id_a);
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->header("allow"), "GET");
  EXPECT_EQ(Rest(c, "GET", "/v1/jobz", 404)["code"], 5);
}

TEST(Rest, FollowStreamsLinesWhileTheRankWritesThem) {
  ClusterOptions options;
  options.workers = 2;
  options.http = true;
  TestCluster c(options);
  c.StartAll();
  // 20 steps of 300 ms: the job runs about 6 s.
  json job = Rest(c, "POST", "/v1/jobs", 200, ToJson(c.WorkloadJob("follow", 2, 2, 20, 300, 0)));
  std::string id = job["id"];

  // A second follower (every rank, prefixed) runs alongside on its own connection.
  std::string all_ranks;
  std::thread other([&] {
    auto r = HttpCall(c.http_port(), "GET", "/v1/jobs/" + id + "/logs?follow=true", "", "", 90s);
    ASSERT_TRUE(r);
    all_ranks = r->body;
  });

  TestConnection conn(c.http_port());
  ASSERT_TRUE(conn.Send("GET /v1/jobs/" + id + "/logs?follow=true&rank=0 HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto deadline = std::chrono::steady_clock::now() + 90s;
  auto head = conn.ReadHead(deadline);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->chunked);
  std::string text;
  bool saw_step_while_running = false;
  int chunks = 0;
  while (true) {
    auto chunk = conn.ReadChunk(deadline);
    ASSERT_TRUE(chunk) << "stream broke off; so far:\n" << text;
    if (chunk->empty()) break;
    ++chunks;
    text += *chunk;
    if (!saw_step_while_running && text.find("step 1/20") != std::string::npos) {
      v1::Job now = c.GetJob(id);
      EXPECT_FALSE(IsTerminal(now)) << "the first step line arrived only after the job ended";
      saw_step_while_running = !IsTerminal(now);
      // The follow stream holds no server thread: other requests are answered at once meanwhile.
      auto t0 = std::chrono::steady_clock::now();
      auto h = HttpCall(c.http_port(), "GET", "/healthz");
      ASSERT_TRUE(h);
      EXPECT_EQ(h->status, 200);
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
    }
  }
  EXPECT_TRUE(saw_step_while_running);
  EXPECT_GT(chunks, 3) << "lines came over time, not in one piece";
  EXPECT_NE(text.find("step 20/20"), std::string::npos) << text;
  EXPECT_NE(text.find("finished"), std::string::npos) << text;
  EXPECT_TRUE(IsTerminal(c.GetJob(id))) << "follow ends only when the job did";
  other.join();
  EXPECT_NE(all_ranks.find("[attempt 1 rank 0] step 20/20"), std::string::npos) << all_ranks;
  EXPECT_NE(all_ranks.find("[attempt 1 rank 1] eft-test-workload job=" + id), std::string::npos) << all_ranks;
  // The controller's copy equals the worker's file.
  EXPECT_EQ(text, ReadFile(c.dir() + "/work/node0/logs/" + id + "/attempt-1/rank-0.log"));
}

// One hostile or malformed request and what counts as surviving it.
struct Probe {
  std::string name;
  std::string raw;          // the exact bytes sent
  bool may_close = false;   // oversized or malformed framing: closing without a reply is fine too
};

std::string Req(const std::string& method, const std::string& target, const std::string& body = "",
                const std::string& headers = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + headers;
  if (!body.empty() || method == "POST") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

std::vector<Probe> HostileProbes() {
  std::vector<Probe> p;
  auto post = [&](const std::string& name, const std::string& body, const std::string& headers = "") {
    p.push_back({name, Req("POST", "/v1/jobs", body, headers)});
  };
  // Bad JSON.
  for (const char* body : {"{", "}", "[", "nul", "tru", "{\"spec\":}", "{'name':'a'}", "{\"name\":\"a\",}",
                           "{\"name\": NaN}", "{\"name\": \"a\" /* c */}", "{\"a\":1}{\"b\":2}", "\"unterminated",
                           "{\"name\":\"a\\u12\"}", "{\"name\":\"\\x41\"}", "{\"a\" 1}", "{,}", "[1,]", "01",
                           "{\"name\":\"a\"}}", "\x00\x01\x02", "{\"spec\": {\"name\": \"a\"", "-", "1e999999",
                           "{\"name\":\"a\",\"name\":}", "\xef\xbb\xbf{\"name\":\"a\"}"}) {
    post(std::string("bad json ") + body, body);
  }
  // Wrong types.
  for (const char* body :
       {R"({"name": 5})", R"({"name": ["a"]})", R"({"name": "a", "command": "/bin/true"})",
        R"({"name": "a", "command": [1, 2]})", R"({"name": "a", "resources": []})",
        R"({"name": "a", "resources": {"nodes": {"min": "2"}}})", R"({"name": "a", "resources": {"nodes": {"min": 1.5}}})",
        R"({"name": "a", "training": {"lr": "fast"}})", R"({"name": "a", "training": {"lr": true}})",
        R"({"name": "a", "env": {"A": 1}})", R"({"name": "a", "env": ["A=1"]})", R"({"name": "a", "training": {"seed": {}}})",
        R"({"name": "a", "data": {"packing": "yes"}})", R"({"name": "a", "data": "train.jsonl"})",
        R"({"spec": [], "requestId": "x"})", R"({"spec": "name: a"})", R"({"spec": {"name": "a"}, "requestId": 5})",
        R"({"spec": {"name": "a"}, "requestId": {}})", "[]", "42", "\"spec\"", "null", "true",
        R"({"name": "a", "resources": {"gpusPerNode": 99999999999}})", R"({"name": "a", "training": {"epochs": -1}})",
        R"({"name": "a", "fault_tolerance": {"max_restarts": "many"}})", R"({"name": "a", "checkpoint": 5})",
        R"({"name": "a", "training": {"schedule": {"type": 1}}})", R"({"name": null, "command": ["/bin/true"]})",
        R"({"name": "UPPER", "command": ["/bin/true"]})"}) {
    post(std::string("wrong type ") + body, body);
  }
  // Unknown fields.
  for (const char* body : {R"({"spec": {"name": "a"}, "priority": 1})", R"({"name": "a", "foo": 1})",
                           R"({"name": "a", "training": {"learning_rate": 0.1}})", R"({"name": "a", "resources": {"gpus": 2}})",
                           R"({"name": "a", "resources": {"nodes": {"minimum": 1}}})", R"({"name": "a", "data": {"path": "x"}})",
                           R"({"name": "a", "checkpoint": {"every": 5}})", R"({"spec": {"name": "a", "x": {"y": 1}}})",
                           R"({"name": "a", "__proto__": {}})", R"({"name": "a", "": 1})", R"({"spec": {}, "spec2": {}})",
                           R"({"name": "a", "faultTolerance": {"maxRestarts": 1, "retries": 2}})"}) {
    post(std::string("unknown field ") + body, body);
  }
  // Invalid UTF-8, in bodies, YAML, paths and queries.
  for (const char* body : {"{\"name\": \"\xff\"}", "{\"name\": \"a\xc3\"}", "{\"name\": \"\xed\xa0\x80\"}",
                           "{\"\xfe\": 1}", "{\"name\": \"a\", \"command\": [\"\xc0\xaf\"]}"}) {
    post("invalid utf-8 json", body);
  }
  for (const char* body : {"name: \"\xff\"\n", "name: a\ncommand: [\"\xc3\"]\n", "\xfe\xff: 1\n"}) {
    post("invalid utf-8 yaml", body, "Content-Type: application/yaml\r\n");
  }
  for (const char* target : {"/v1/jobs/%ff", "/v1/jobs/%c0%af", "/v1/jobs/a%ed%a0%80/logs", "/v1/nodes/%ff:drain",
                             "/v1/jobs?state=%ff", "/v1/jobs?%fe=1", "/v1/jobs/1/logs?rank=%ff", "/v1/jobs/\xff",
                             "/v1/nodes/\xc3:drain"}) {
    p.push_back({std::string("invalid utf-8 target ") + target,
                 Req(std::string(target).find(":drain") != std::string::npos ? "POST" : "GET", target),
                 /*may_close=*/true});
  }
  // Path traversal and odd names: never a file, always a 4xx.
  for (const char* target :
       {"/v1/nodes/..%2F..:drain", "/v1/nodes/..:drain", "/v1/nodes/%2e%2e%2f%2e%2e%2fetc%2fpasswd:drain",
        "/v1/nodes/..%5C..:undrain", "/v1/nodes/a%00b:drain", "/v1/nodes/%0a:drain", "/v1/nodes/.:drain",
        "/v1/nodes/x%2Fy:undrain", "/v1/nodes/:drain", "/v1/nodes/..%2F..%2F..%2Ftmp%2Fx:undrain"}) {
    p.push_back({std::string("traversal ") + target, Req("POST", target)});
  }
  for (const char* target :
       {"/v1/jobs/..%2F..%2Fetc%2Fpasswd", "/v1/jobs/../../etc/passwd", "/v1/jobs/%2e%2e/logs",
        "/v1/jobs/..%2F1/logs", "/v1/jobs/1/logs/../../../../etc/passwd", "/../../etc/passwd", "//v1/jobs",
        "/v1//jobs", "/v1/jobs/1%00", "/v1/jobs/%00/logs", "/v1/jobs/1/", "/v1/jobs/-1", "/v1/jobs/1e3",
        "/v1/jobs/99999999999999999999999", "/v1/jobs/%2F", "/v1/jobs/1;rm%20-rf", "/v1/jobs/$(id)/logs",
        "/etc/passwd", "/v1/jobs/1/logs%2F..%2F..", "/v1/jobs/1%2Flogs"}) {
    p.push_back({std::string("traversal ") + target, Req("GET", target)});
  }
  p.push_back({"traversal cancel", Req("POST", "/v1/jobs/..%2F..%2Fx:cancel")});
  // Wrong methods.
  for (const char* m : {"DELETE", "PUT", "PATCH", "OPTIONS", "HEAD", "TRACE", "FOO"}) {
    p.push_back({std::string("method ") + m + " /v1/jobs", Req(m, "/v1/jobs")});
  }
  for (const char* m : {"GET", "DELETE", "PUT"}) {
    p.push_back({std::string("method ") + m + " :cancel", Req(m, "/v1/jobs/1:cancel")});
    p.push_back({std::string("method ") + m + " :drain", Req(m, "/v1/nodes/node0:drain")});
    p.push_back({std::string("method ") + m + " :undrain", Req(m, "/v1/nodes/node0:undrain")});
  }
  for (const char* target : {"/v1/jobs/1", "/v1/jobs/1/logs", "/v1/nodes", "/healthz", "/readyz", "/metrics"}) {
    p.push_back({std::string("method POST ") + target, Req("POST", target, "{}")});
  }
  // Bad percent-encoding.
  for (const char* target : {"/v1/jobs/%", "/v1/jobs/%4", "/v1/jobs/%zz", "/v1/jobs/%%", "/v1/jobs/%g1",
                             "/v1/jobs/1%2/logs", "/v1/jobs?state=%", "/v1/jobs?pageSize=%3", "/v1/jobs?%=1",
                             "/v1/jobs/1/logs?rank=%x1", "/v1/nodes/%:drain", "/v1/nodes/node0:%zz",
                             "/v1/jobs?pageToken=%G0", "/%", "/v1/%jobs"}) {
    p.push_back({std::string("percent ") + target, Req(std::string(target).find(":") != std::string::npos ? "POST" : "GET", target)});
  }
  // Bad query parameters.
  for (const char* target : {"/v1/jobs?pageSize=abc", "/v1/jobs?pageSize=-1", "/v1/jobs?pageSize=1e3",
                             "/v1/jobs?pageSize=99999999999", "/v1/jobs?pageSize=5000", "/v1/jobs?pageSize=1&pageSize=2",
                             "/v1/jobs?state=FOO", "/v1/jobs?state=", "/v1/jobs?state=UNSPECIFIED", "/v1/jobs?sort=name",
                             "/v1/jobs?pageToken=nope", "/v1/jobs/1?verbose=true", "/v1/jobs/1/logs?rank=-1",
                             "/v1/jobs/1/logs?rank=x", "/v1/jobs/1/logs?follow=maybe", "/v1/jobs/1/logs?attempt=x",
                             "/v1/jobs/1/logs?tail=5", "/v1/nodes?name=x"}) {
    p.push_back({std::string("query ") + target, Req("GET", target)});
  }
  // Missing or empty bodies.
  post("missing body", "");
  p.push_back({"no content-length", "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"});
  p.push_back({"whitespace body", Req("POST", "/v1/jobs", "   \r\n\t ")});
  p.push_back({"empty yaml", Req("POST", "/v1/jobs", "\n", "Content-Type: application/yaml\r\n")});
  p.push_back({"empty chunked", "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n"});
  p.push_back({"yaml null doc", Req("POST", "/v1/jobs", "~\n", "Content-Type: application/yaml\r\n")});
  // Deeply nested documents.
  post("deep json", std::string(50000, '[') + std::string(50000, ']'));
  post("deep json object", "{\"spec\":" + std::string(20000, '[') + std::string(20000, ']') + "}");
  p.push_back({"deep yaml", Req("POST", "/v1/jobs", std::string(50000, '[') + std::string(50000, ']'),
                                "Content-Type: application/yaml\r\n")});
  p.push_back({"yaml alias bomb", Req("POST", "/v1/jobs",
                                      "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
                                      "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n"
                                      "name: [*d, *d, *d, *d]\n",
                                      "Content-Type: application/yaml\r\n")});
  // Huge bodies and headers.
  p.push_back({"huge body", Req("POST", "/v1/jobs", "{\"name\": \"" + std::string(2 << 20, 'a') + "\"}"), true});
  p.push_back({"huge declared body", "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n{", true});
  p.push_back({"huge chunked body", "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n200000\r\n" +
                                        std::string(0x200000, 'a') + "\r\n0\r\n\r\n",
               true});
  p.push_back({"huge header", Req("GET", "/healthz", "", "X-Big: " + std::string(100000, 'a') + "\r\n"), true});
  {
    std::string many;
    for (int i = 0; i < 3000; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
    p.push_back({"many headers", Req("GET", "/healthz", "", many), true});
  }
  p.push_back({"huge target", Req("GET", "/v1/jobs/" + std::string(100000, '1')), true});
  p.push_back({"huge query", Req("GET", "/v1/jobs?state=" + std::string(100000, 'A')), true});
  // Malformed HTTP.
  for (const std::string& raw : {std::string("HELLO\r\n\r\n"), std::string("GET /healthz HTTP/9.9\r\n\r\n"),
                                 std::string("GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n"),
                                 std::string("GET /healthz HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
                                 std::string("POST /v1/jobs HTTP/1.1\r\nContent-Length: -5\r\n\r\n"),
                                 std::string("POST /v1/jobs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
                                 std::string("GET  /healthz HTTP/1.1\r\n\r\n"), std::string("GET /healthz\r\n\r\n"),
                                 std::string("G\x01T /healthz HTTP/1.1\r\n\r\n"),
                                 std::string("GET /he\0llo HTTP/1.1\r\n\r\n", 24), std::string("GET http://x/v1/jobs HTTP/1.1\r\n\r\n"),
                                 std::string("GET * HTTP/1.1\r\n\r\n"),
                                 std::string("GET /healthz HTTP/1.1\r\nHost: x\r\nX : a\r\n\r\n"),
                                 std::string("GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"),
                                 std::string("GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"),
                                 std::string("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                                             "Content-Length: 5\r\n\r\n0\r\n\r\n")}) {
    p.push_back({"malformed http", raw, true});
  }
  return p;
}

bool Healthy(TestCluster& c) {
  auto r = HttpCall(c.http_port(), "GET", "/healthz", "", "", 5s);
  return r && r->status == 200 && r->body == "ok";
}

TEST(Rest, HostileRequestsGet4xxAndTheControllerKeepsServing) {
  ClusterOptions options;
  options.workers = 1;
  options.http = true;
  options.controller_args = {"--http-read-timeout", "2"};
  TestCluster c(options);
  c.StartAll();
  // A job to have real ids around (so traversal attempts meet existing state).
  Rest(c, "POST", "/v1/jobs", 200, ToJson(c.WorkloadJob("victim", 1, 1, 2, 10, 0)));

  std::vector<Probe> probes = HostileProbes();
  int answered = 0, closed = 0;
  for (size_t i = 0; i < probes.size(); ++i) {
    const Probe& probe = probes[i];
    TestConnection conn(c.http_port());
    ASSERT_TRUE(conn.connected());
    bool sent = conn.Send(probe.raw);  // may fail midway when the server refuses an oversized request
    auto r = conn.ReadResponse(10s);
    if (r) {
      ++answered;
      EXPECT_GE(r->status, 400) << probe.name;
      EXPECT_LT(r->status, 500) << probe.name << ": " << r->body;
      json body = json::parse(r->body, nullptr, false);
      EXPECT_TRUE(body.is_object() && body.contains("code") && body.contains("message")) << probe.name << ": " << r->body;
      if (r->status == 405) {
        EXPECT_FALSE(r->header("allow").empty()) << probe.name;
      }
    } else {
      ++closed;
      EXPECT_TRUE(probe.may_close) << probe.name << ": no HTTP response (sent: " << sent << ")";
    }
    if (i % 20 == 19) {
      ASSERT_TRUE(Healthy(c)) << "after probe " << i << " (" << probe.name << ")";
    }
  }
  ASSERT_TRUE(Healthy(c));

  // Slow clients: each is cut off after the read timeout (2 s) while others are served.
  std::vector<std::unique_ptr<TestConnection>> slow;
  std::vector<std::string> partial = {
      "",                                                          // connects, sends nothing
      "GET /healthz HTTP/1.1\r\n",                                 // header never ends
      "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaa",          // stalls inside a header
      "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"name\":",  // body never completes
      "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
      "G",
  };
  for (int round = 0; round < 2; ++round) {
    for (const auto& text : partial) {
      slow.push_back(std::make_unique<TestConnection>(c.http_port()));
      if (!text.empty()) slow.back()->Send(text);
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(Healthy(c)) << "slow clients do not block others";
  for (auto& s : slow) {
    EXPECT_TRUE(s->WaitClosed(8s)) << "a slow client was not cut off";
    ++closed;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 8s);
  ASSERT_TRUE(Healthy(c));
  size_t total = probes.size() + slow.size();
  std::fprintf(stderr, "hostile probes: %zu sent, %d answered with 4xx, %d closed\n", total, answered, closed);
  EXPECT_GE(total, 200u);

  // And the API still works for real requests.
  json ok = Rest(c, "POST", "/v1/jobs", 200, ToJson(c.WorkloadJob("after", 1, 1, 2, 10, 0)));
  EXPECT_EQ(c.GetJob(ok["id"]).spec().name(), "after");
}

}  // namespace
}  // namespace eft::testing
