// eftctl: the operator CLI. `eftctl [--controller HOST:PORT] [-o table|json|yaml] <noun> <verb>`.
// Exit codes: 0 success, 1 error (the controller said no, or it is unreachable), 2 usage.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "cli/output.h"
#include "common/yaml_json.h"
#include "spec/job_spec.h"
#include "eft/v1/job.grpc.pb.h"
#include "eft/v1/node.grpc.pb.h"

namespace eft::cli {
namespace {

struct Globals {
  std::string controller;
  std::string token;   // bearer token; "" sends none
  bool tls = false;
  std::string tls_ca;  // PEM file; "" with tls: the system's roots
  std::string output = "table";
  OutputFormat format = OutputFormat::kTable;
  double timeout_s = 10;
};

const char* kConfigPath = "~/.config/eft/config.yaml";

// A string setting of ~/.config/eft/config.yaml ($EFT_CONFIG overrides the path); "" when unset.
std::string ConfigValue(const std::string& key) {
  std::string path;
  if (const char* env = std::getenv("EFT_CONFIG"); env && *env) {
    path = env;
  } else if (const char* home = std::getenv("HOME")) {
    path = std::string(home) + "/.config/eft/config.yaml";
  }
  if (path.empty()) return "";
  auto cfg = LoadYamlOrJsonFile(path);
  if (!cfg.ok() || !cfg->is_object() || !cfg->contains(key)) return "";
  const auto& v = (*cfg)[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return "";
}

// The flag, else the environment variable, else the config file's key.
std::string Resolve(const std::string& flag, const char* env_name, const std::string& key) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv(env_name); env && *env) return env;
  return ConfigValue(key);
}

// --controller, else $EFT_CONTROLLER, else `controller:` in ~/.config/eft/config.yaml, else localhost.
std::string ResolveController(const std::string& flag) {
  std::string c = Resolve(flag, "EFT_CONTROLLER", "controller");
  return c.empty() ? "127.0.0.1:7070" : c;
}

int Fail(const std::string& what, const grpc::Status& s) {
  std::string code;
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE: code = "controller unreachable"; break;
    case grpc::StatusCode::DEADLINE_EXCEEDED: code = "timed out"; break;
    case grpc::StatusCode::PERMISSION_DENIED: code = "permission denied"; break;
    case grpc::StatusCode::UNAUTHENTICATED:
      std::fprintf(stderr,
                   "eftctl: %s: not authenticated: %s (give a token with --token, $EFT_TOKEN or `token:` in %s)\n",
                   what.c_str(), s.error_message().c_str(), kConfigPath);
      return 1;
    default: code = "error"; break;
  }
  std::fprintf(stderr, "eftctl: %s: %s: %s\n", what.c_str(), code.c_str(), s.error_message().c_str());
  return 1;
}

class Client {
 public:
  explicit Client(const Globals& g) : g_(g) {
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
    if (g.tls) {
      grpc::SslCredentialsOptions ssl;
      if (!g.tls_ca.empty()) {
        std::ifstream in(g.tls_ca);
        ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
      credentials = grpc::SslCredentials(ssl);
    }
    auto channel = grpc::CreateChannel(g.controller, credentials);
    jobs = v1::JobService::NewStub(channel);
    nodes = v1::NodeService::NewStub(channel);
  }
  // Every call carries the token; unary calls also a deadline.
  void Auth(grpc::ClientContext* ctx) const {
    if (!g_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + g_.token);
  }
  void Prepare(grpc::ClientContext* ctx) const {
    Auth(ctx);
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<long long>(g_.timeout_s * 1000)));
  }
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::NodeService::Stub> nodes;

 private:
  const Globals& g_;
};

void Print(const Globals& g, const google::protobuf::Message& m, const std::string& table) {
  switch (g.format) {
    case OutputFormat::kJson: std::cout << FormatJson(m); break;
    case OutputFormat::kYaml: std::cout << FormatYaml(m); break;
    case OutputFormat::kTable: std::cout << table; break;
  }
  std::cout.flush();
}

// Streams the job's changes, one progress line each, until it ends. Exit 0 only if it succeeded.
int Follow(Client& c, const std::string& id) {
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_id(id);
  c.Auth(&ctx);
  auto reader = c.jobs->WatchJob(&ctx, req);
  v1::Job job;
  std::string last;
  while (reader->Read(&job)) {
    std::string line = ProgressLine(job);
    if (line != last) std::cout << line << std::endl;
    last = line;
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return Fail("watching job " + id, s);
  return job.state() == v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}

int StreamLogs(Client& c, const std::string& id, bool follow, int rank, int attempt) {
  grpc::ClientContext ctx;
  v1::GetLogsRequest req;
  req.set_job_id(id);
  req.set_follow(follow);
  if (rank >= 0) req.set_rank(rank);
  req.set_attempt(attempt);
  c.Auth(&ctx);
  auto reader = c.jobs->GetLogs(&ctx, req);
  v1::LogChunk chunk;
  // With several ranks, prefix every line with its origin, like torchrun's tee does.
  std::map<std::pair<int, int>, std::string> partial;
  while (reader->Read(&chunk)) {
    if (rank >= 0) {
      std::cout << chunk.data();
      std::cout.flush();
      continue;
    }
    std::string& buf = partial[{chunk.attempt(), chunk.rank()}];
    buf += chunk.data();
    size_t pos;
    while ((pos = buf.find('\n')) != std::string::npos) {
      std::cout << "[attempt " << chunk.attempt() << " rank " << chunk.rank() << "] " << buf.substr(0, pos + 1);
      buf.erase(0, pos + 1);
    }
    std::cout.flush();
  }
  for (const auto& [key, rest] : partial) {
    if (!rest.empty()) std::cout << "[attempt " << key.first << " rank " << key.second << "] " << rest << "\n";
  }
  grpc::Status s = reader->Finish();
  return s.ok() ? 0 : Fail("logs of job " + id, s);
}

}  // namespace
}  // namespace eft::cli

int main(int argc, char** argv) {
  using namespace eft;
  using namespace eft::cli;
  Globals g;
  CLI::App app{"eftctl: submit and watch elastic-ft jobs, manage nodes"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the subcommands, as kubectl allows
  app.add_option("--controller", g.controller, "controller HOST:PORT (default: $EFT_CONTROLLER, ~/.config/eft/config.yaml, 127.0.0.1:7070)");
  app.add_option("-o,--output", g.output, "table|json|yaml")->check(CLI::IsMember({"table", "json", "yaml"}));
  app.add_option("--timeout", g.timeout_s, "seconds to wait for the controller (default 10)");
  app.add_option("--token", g.token, "bearer token (default: $EFT_TOKEN, `token:` in ~/.config/eft/config.yaml)");
  app.add_flag("--tls", g.tls, "TLS to the controller, trusting the system's CAs (default: `tls: true` in the config file)");
  app.add_option("--tls-ca", g.tls_ca, "PEM CA for the controller's certificate; implies --tls (default: $EFT_TLS_CA, `tls_ca:`)");

  auto* job = app.add_subcommand("job", "jobs")->require_subcommand(1);
  std::string file, request_id, id, state_filter;
  bool follow = false;
  int rank = -1, attempt = 0;
  auto* submit = job->add_subcommand("submit", "submit a job spec (YAML or JSON)");
  submit->add_option("-f,--file", file, "job spec file ('-' for stdin)")->required();
  submit->add_option("--request-id", request_id, "idempotency key: resubmitting with it returns the same job");
  submit->add_flag("--follow", follow, "stream progress until the job ends; exit 0 only if it succeeded");
  auto* list = job->add_subcommand("list", "list jobs, newest first");
  list->add_option("--state", state_filter, "only jobs in this state (e.g. RUNNING)");
  auto* get = job->add_subcommand("get", "one job");
  get->add_option("ID", id)->required();
  auto* describe = job->add_subcommand("describe", "one job in detail: attempts, checkpoints, events");
  describe->add_option("ID", id)->required();
  auto* logs = job->add_subcommand("logs", "rank logs");
  logs->add_option("ID", id)->required();
  logs->add_flag("-f,--follow", follow, "keep streaming until the job ends");
  logs->add_option("--rank", rank, "only this rank");
  logs->add_option("--attempt", attempt, "only this attempt");
  auto* cancel = job->add_subcommand("cancel", "cancel a job (its ranks get SIGTERM, then SIGKILL)");
  cancel->add_option("ID", id)->required();
  auto* watch = job->add_subcommand("watch", "stream a job's progress until it ends");
  watch->add_option("ID", id)->required();

  auto* node = app.add_subcommand("node", "nodes")->require_subcommand(1);
  std::string name;
  auto* node_list = node->add_subcommand("list", "list nodes");
  auto* drain = node->add_subcommand("drain", "take no new ranks on a node");
  drain->add_option("NAME", name)->required();
  auto* undrain = node->add_subcommand("undrain", "accept new ranks again");
  undrain->add_option("NAME", name)->required();

  auto* checkpoint = app.add_subcommand("checkpoint", "checkpoints")->require_subcommand(1);
  auto* ck_list = checkpoint->add_subcommand("list", "checkpoints of a job");
  ck_list->add_option("JOB", id)->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  g.format = g.output == "json" ? OutputFormat::kJson : g.output == "yaml" ? OutputFormat::kYaml : OutputFormat::kTable;
  g.controller = ResolveController(g.controller);
  g.token = Resolve(g.token, "EFT_TOKEN", "token");
  g.tls_ca = Resolve(g.tls_ca, "EFT_TLS_CA", "tls_ca");
  if (!g.tls_ca.empty()) {
    g.tls = true;
    if (!std::ifstream(g.tls_ca)) {
      std::fprintf(stderr, "eftctl: --tls-ca %s: cannot read it\n", g.tls_ca.c_str());
      return 2;
    }
  }
  if (!g.tls) {
    std::string v = ConfigValue("tls");
    g.tls = v == "true";
  }
  Client c(g);

  if (*submit) {
    std::string text;
    if (file == "-") {
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
      std::ifstream in(file);
      if (!in) {
        std::fprintf(stderr, "eftctl: cannot read %s\n", file.c_str());
        return 2;
      }
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    auto spec = eft::spec::ParseJobSpec(text);
    if (!spec.ok()) {
      std::fprintf(stderr, "eftctl: %s: %s\n", file.c_str(), spec.status().message().c_str());
      return 2;
    }
    v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    req.set_request_id(request_id);
    v1::Job out;
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    grpc::Status s = c.jobs->SubmitJob(&ctx, req, &out);
    if (!s.ok()) return Fail("submitting " + file, s);
    Print(g, out, "job " + out.id() + " submitted (" + out.spec().name() + ")\n");
    return follow ? Follow(c, out.id()) : 0;
  }
  if (*list) {
    v1::ListJobsRequest req;
    if (!state_filter.empty()) {
      v1::JobState st;
      std::string upper = state_filter;
      for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (!v1::JobState_Parse("JOB_STATE_" + upper, &st)) {
        std::fprintf(stderr, "eftctl: --state %s: expected QUEUED, STARTING, RUNNING, RECOVERING, SUCCEEDED, FAILED or CANCELLED\n",
                     state_filter.c_str());
        return 2;
      }
      req.add_states(st);
    }
    v1::ListJobsResponse all;
    do {
      grpc::ClientContext ctx;
      c.Prepare(&ctx);
      v1::ListJobsResponse page;
      grpc::Status s = c.jobs->ListJobs(&ctx, req, &page);
      if (!s.ok()) return Fail("listing jobs", s);
      for (auto& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
      req.set_page_token(page.next_page_token());
    } while (!req.page_token().empty());
    Print(g, all, JobsTable({all.jobs().begin(), all.jobs().end()}));
    return 0;
  }
  if (*get || *describe || *ck_list) {
    v1::GetJobRequest req;
    req.set_id(id);
    v1::Job out;
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    grpc::Status s = c.jobs->GetJob(&ctx, req, &out);
    if (!s.ok()) return Fail("job " + id, s);
    if (*ck_list) {
      v1::Job only;
      *only.mutable_checkpoints() = out.checkpoints();
      Print(g, only, CheckpointsTable(out));
    } else {
      Print(g, out, *get ? JobsTable({out}) : DescribeJob(out));
    }
    return 0;
  }
  if (*cancel) {
    v1::CancelJobRequest req;
    req.set_id(id);
    v1::Job out;
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    grpc::Status s = c.jobs->CancelJob(&ctx, req, &out);
    if (!s.ok()) return Fail("cancelling job " + id, s);
    Print(g, out, "job " + id + " " + ShortState(out.state()) + "\n");
    return 0;
  }
  if (*watch) return Follow(c, id);
  if (*logs) return StreamLogs(c, id, follow, rank, attempt);
  if (*node_list) {
    v1::ListNodesResponse out;
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    grpc::Status s = c.nodes->ListNodes(&ctx, v1::ListNodesRequest(), &out);
    if (!s.ok()) return Fail("listing nodes", s);
    Print(g, out, NodesTable({out.nodes().begin(), out.nodes().end()}));
    return 0;
  }
  if (*drain || *undrain) {
    v1::Node out;
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    grpc::Status s;
    if (*drain) {
      v1::DrainNodeRequest req;
      req.set_name(name);
      s = c.nodes->DrainNode(&ctx, req, &out);
    } else {
      v1::UndrainNodeRequest req;
      req.set_name(name);
      s = c.nodes->UndrainNode(&ctx, req, &out);
    }
    if (!s.ok()) return Fail((*drain ? "draining " : "undraining ") + name, s);
    Print(g, out, "node " + name + (*drain ? " drained\n" : " undrained\n"));
    return 0;
  }
  return 2;
}
