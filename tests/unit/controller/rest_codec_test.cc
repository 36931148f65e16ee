// REST encoding: status mapping, error bodies, SubmitJob bodies (JSON, bare spec, YAML), query
// parameters, and the per-line prefixes of multi-rank logs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "controller/http/log_body_stream.h"
#include "controller/http/rest_codec.h"

namespace eft::controller::http {
namespace {

using json = nlohmann::json;

TEST(RestCodec, StatusMappingIsGrpcGateways) {
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kFailedPrecondition), 400);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kOutOfRange), 400);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kAborted), 409);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kCancelled), 499);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kUnknown), 500);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kDataLoss), 500);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFromCode(StatusCode::kDeadlineExceeded), 504);
}

TEST(RestCodec, ErrorBodyIsCodeMessageDetailsAndSurvivesInvalidUtf8) {
  HttpReply r = ErrorReply(Status::NotFound("job 99 not found"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, R"({"code":5,"message":"job 99 not found","details":[]})");
  r = ErrorReply(Status::InvalidArgument(std::string("bad \xff byte")));
  EXPECT_EQ(r.status, 400);
  json body = json::parse(r.body);  // valid JSON, the bad byte replaced
  EXPECT_EQ(body["code"], 3);
}

TEST(RestCodec, MessagesUseProtoJsonMapping) {
  v1::Job job;
  job.set_id("7");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_world_size(2);
  job.mutable_progress()->set_step(12);
  job.mutable_spec()->mutable_training()->set_global_batch_size(32);
  HttpReply r = MessageReply(job);
  json body = json::parse(r.body);
  EXPECT_EQ(body["id"], "7");
  EXPECT_EQ(body["state"], "JOB_STATE_RUNNING");
  EXPECT_EQ(body["worldSize"], 2);
  EXPECT_EQ(body["progress"]["step"], "12") << "int64 as a string";
  EXPECT_EQ(body["spec"]["training"]["globalBatchSize"], 32);
}

TEST(RestCodec, SubmitBodyAcceptsRequestBareSpecAndYaml) {
  auto r = ParseSubmitJobBody("application/json", R"({"spec": {"name": "a", "command": ["/bin/true"]}, "requestId": "r1"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->spec().name(), "a");
  EXPECT_EQ(r->request_id(), "r1");

  r = ParseSubmitJobBody("", R"({"name": "b", "training": {"globalBatchSize": 8}, "fault_tolerance": {"max_restarts": 0}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->spec().name(), "b");
  EXPECT_EQ(r->spec().training().global_batch_size(), 8);
  EXPECT_TRUE(r->spec().fault_tolerance().has_max_restarts());
  EXPECT_TRUE(r->request_id().empty());

  // curl -d labels JSON as a form; it is still read as JSON.
  r = ParseSubmitJobBody("application/x-www-form-urlencoded", R"({"request_id": "x", "spec": {"name": "c"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id(), "x");

  r = ParseSubmitJobBody("application/yaml; charset=utf-8",
                         "name: d\nresources: {nodes: {min: 1, max: 2}}\ncommand: [/bin/true]\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->spec().name(), "d");
  EXPECT_EQ(r->spec().resources().nodes().max(), 2);
}

std::string SubmitError(const std::string& content_type, const std::string& body) {
  auto r = ParseSubmitJobBody(content_type, body);
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(RestCodec, SubmitBodyErrorsNameTheFieldPath) {
  EXPECT_NE(SubmitError("", "").find("request body: empty"), std::string::npos);
  EXPECT_NE(SubmitError("", "  \n").find("request body: empty"), std::string::npos);
  EXPECT_NE(SubmitError("", "{").find("request body: invalid JSON"), std::string::npos);
  EXPECT_NE(SubmitError("", "{\"name\": \"\xff\"}").find("invalid JSON"), std::string::npos);
  EXPECT_NE(SubmitError("", "1e999999").find("invalid JSON"), std::string::npos);
  EXPECT_NE(SubmitError("", "[1,2]").find("expected an object"), std::string::npos);
  EXPECT_NE(SubmitError("", "42").find("got a number"), std::string::npos);
  EXPECT_NE(SubmitError("", R"({"spec": 5})").find("spec: expected an object"), std::string::npos);
  EXPECT_NE(SubmitError("", R"({"spec": {}, "requestId": 5})").find("requestId: expected a string"), std::string::npos);
  EXPECT_NE(SubmitError("", R"({"spec": {}, "priority": 1})").find("unknown field 'priority'"), std::string::npos);
  EXPECT_NE(SubmitError("", R"({"name": "a", "training": {"lr": "fast"}})").find("spec.training.lr"),
            std::string::npos);
  EXPECT_NE(SubmitError("", R"({"spec": {"name": "a", "training": {"learning_rate": 0.1}}})")
                .find("spec.training.learning_rate: unknown field (did you mean lr?)"),
            std::string::npos);
  EXPECT_NE(SubmitError("", R"({"name": "a", "resources": {"nodes": {"min": "2"}}})").find("spec.resources.nodes.min"),
            std::string::npos);
  EXPECT_NE(SubmitError("application/yaml", "name: [unclosed\n").find("request body"), std::string::npos);
  EXPECT_NE(SubmitError("application/yaml", "name: \"\xff\"\n").find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(SubmitError("application/yaml", "training: {lr: abc}\n").find("spec.training.lr"), std::string::npos);
  // Deep nesting is an error, not a crash.
  EXPECT_FALSE(ParseSubmitJobBody("", std::string(100000, '[') + std::string(100000, ']')).ok());
  EXPECT_FALSE(ParseSubmitJobBody("application/yaml", std::string(100000, '[') + std::string(100000, ']')).ok());
}

TEST(RestCodec, JobStatesByShortOrFullNameOrNumber) {
  EXPECT_EQ(*ParseJobState("RUNNING"), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(*ParseJobState("running"), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(*ParseJobState("JOB_STATE_QUEUED"), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(*ParseJobState("5"), v1::JOB_STATE_SUCCEEDED);
  for (const char* bad : {"", "UNSPECIFIED", "0", "99", "RUN", "JOB_STATE_", "-1"}) {
    auto s = ParseJobState(bad);
    EXPECT_FALSE(s.ok()) << bad;
    if (!s.ok()) {
      EXPECT_NE(s.status().message().find("state: unknown job state"), std::string::npos);
    }
  }
}

TEST(RestCodec, ListJobsQuery) {
  auto r = ParseListJobsQuery({{"state", "RUNNING"}, {"state", "QUEUED,failed"}, {"pageSize", "50"}, {"pageToken", "12"}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->states_size(), 3);
  EXPECT_EQ(r->states(0), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(r->states(2), v1::JOB_STATE_FAILED);
  EXPECT_EQ(r->page_size(), 50);
  EXPECT_EQ(r->page_token(), "12");
  r = ParseListJobsQuery({{"states", "JOB_STATE_RUNNING"}, {"page_size", "0"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->states_size(), 1);
  EXPECT_FALSE(ParseListJobsQuery({{"pageSize", "abc"}}).ok());
  EXPECT_FALSE(ParseListJobsQuery({{"pageSize", "12abc"}}).ok());
  EXPECT_FALSE(ParseListJobsQuery({{"pageSize", "99999999999"}}).ok());
  EXPECT_FALSE(ParseListJobsQuery({{"pageSize", "1"}, {"pageSize", "2"}}).ok());
  EXPECT_FALSE(ParseListJobsQuery({{"state", "RUNNING,"}}).ok());
  auto unknown = ParseListJobsQuery({{"sort", "name"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown query parameter 'sort'"), std::string::npos);
}

TEST(RestCodec, LogsQuery) {
  auto r = ParseLogsQuery("3", {{"follow", "true"}, {"rank", "1"}, {"attempt", "2"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->job_id(), "3");
  EXPECT_TRUE(r->follow());
  EXPECT_TRUE(r->has_rank());
  EXPECT_EQ(r->rank(), 1);
  EXPECT_EQ(r->attempt(), 2);
  r = ParseLogsQuery("3", {});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_rank());
  EXPECT_FALSE(r->follow());
  EXPECT_TRUE(ParseLogsQuery("3", {{"follow", ""}})->follow());
  EXPECT_FALSE(ParseLogsQuery("3", {{"follow", "0"}})->follow());
  EXPECT_FALSE(ParseLogsQuery("3", {{"follow", "maybe"}}).ok());
  EXPECT_FALSE(ParseLogsQuery("3", {{"rank", "-1"}}).ok());
  EXPECT_FALSE(ParseLogsQuery("3", {{"rank", "x"}}).ok());
  EXPECT_FALSE(ParseLogsQuery("3", {{"rank", "1"}, {"rank", "2"}}).ok());
  EXPECT_FALSE(ParseLogsQuery("3", {{"tail", "10"}}).ok());
}

TEST(RestCodec, DrainQueryTakesEvictOnly) {
  auto r = ParseDrainQuery("n1", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name(), "n1");
  EXPECT_FALSE(r->evict());
  EXPECT_TRUE(ParseDrainQuery("n1", {{"evict", "true"}})->evict());
  EXPECT_TRUE(ParseDrainQuery("n1", {{"evict", ""}})->evict()) << "a bare ?evict";
  EXPECT_FALSE(ParseDrainQuery("n1", {{"evict", "0"}})->evict());
  EXPECT_FALSE(ParseDrainQuery("n1", {{"evict", "yes please"}}).ok());
  EXPECT_FALSE(ParseDrainQuery("n1", {{"evict", "1"}, {"evict", "0"}}).ok());
  EXPECT_FALSE(ParseDrainQuery("n1", {{"now", "1"}}).ok());
}

TEST(RestCodec, LogLinesGetTheirOriginAndPartialLinesWait) {
  LogLinePrefixer p;
  v1::LogChunk a;
  a.set_attempt(1);
  a.set_rank(0);
  a.set_data("one\ntw");
  v1::LogChunk b;
  b.set_attempt(1);
  b.set_rank(1);
  b.set_data("x\n");
  EXPECT_EQ(p.Add(a), "[attempt 1 rank 0] one\n");
  EXPECT_EQ(p.Add(b), "[attempt 1 rank 1] x\n");
  a.set_data("o\nthree");
  EXPECT_EQ(p.Add(a), "[attempt 1 rank 0] two\n");
  EXPECT_EQ(p.Flush(), "[attempt 1 rank 0] three\n");
  EXPECT_EQ(p.Flush(), "");
  // An endless line is broken up instead of buffered forever.
  a.set_data(std::string(LogLinePrefixer::kMaxPartialLine + 1, 'x'));
  EXPECT_EQ(p.Add(a), "[attempt 1 rank 0] " + std::string(LogLinePrefixer::kMaxPartialLine + 1, 'x') + "\n");
  EXPECT_EQ(p.Flush(), "");
}

}  // namespace
}  // namespace eft::controller::http
