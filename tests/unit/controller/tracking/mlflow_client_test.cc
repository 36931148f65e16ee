// The HTTP(S) client under the MLflow tracker (controller/tracking/http_client.h, mlflow_client.h)
// against real sockets: what it sends, its deadlines against a server that never answers or is not
// there, HTTPS with a certificate made by openssl, and how MLflow's replies become statuses.
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/http/http_server.h"
#include "common/stopwatch.h"
#include "controller/tracking/http_client.h"
#include "controller/tracking/mlflow_client.h"
#include "tests/unit/controller/tracking/test_servers.h"

namespace eft::controller {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::BadServer;

TEST(ServerUrlTest, SchemeHostPortAndPathPrefix) {
  auto u = ParseServerUrl("http://mlflow:5000/prefix/");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_FALSE(u->tls);
  EXPECT_EQ(u->host, "mlflow");
  EXPECT_EQ(u->port, "5000");
  EXPECT_EQ(u->path, "/prefix");
  u = ParseServerUrl("https://[::1]");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, "443");
  EXPECT_EQ(ParseServerUrl("http://h")->port, "80");
  for (const char* bad : {"mlflow:5000", "ftp://h", "http://", "http://h:0", "http://h:99999", "http://h:x",
                          "http://u:p@h", "http://h/?q", "http://[::1"}) {
    EXPECT_FALSE(ParseServerUrl(bad).ok()) << bad;
  }
  EXPECT_NE(ParseServerUrl("http://u:p@h").status().message().find("MLFLOW_TRACKING_TOKEN"), std::string::npos);
}

TEST(MlflowReplyTest, WhatMaySucceedLaterIsRetryableAndTheRestKeepsMlflowsCode) {
  auto code = [](int status, const std::string& body) {
    return mlflow::StatusOfReply("runs/log-batch", {status, body}).code();
  };
  EXPECT_EQ(code(200, "{}"), StatusCode::kOk);
  EXPECT_EQ(code(503, "busy"), StatusCode::kUnavailable);
  EXPECT_EQ(code(500, R"({"error_code":"INTERNAL_ERROR","message":"db locked"})"), StatusCode::kUnavailable);
  EXPECT_EQ(code(429, R"({"error_code":"REQUEST_LIMIT_EXCEEDED","message":"slow down"})"), StatusCode::kUnavailable);
  EXPECT_EQ(code(401, "no"), StatusCode::kUnavailable) << "credentials can be fixed; the points wait";
  EXPECT_EQ(code(404, "<html>Not Found</html>"), StatusCode::kUnavailable) << "not an MLflow server at that path";
  EXPECT_EQ(code(404, R"({"error_code":"RESOURCE_DOES_NOT_EXIST","message":"Run 'x' not found"})"),
            StatusCode::kNotFound);
  EXPECT_EQ(code(400, R"({"error_code":"RESOURCE_ALREADY_EXISTS","message":"exists"})"), StatusCode::kAlreadyExists);
  EXPECT_EQ(code(400, R"({"error_code":"INVALID_PARAMETER_VALUE","message":"Changing param values is not allowed"})"),
            StatusCode::kInvalidArgument);
  const Status s = mlflow::StatusOfReply("runs/log-batch", {400, R"({"error_code":"INVALID_PARAMETER_VALUE","message":"bad"})"});
  EXPECT_EQ(s.message(), "runs/log-batch: HTTP 400 INVALID_PARAMETER_VALUE: bad");
}

TEST(MlflowClientOptionsTest, CredentialsFromMlflowsOwnEnvironmentVariables) {
  ::setenv("MLFLOW_TRACKING_USERNAME", "alice", 1);
  ::setenv("MLFLOW_TRACKING_PASSWORD", "pw", 1);
  auto o = mlflow::ClientOptionsFromEnvironment(5000ms);
  ASSERT_EQ(o.headers.size(), 1u);
  EXPECT_EQ(o.headers[0].second, "Basic YWxpY2U6cHc=");
  EXPECT_EQ(o.timeout, 5000ms);
  EXPECT_EQ(o.connect_timeout, 3000ms);
  ::setenv("MLFLOW_TRACKING_TOKEN", "t0k", 1);
  o = mlflow::ClientOptionsFromEnvironment(1000ms);
  EXPECT_EQ(o.headers.at(0).second, "Bearer t0k");
  EXPECT_EQ(o.connect_timeout, 1000ms);
  for (const char* name : {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"}) ::unsetenv(name);
  EXPECT_TRUE(mlflow::ClientOptionsFromEnvironment(1000ms).headers.empty());
}

// An HTTP(S) server that records the requests and answers what `reply` says.
class Recording {
 public:
  explicit Recording(std::function<http::HttpReply(const http::HttpRequest&)> reply, const std::string& cert = "",
                     const std::string& key = "") {
    http::HttpServerConfig config;
    config.address = "127.0.0.1:0";
    config.tls_cert_file = cert;
    config.tls_key_file = key;
    server_ = std::make_unique<http::HttpServer>(config, [this, reply](const http::HttpRequest& r) {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(r);
      return reply(r);
    });
    Status s = server_->Start();
    EXPECT_TRUE(s.ok()) << s;
  }
  int port() const { return server_->port(); }
  std::vector<http::HttpRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  std::mutex mu_;
  std::vector<http::HttpRequest> requests_;
  std::unique_ptr<http::HttpServer> server_;
};

http::HttpReply Reply(int status, std::string body) {
  http::HttpReply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

TEST(HttpClientTest, SendsTheTargetUnderTheUrlsPathWithHeadersAndBody) {
  Recording server([](const http::HttpRequest&) { return Reply(200, R"({"ok":true})"); });
  HttpClientOptions o;
  o.headers = {{"Authorization", "Bearer t0k"}};
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(server.port()) + "/mlflow/", o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto reply = (*client)->Call("POST", "/api/2.0/mlflow/runs/log-batch", R"({"run_id":"r"})");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->body, R"({"ok":true})");
  auto get = (*client)->Call("GET", "/api/2.0/mlflow/runs/get?run_id=" + UrlEncode("a b/c"), "");
  ASSERT_TRUE(get.ok()) << get.status();
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].target, "/mlflow/api/2.0/mlflow/runs/log-batch");
  EXPECT_EQ(requests[0].content_type, "application/json");
  EXPECT_EQ(requests[0].authorization, "Bearer t0k");
  EXPECT_EQ(requests[0].body, R"({"run_id":"r"})");
  EXPECT_EQ(requests[1].method, "GET");
  EXPECT_EQ(requests[1].target, "/mlflow/api/2.0/mlflow/runs/get?run_id=a%20b%2Fc");
}

TEST(HttpClientTest, AServerThatNeverAnswersCostsTheTimeoutAndNoMore) {
  BadServer silent(BadServer::Mode::kSilent);
  HttpClientOptions o;
  o.timeout = 700ms;
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(silent.port()), o);
  ASSERT_TRUE(client.ok());
  Stopwatch watch;
  auto reply = (*client)->Call("POST", "/api/2.0/mlflow/runs/log-batch", "{}");
  const double seconds = watch.Seconds();
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kDeadlineExceeded) << reply.status();
  EXPECT_NE(reply.status().message().find("no reply within 700 ms (reading the reply)"), std::string::npos)
      << reply.status();
  EXPECT_GE(seconds, 0.65);
  EXPECT_LT(seconds, 2.0);
}

TEST(HttpClientTest, NothingListeningAndAHangUpAreUnavailableAtOnce) {
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(testing::ClosedPort()), {});
  Stopwatch watch;
  auto reply = (*client)->Call("GET", "/api/2.0/mlflow/runs/get?run_id=x", "");
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable) << reply.status();
  EXPECT_NE(reply.status().message().find("connecting"), std::string::npos) << reply.status();
  EXPECT_LT(watch.Seconds(), 1.0);
  BadServer hangs_up(BadServer::Mode::kHangUp);
  client = HttpClient::Create("http://127.0.0.1:" + std::to_string(hangs_up.port()), {});
  reply = (*client)->Call("POST", "/x", "{}");
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable) << reply.status();
  EXPECT_EQ(hangs_up.accepted(), 1);
}

TEST(MlflowClientTest, AnOverloadedServerIsRetryableAndARefusalIsNot) {
  Recording server([](const http::HttpRequest& r) {
    if (r.target.find("log-batch") != std::string::npos) {
      return Reply(400, R"({"error_code":"INVALID_PARAMETER_VALUE","message":"Param value too long"})");
    }
    return Reply(503, "<html>upstream busy</html>");
  });
  auto client = mlflow::MlflowClient::Create("http://127.0.0.1:" + std::to_string(server.port()), {});
  ASSERT_TRUE(client.ok());
  auto run = (*client)->GetRun("r1");
  EXPECT_EQ(run.status().code(), StatusCode::kUnavailable) << run.status();
  Status batch = (*client)->LogBatch("r1", {{"train/loss", 0.5, 1, 1}}, {{"a", "b"}}, {});
  EXPECT_EQ(batch.code(), StatusCode::kInvalidArgument) << batch;
  EXPECT_NE(batch.message().find("Param value too long"), std::string::npos);
  const json sent = json::parse(server.requests().back().body);
  EXPECT_EQ(sent["run_id"], "r1");
  EXPECT_EQ(sent["metrics"][0]["key"], "train/loss");
  EXPECT_EQ(sent["metrics"][0]["step"], 1);
  EXPECT_EQ(sent["params"][0]["value"], "b");
}

TEST(MlflowClientTest, ARunsLatestMetricsAreItsHighestStepsAndAnOddReplyIsNoCrash) {
  Recording server([](const http::HttpRequest& r) {
    if (r.target.find("run_id=odd") != std::string::npos) return Reply(200, R"({"run": [1, 2]})");
    return Reply(200, R"({"run": {"info": {"status": "RUNNING"}, "data": {
        "metrics": [{"key": "train/loss", "value": 0.1, "timestamp": 5, "step": 40},
                    {"key": "eval/eval/loss", "value": 0.2, "timestamp": 5, "step": "30"}],
        "params": [{"key": "model", "value": "/m"}],
        "tags": [{"key": "eft.state", "value": "RUNNING"}]}}})");
  });
  auto client = mlflow::MlflowClient::Create("http://127.0.0.1:" + std::to_string(server.port()), {});
  auto run = (*client)->GetRun("r1");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->status, "RUNNING");
  EXPECT_EQ(run->max_step.at("train/loss"), 40);
  EXPECT_EQ(run->max_step.at("eval/eval/loss"), 30);
  EXPECT_EQ(run->params.count("model"), 1u);
  EXPECT_EQ(run->tags.at("eft.state"), "RUNNING");
  auto odd = (*client)->GetRun("odd");
  EXPECT_EQ(odd.status().code(), StatusCode::kUnavailable) << odd.status();
}

// HTTPS: a certificate for 127.0.0.1 made by openssl, trusted through ca_file.
class HttpsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("openssl version > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "SKIPPED LOUDLY: the openssl program is missing (Debian package openssl); it makes the certificate";
    }
    dir_ = std::filesystem::temp_directory_path() / ("eft-https-client-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  bool MakeCertificate(const std::string& name, const std::string& san) {
    const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=" +
                            name + " -addext subjectAltName=" + san + " -keyout " + (dir_ / (name + ".key")).string() +
                            " -out " + (dir_ / (name + ".pem")).string() + " > /dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
  }
  std::string Path(const std::string& file) const { return (dir_ / file).string(); }
  std::filesystem::path dir_;
};

TEST_F(HttpsClientTest, VerifiesTheServersCertificateAndName) {
  ASSERT_TRUE(MakeCertificate("local", "IP:127.0.0.1"));
  ASSERT_TRUE(MakeCertificate("other", "DNS:other.example"));
  Recording server([](const http::HttpRequest&) { return Reply(200, "{}"); }, Path("local.pem"), Path("local.key"));
  const std::string url = "https://127.0.0.1:" + std::to_string(server.port());
  HttpClientOptions trusted;
  trusted.ca_file = Path("local.pem");
  auto ok = (*HttpClient::Create(url, trusted))->Call("GET", "/x", "");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->status, 200);

  auto unknown = (*HttpClient::Create(url, {}))->Call("GET", "/x", "");
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(unknown.status().message().find("TLS handshake"), std::string::npos) << unknown.status();

  HttpClientOptions insecure;
  insecure.insecure_tls = true;
  EXPECT_TRUE((*HttpClient::Create(url, insecure))->Call("GET", "/x", "").ok());

  Recording impostor([](const http::HttpRequest&) { return Reply(200, "{}"); }, Path("other.pem"), Path("other.key"));
  HttpClientOptions trusts_it;
  trusts_it.ca_file = Path("other.pem");
  auto wrong_name =
      (*HttpClient::Create("https://127.0.0.1:" + std::to_string(impostor.port()), trusts_it))->Call("GET", "/x", "");
  EXPECT_EQ(wrong_name.status().code(), StatusCode::kUnavailable) << "a certificate for another name";

  HttpClientOptions missing;
  missing.ca_file = Path("no-such.pem");
  EXPECT_EQ(HttpClient::Create(url, missing).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eft::controller
