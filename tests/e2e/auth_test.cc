// Authentication end to end (docs/auth.md): a real controller with a tokens file and a join token,
// every REST endpoint and every gRPC method called as anonymous, with a bad token, as viewer,
// submitter (own and someone else's job), admin and with the workers' join token; workers with a
// wrong join token; eftctl with and without a token; and TLS (gRPC + HTTPS) with self-signed
// certificates made by openssl.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "controller/auth.h"
#include "eft/v1/agent.grpc.pb.h"
#include "tests/e2e/cluster.h"
#include "tests/unit/common/http/http_test_client.h"

namespace eft::testing {
namespace {

namespace fs = std::filesystem;

const std::string kAdminToken = "admin-0123456789abcdef";
const std::string kAliceToken = "alice-0123456789abcdef";  // submitter, stored hashed
const std::string kBobToken = "bob-0123456789abcdef00";    // submitter
const std::string kViewerToken = "viewer-0123456789abcdef";  // stored hashed
const std::string kJoinToken = "join-0123456789abcdef00";

enum Caller { kAnonymous, kBadToken, kViewer, kAlice, kBob, kAdmin, kWorker };
const char* CallerName(Caller c) {
  static const char* names[] = {"anonymous", "bad-token", "viewer", "alice", "bob", "admin", "worker"};
  return names[c];
}
std::string TokenOf(Caller c) {
  switch (c) {
    case kAnonymous: return "";
    case kBadToken: return "not-a-token-0123456789";
    case kViewer: return kViewerToken;
    case kAlice: return kAliceToken;
    case kBob: return kBobToken;
    case kAdmin: return kAdminToken;
    case kWorker: return kJoinToken;
  }
  return "";
}
const std::vector<Caller> kAllCallers = {kAnonymous, kBadToken, kViewer, kAlice, kBob, kAdmin, kWorker};

// The tokens file, join token and (on demand) a self-signed certificate, in a directory of their own.
class AuthFiles {
 public:
  AuthFiles() {
    std::string tmpl = (fs::temp_directory_path() / "eft-auth-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    dir_ = ::mkdtemp(buf.data());
    using controller::Sha256;
    using controller::ToHex;
    std::ofstream(tokens()) << "# users of the test cluster\n"
                            << "- {token: " << kAdminToken << ", user: root, role: admin}\n"
                            << "- {token_sha256: " << ToHex(Sha256(kAliceToken)) << ", user: alice, role: submitter}\n"
                            << "- {token: " << kBobToken << ", user: bob, role: submitter}\n"
                            << "- {token_sha256: " << ToHex(Sha256(kViewerToken)) << ", user: vic, role: viewer}\n";
    std::ofstream(join()) << kJoinToken << "\n";
  }
  ~AuthFiles() {
    std::error_code ec;
    if (!::testing::Test::HasFailure()) fs::remove_all(dir_, ec);
  }
  std::string tokens() const { return dir_ + "/tokens.yaml"; }
  std::string join() const { return dir_ + "/join"; }
  std::string cert() const { return dir_ + "/cert.pem"; }
  std::string key() const { return dir_ + "/key.pem"; }
  const std::string& dir() const { return dir_; }
  std::vector<std::string> ControllerArgs() const {
    return {"--auth-tokens", tokens(), "--join-token-file", join()};
  }
  // A self-signed certificate for 127.0.0.1 (it is its own CA).
  bool MakeCertificate() const {
    std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "
                      "/CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
                      key() + " -out " + cert() + " > " + dir_ + "/openssl.log 2>&1";
    return std::system(cmd.c_str()) == 0;
  }

 private:
  std::string dir_;
};

ClusterOptions AuthCluster(const AuthFiles& files, int workers) {
  ClusterOptions o;
  o.workers = workers;
  o.http = true;
  o.controller_args = files.ControllerArgs();
  o.worker_env = {{"EFT_JOIN_TOKEN", kJoinToken}};
  o.client_token = kAdminToken;
  return o;
}

int Rest(TestCluster& c, Caller who, const std::string& method, const std::string& target, const std::string& body = "",
         std::string* www_authenticate = nullptr) {
  std::string headers = "Content-Type: application/json\r\n";
  if (who != kAnonymous) headers += "Authorization: Bearer " + TokenOf(who) + "\r\n";
  auto r = HttpCall(c.http_port(), method, target, body, headers);
  if (!r) return -1;
  if (www_authenticate) *www_authenticate = r->header("www-authenticate");
  return r->status;
}

std::string SpecJson(TestCluster& c, const std::string& name) {
  // Needs two nodes on a one-node cluster: stays QUEUED, so every test sees the same job states.
  v1::SubmitJobRequest req;
  *req.mutable_spec() = c.WorkloadJob(name, 2, 2, 3, 10, 0);
  std::string out;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(req, &out).ok());
  return out;
}

struct Grpc {
  explicit Grpc(TestCluster& c) {
    auto channel = grpc::CreateChannel(c.controller_address(), c.credentials());
    jobs = v1::JobService::NewStub(channel);
    nodes = v1::NodeService::NewStub(channel);
    agents = v1::AgentService::NewStub(channel);
  }
  static void Prepare(grpc::ClientContext* ctx, Caller who) {
    if (who != kAnonymous) ctx->AddMetadata("authorization", "Bearer " + TokenOf(who));
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::NodeService::Stub> nodes;
  std::unique_ptr<v1::AgentService::Stub> agents;
};

// The code every caller gets for an action open to `allowed` (users' roles), refused to the rest.
grpc::StatusCode Expected(Caller who, std::initializer_list<Caller> allowed) {
  if (who == kAnonymous || who == kBadToken) return grpc::StatusCode::UNAUTHENTICATED;
  for (Caller a : allowed) {
    if (a == who) return grpc::StatusCode::OK;
  }
  return grpc::StatusCode::PERMISSION_DENIED;
}
int HttpOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return 200;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    case grpc::StatusCode::PERMISSION_DENIED: return 403;
    case grpc::StatusCode::NOT_FOUND: return 404;
    default: return 500;
  }
}

const std::initializer_list<Caller> kReaders = {kViewer, kAlice, kBob, kAdmin};
const std::initializer_list<Caller> kSubmitters = {kAlice, kBob, kAdmin};

TEST(Auth, RestMatrix) {
  AuthFiles files;
  TestCluster c(AuthCluster(files, 1));
  c.StartAll();
  // Alice's job; every cancel below that succeeds works on a fresh one.
  std::string alice_job_body;
  auto submit_as = [&](Caller who, const std::string& name) {
    auto r = HttpCall(c.http_port(), "POST", "/v1/jobs", SpecJson(c, name),
                      "Content-Type: application/json\r\nAuthorization: Bearer " + TokenOf(who) + "\r\n");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    auto j = nlohmann::json::parse(r ? r->body : "{}", nullptr, false);
    return j.is_object() ? j.value("id", std::string()) : std::string();
  };
  std::string alice_job = submit_as(kAlice, "alice-job");
  ASSERT_FALSE(alice_job.empty());
  EXPECT_EQ(c.GetJob(alice_job).owner(), "alice") << "the submitting user is recorded";

  for (Caller who : kAllCallers) {
    SCOPED_TRACE(CallerName(who));
    EXPECT_EQ(Rest(c, who, "GET", "/healthz"), 200);
    EXPECT_EQ(Rest(c, who, "GET", "/readyz"), 200);
    EXPECT_EQ(Rest(c, who, "GET", "/metrics"), HttpOf(Expected(who, kReaders)));
    std::string challenge;
    EXPECT_EQ(Rest(c, who, "GET", "/v1/jobs", "", &challenge), HttpOf(Expected(who, kReaders)));
    if (who == kAnonymous || who == kBadToken) {
      EXPECT_EQ(challenge.rfind("Bearer", 0), 0u) << challenge;
    }
    EXPECT_EQ(Rest(c, who, "GET", "/v1/jobs/" + alice_job), HttpOf(Expected(who, kReaders)));
    EXPECT_EQ(Rest(c, who, "GET", "/v1/jobs/" + alice_job + "/logs"), HttpOf(Expected(who, kReaders)));
    EXPECT_EQ(Rest(c, who, "GET", "/v1/nodes"), HttpOf(Expected(who, kReaders)));
    EXPECT_EQ(Rest(c, who, "POST", "/v1/jobs", SpecJson(c, std::string("by-") + CallerName(who))),
              HttpOf(Expected(who, kSubmitters)));
    // Cancel: alice her own, admin anyone's; bob may not touch alice's job.
    EXPECT_EQ(Rest(c, who, "POST", "/v1/jobs/" + alice_job + ":cancel"),
              HttpOf(Expected(who, {kAlice, kAdmin})));
    if (who == kAlice || who == kAdmin) alice_job = submit_as(kAlice, "alice-again");
    EXPECT_EQ(Rest(c, who, "POST", "/v1/nodes/node0:drain"), HttpOf(Expected(who, {kAdmin})));
    EXPECT_EQ(Rest(c, who, "POST", "/v1/nodes/node0:undrain"), HttpOf(Expected(who, {kAdmin})));
  }
  // A submitter learns that a job does not exist only after proving they may cancel some job.
  EXPECT_EQ(Rest(c, kAlice, "POST", "/v1/jobs/999:cancel"), 404);
  EXPECT_EQ(Rest(c, kViewer, "POST", "/v1/jobs/999:cancel"), 403);
  // The refusal says why, in the API's JSON error form.
  auto r = HttpCall(c.http_port(), "POST", "/v1/jobs/" + alice_job + ":cancel", "",
                    "Authorization: Bearer " + kViewerToken + "\r\n");
  ASSERT_TRUE(r);
  auto body = nlohmann::json::parse(r->body, nullptr, false);
  EXPECT_EQ(body.value("code", 0), 7);
  EXPECT_EQ(body.value("message", std::string()), "role viewer may not cancel jobs");
  auto bob = HttpCall(c.http_port(), "POST", "/v1/jobs/" + alice_job + ":cancel", "",
                      "Authorization: Bearer " + kBobToken + "\r\n");
  ASSERT_TRUE(bob);
  EXPECT_NE(bob->body.find("may cancel only their own jobs"), std::string::npos) << bob->body;
}

TEST(Auth, GrpcMatrix) {
  AuthFiles files;
  TestCluster c(AuthCluster(files, 1));
  c.StartAll();
  Grpc g(c);
  auto submit = [&](Caller who, const std::string& name, v1::Job* out) {
    grpc::ClientContext ctx;
    Grpc::Prepare(&ctx, who);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = c.WorkloadJob(name, 2, 2, 3, 10, 0);
    return g.jobs->SubmitJob(&ctx, req, out).error_code();
  };
  v1::Job alice_job;
  ASSERT_EQ(submit(kAlice, "alice-job", &alice_job), grpc::StatusCode::OK);
  EXPECT_EQ(alice_job.owner(), "alice");

  for (Caller who : kAllCallers) {
    SCOPED_TRACE(CallerName(who));
    v1::Job job;
    EXPECT_EQ(submit(who, std::string("by-") + CallerName(who), &job), Expected(who, kSubmitters));
    {
      grpc::ClientContext ctx;
      Grpc::Prepare(&ctx, who);
      v1::GetJobRequest req;
      req.set_id(alice_job.id());
      EXPECT_EQ(g.jobs->GetJob(&ctx, req, &job).error_code(), Expected(who, kReaders));
    }
    {
      grpc::ClientContext ctx;
      Grpc::Prepare(&ctx, who);
      v1::ListJobsResponse resp;
      EXPECT_EQ(g.jobs->ListJobs(&ctx, v1::ListJobsRequest(), &resp).error_code(), Expected(who, kReaders));
    }
    {
      // A queued job never ends: an allowed watch gets the job at once, then is cancelled here.
      grpc::ClientContext ctx;
      Grpc::Prepare(&ctx, who);
      v1::WatchJobRequest req;
      req.set_id(alice_job.id());
      auto reader = g.jobs->WatchJob(&ctx, req);
      v1::Job seen;
      bool got = reader->Read(&seen);
      EXPECT_EQ(got, Expected(who, kReaders) == grpc::StatusCode::OK);
      if (got) ctx.TryCancel();
      grpc::Status s = reader->Finish();
      if (!got) {
        EXPECT_EQ(s.error_code(), Expected(who, kReaders));
      }
    }
    {
      grpc::ClientContext ctx;
      Grpc::Prepare(&ctx, who);
      v1::GetLogsRequest req;
      req.set_job_id(alice_job.id());
      auto reader = g.jobs->GetLogs(&ctx, req);
      v1::LogChunk chunk;
      while (reader->Read(&chunk)) {
      }
      EXPECT_EQ(reader->Finish().error_code(), Expected(who, kReaders));
    }
    {
      grpc::ClientContext ctx;
      Grpc::Prepare(&ctx, who);
      v1::ListNodesResponse resp;
      EXPECT_EQ(g.nodes->ListNodes(&ctx, v1::ListNodesRequest(), &resp).error_code(), Expected(who, kReaders));
    }
    for (bool drain : {true, false}) {
      grpc::ClientContext ctx;
      Grpc::Prepare(&ctx, who);
      v1::Node node;
      grpc::Status s;
      if (drain) {
        v1::DrainNodeRequest req;
        req.set_name("node0");
        s = g.nodes->DrainNode(&ctx, req, &node);
      } else {
        v1::UndrainNodeRequest req;
        req.set_name("node0");
        s = g.nodes->UndrainNode(&ctx, req, &node);
      }
      EXPECT_EQ(s.error_code(), Expected(who, {kAdmin})) << (drain ? "drain" : "undrain");
    }
    {
      grpc::ClientContext ctx;
      Grpc::Prepare(&ctx, who);
      v1::CancelJobRequest req;
      req.set_id(alice_job.id());
      grpc::Status s = g.jobs->CancelJob(&ctx, req, &job);
      EXPECT_EQ(s.error_code(), Expected(who, {kAlice, kAdmin})) << s.error_message();
      if (s.ok()) {
        ASSERT_EQ(submit(kAlice, "alice-again", &alice_job), grpc::StatusCode::OK);
      }
    }
    // AgentService: the join token only. A fake node registers, heartbeats and pushes no logs.
    const grpc::StatusCode agent = who == kWorker                             ? grpc::StatusCode::OK
                                   : (who == kAnonymous || who == kBadToken) ? grpc::StatusCode::UNAUTHENTICATED
                                                                               : grpc::StatusCode::PERMISSION_DENIED;
    {
      grpc::ClientContext ctx;
      Grpc::Prepare(&ctx, who);
      v1::RegisterRequest req;
      req.set_node_name("fake");
      req.set_address("127.0.0.1");
      req.set_slots(1);
      req.set_incarnation("x");
      v1::RegisterResponse resp;
      EXPECT_EQ(g.agents->Register(&ctx, req, &resp).error_code(), agent);
    }
    {
      grpc::ClientContext ctx;
      Grpc::Prepare(&ctx, who);
      v1::HeartbeatRequest req;
      req.set_node_name("fake");
      req.set_incarnation("x");
      v1::HeartbeatResponse resp;
      EXPECT_EQ(g.agents->Heartbeat(&ctx, req, &resp).error_code(), agent);
    }
    {
      grpc::ClientContext ctx;
      Grpc::Prepare(&ctx, who);
      v1::PushLogsResponse resp;
      EXPECT_EQ(g.agents->PushLogs(&ctx, v1::PushLogsRequest(), &resp).error_code(), agent);
    }
  }
  {
    grpc::ClientContext ctx;
    Grpc::Prepare(&ctx, kBob);
    v1::CancelJobRequest req;
    req.set_id(alice_job.id());
    v1::Job job;
    grpc::Status s = g.jobs->CancelJob(&ctx, req, &job);
    EXPECT_NE(s.error_message().find("user bob (role submitter) may cancel only their own jobs; this one belongs to alice"),
              std::string::npos)
        << s.error_message();
  }
}

// docs/auth.md: above max_submitter_priority only an admin may submit, over REST and gRPC alike.
TEST(Auth, APriorityAboveTheSubmittersLimitTakesAnAdmin) {
  AuthFiles files;
  ClusterOptions o = AuthCluster(files, 1);
  o.controller_args.insert(o.controller_args.end(), {"--max-submitter-priority", "2"});
  TestCluster c(o);
  c.StartAll();
  auto body = [&](const std::string& name, int priority) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = c.WorkloadJob(name, 2, 2, 3, 10, 0);
    req.mutable_spec()->set_priority(priority);
    std::string out;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(req, &out).ok());
    return out;
  };
  EXPECT_EQ(Rest(c, kAlice, "POST", "/v1/jobs", body("at-limit", 2)), 200);
  EXPECT_EQ(Rest(c, kAlice, "POST", "/v1/jobs", body("low", -7)), 200);
  auto r = HttpCall(c.http_port(), "POST", "/v1/jobs", body("above", 3),
                    "Content-Type: application/json\r\nAuthorization: Bearer " + kAliceToken + "\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  EXPECT_EQ(j.value("message", std::string()),
            "user alice (role submitter) may submit jobs of priority at most 2 (the controller's "
            "max_submitter_priority); priority 3 takes an admin");
  EXPECT_EQ(Rest(c, kAdmin, "POST", "/v1/jobs", body("admin-above", 1000)), 200);

  Grpc g(c);
  auto submit = [&](Caller who, int priority) {
    grpc::ClientContext ctx;
    Grpc::Prepare(&ctx, who);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = c.WorkloadJob("grpc-" + std::to_string(priority), 2, 2, 3, 10, 0);
    req.mutable_spec()->set_priority(priority);
    v1::Job job;
    return g.jobs->SubmitJob(&ctx, req, &job).error_code();
  };
  EXPECT_EQ(submit(kBob, 3), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(submit(kBob, 2), grpc::StatusCode::OK);
  EXPECT_EQ(submit(kAdmin, 50), grpc::StatusCode::OK);
}

TEST(Auth, WorkersNeedTheJoinTokenAndEftctlATokenAndTheLoopbackRule) {
  AuthFiles files;
  ClusterOptions o = AuthCluster(files, 1);
  TestCluster c(o);
  c.StartAll();
  // A worker with a wrong join token, and one with none, never become nodes.
  ChildProcess wrong, none;
  auto worker_argv = [&](const std::string& name) {
    return std::vector<std::string>{BuildDir() + "/worker/eft-worker", "--controller", c.controller_address(), "--name",
                                    name, "--slots", "1", "--work-dir", c.dir() + "/work/" + name, "--address",
                                    "127.0.0.1", "--snapshot-dir", c.dir() + "/work/" + name + "/shm"};
  };
  ASSERT_TRUE(wrong.Start(worker_argv("intruder"), {{"CUDA_VISIBLE_DEVICES", ""}, {"EFT_JOIN_TOKEN", kAdminToken}},
                          c.dir() + "/intruder.log"));
  ASSERT_TRUE(none.Start(worker_argv("anonymous"), {{"CUDA_VISIBLE_DEVICES", ""}, {"EFT_JOIN_TOKEN", ""}},
                         c.dir() + "/anonymous.log"));
  EXPECT_TRUE(WaitUntil([&] { return ReadFile(c.dir() + "/intruder.log").find("refused this worker") != std::string::npos; },
                        std::chrono::seconds(10)))
      << ReadFile(c.dir() + "/intruder.log");
  EXPECT_TRUE(WaitUntil([&] { return ReadFile(c.dir() + "/anonymous.log").find("refused this worker") != std::string::npos; },
                        std::chrono::seconds(10)))
      << ReadFile(c.dir() + "/anonymous.log");
  EXPECT_EQ(c.GetNode("intruder").name(), "");
  EXPECT_EQ(c.GetNode("anonymous").name(), "");
  EXPECT_EQ(c.GetNode("node0").state(), v1::NODE_STATE_READY);

  // eftctl: the token from --token, $EFT_TOKEN or the config file; clear messages when refused.
  auto eftctl = [&](const std::string& env, const std::string& args, std::string* out) {
    std::string cmd = "env -u EFT_TOKEN -u EFT_CONTROLLER EFT_CONFIG=" + files.dir() + "/none.yaml " + env + " " +
                      BuildDir() + "/cli/eftctl --controller " + c.controller_address() + " " + args + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    out->clear();
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
    int status = ::pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  EXPECT_EQ(eftctl("", "node list", &out), 1);
  EXPECT_NE(out.find("not authenticated"), std::string::npos) << out;
  EXPECT_NE(out.find("--token"), std::string::npos) << out;
  EXPECT_EQ(eftctl("", "--token " + kViewerToken + " node list", &out), 0) << out;
  EXPECT_NE(out.find("node0"), std::string::npos) << out;
  EXPECT_EQ(eftctl("", "--token wrong-wrong-wrong-wrong node list", &out), 1);
  EXPECT_NE(out.find("not authenticated: invalid token"), std::string::npos) << out;
  EXPECT_EQ(eftctl("EFT_TOKEN=" + kViewerToken, "node drain node0", &out), 1);
  EXPECT_NE(out.find("permission denied: role viewer may not drain or undrain nodes"), std::string::npos) << out;
  std::ofstream(files.dir() + "/config.yaml") << "token: " << kAdminToken << "\n";
  std::string with_config = "EFT_CONFIG=" + files.dir() + "/config.yaml";
  EXPECT_EQ(eftctl(with_config, "node drain node0", &out), 0) << out;
  EXPECT_EQ(eftctl(with_config, "node undrain node0", &out), 0) << out;
  // Submitted through eftctl by bob, cancelled by viewer (refused), by alice (refused), by bob.
  std::string spec = c.dir() + "/job.yaml";
  std::ofstream(spec) << "name: bobs\nresources: {nodes: {min: 2, max: 2}}\ncommand: [/bin/true]\n";
  ASSERT_EQ(eftctl("EFT_TOKEN=" + kBobToken, "job submit -f " + spec + " -o json", &out), 0) << out;
  auto job = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(job.is_object()) << out;
  std::string id = job.value("id", std::string());
  EXPECT_EQ(job.value("owner", std::string()), "bob");
  EXPECT_EQ(eftctl("EFT_TOKEN=" + kViewerToken, "job cancel " + id, &out), 1);
  EXPECT_NE(out.find("permission denied: role viewer may not cancel jobs"), std::string::npos) << out;
  EXPECT_EQ(eftctl("EFT_TOKEN=" + kAliceToken, "job cancel " + id, &out), 1);
  EXPECT_NE(out.find("permission denied: user alice (role submitter) may cancel only their own jobs"), std::string::npos)
      << out;
  EXPECT_EQ(eftctl("EFT_TOKEN=" + kBobToken, "job cancel " + id, &out), 0) << out;

  // Without auth the controller refuses a non-loopback address, and says how to fix it.
  ChildProcess open;
  ASSERT_TRUE(open.Start({BuildDir() + "/controller/eft-controller", "--listen", "0.0.0.0:" + std::to_string(PickFreePort()),
                          "--db", c.dir() + "/open.db"},
                         {}, c.dir() + "/open.log"));
  int status = open.Wait(std::chrono::seconds(10));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
  EXPECT_NE(ReadFile(c.dir() + "/open.log").find("--insecure-listen-anywhere"), std::string::npos)
      << ReadFile(c.dir() + "/open.log");
  // With one half of the auth configuration it refuses to start too.
  ChildProcess half;
  ASSERT_TRUE(half.Start({BuildDir() + "/controller/eft-controller", "--listen", "127.0.0.1:" + std::to_string(PickFreePort()),
                          "--db", c.dir() + "/half.db", "--auth-tokens", files.tokens()},
                         {}, c.dir() + "/half.log"));
  status = half.Wait(std::chrono::seconds(10));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
}

// One HTTPS request with Beast, trusting `ca`; the status, or -1 when TLS or HTTP failed.
int HttpsCall(int port, const std::string& ca, const std::string& method, const std::string& target,
              const std::string& token, std::string* body = nullptr) {
  namespace net = boost::asio;
  namespace ssl = boost::asio::ssl;
  namespace http = boost::beast::http;
  try {
    net::io_context io;
    ssl::context ctx(ssl::context::tls_client);
    ctx.load_verify_file(ca);
    ctx.set_verify_mode(ssl::verify_peer);
    boost::beast::ssl_stream<boost::beast::tcp_stream> stream(io, ctx);
    net::ip::tcp::endpoint ep(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port));
    boost::beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(10));
    boost::beast::get_lowest_layer(stream).connect(ep);
    stream.handshake(ssl::stream_base::client);
    http::request<http::string_body> req{method == "POST" ? http::verb::post : http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
    req.prepare_payload();
    http::write(stream, req);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    if (body) *body = res.body();
    boost::system::error_code ignored;
    stream.shutdown(ignored);
    return static_cast<int>(res.result_int());
  } catch (const std::exception& e) {
    if (body) *body = e.what();
    return -1;
  }
}

TEST(Auth, TlsForGrpcAndHttps) {
  if (std::system("openssl version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: the openssl program is missing (Debian package openssl); it makes the certificate";
  }
  AuthFiles files;
  ASSERT_TRUE(files.MakeCertificate()) << ReadFile(files.dir() + "/openssl.log");
  ClusterOptions o = AuthCluster(files, 1);
  o.controller_args.insert(o.controller_args.end(), {"--tls-cert", files.cert(), "--tls-key", files.key()});
  o.worker_args = {"--tls-ca", files.cert(), "--join-token-file", files.join()};  // the file, not the env
  o.worker_env.clear();
  o.client_tls_ca = files.cert();
  TestCluster c(o);
  c.StartAll();  // the worker joined over TLS with the join token; the cluster's probes used TLS too
  EXPECT_EQ(c.GetNode("node0").state(), v1::NODE_STATE_READY);

  // HTTPS: the API, with the same rules.
  std::string body;
  EXPECT_EQ(HttpsCall(c.http_port(), files.cert(), "GET", "/healthz", ""), 200);
  EXPECT_EQ(HttpsCall(c.http_port(), files.cert(), "GET", "/v1/nodes", ""), 401);
  EXPECT_EQ(HttpsCall(c.http_port(), files.cert(), "GET", "/v1/nodes", kViewerToken, &body), 200) << body;
  EXPECT_NE(body.find("node0"), std::string::npos) << body;
  EXPECT_EQ(HttpsCall(c.http_port(), files.cert(), "POST", "/v1/nodes/node0:drain", kViewerToken), 403);
  // Plain HTTP to the HTTPS port gets no HTTP answer.
  auto plain = HttpCall(c.http_port(), "GET", "/healthz", "", "", std::chrono::seconds(3));
  EXPECT_FALSE(plain && plain->status == 200);

  // gRPC without TLS is refused; eftctl with --tls-ca works, without it fails.
  {
    auto insecure = v1::NodeService::NewStub(grpc::CreateChannel(c.controller_address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + kAdminToken);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::ListNodesResponse resp;
    grpc::Status s = insecure->ListNodes(&ctx, v1::ListNodesRequest(), &resp);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  auto eftctl = [&](const std::string& args, std::string* out) {
    std::string cmd = "env -u EFT_TOKEN -u EFT_TLS_CA EFT_CONFIG=" + files.dir() + "/none.yaml " + BuildDir() +
                      "/cli/eftctl --timeout 3 --controller " + c.controller_address() + " --token " + kAdminToken +
                      " " + args + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    out->clear();
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
    int status = ::pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  EXPECT_EQ(eftctl("--tls-ca " + files.cert() + " node list", &out), 0) << out;
  EXPECT_NE(out.find("node0"), std::string::npos) << out;
  EXPECT_EQ(eftctl("node list", &out), 1) << out;
}

}  // namespace
}  // namespace eft::testing
