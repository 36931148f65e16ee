#include "cli/client.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <grpcpp/grpcpp.h>

#include "common/grpc/unreachable.h"
#include "common/yaml_json.h"

namespace eft::cli {
namespace {

// The controller address the client was made for, so Fail can name it (one client per process).
std::string g_controller;

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

}  // namespace

Result<ClientTls> ResolveGlobalOptions(GlobalOptions* g) {
  g->format = g->output == "json"   ? OutputFormat::kJson
              : g->output == "yaml" ? OutputFormat::kYaml
                                    : OutputFormat::kTable;
  g->controller = Resolve(g->controller, "EFT_CONTROLLER", "controller");
  if (g->controller.empty()) g->controller = "127.0.0.1:7070";
  g->token = Resolve(g->token, "EFT_TOKEN", "token");
  g->tls_ca = Resolve(g->tls_ca, "EFT_TLS_CA", "tls_ca");
  if (!g->tls_ca.empty()) g->tls = true;
  Result<ClientTls> tls = LoadClientTls(g->tls, g->tls_ca);
  if (!tls.ok()) return Status::InvalidArgument("--tls-ca " + g->tls_ca + ": cannot read it");
  if (!g->tls && ConfigValue("tls") == "true") {
    g->tls = true;
    tls->enabled = true;
  }
  return tls;
}

ControllerClient::ControllerClient(const GlobalOptions& options, const ClientTls& tls) : options_(options) {
  g_controller = options.controller;
  auto channel = grpc::CreateChannel(options.controller, MakeChannelCredentials(tls));
  jobs_ = v1::JobService::NewStub(channel);
  nodes_ = v1::NodeService::NewStub(channel);
}

void ControllerClient::Auth(grpc::ClientContext* ctx) const { AddBearerToken(options_.token, ctx); }

void ControllerClient::Prepare(grpc::ClientContext* ctx) const {
  Auth(ctx);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<long long>(options_.timeout_s * 1000)));
}

void Print(const GlobalOptions& g, const google::protobuf::Message& m, const std::string& table) {
  switch (g.format) {
    case OutputFormat::kJson: std::cout << FormatJson(m); break;
    case OutputFormat::kYaml: std::cout << FormatYaml(m); break;
    case OutputFormat::kTable: std::cout << table; break;
  }
  std::cout.flush();
}

int Fail(const std::string& what, const grpc::Status& s) {
  if (std::string cause = DescribeUnreachable(s, g_controller); !cause.empty()) {
    std::fprintf(stderr,
                 "eftctl: %s: %s.\nGive eftctl the controller's --listen address (--controller HOST:PORT, "
                 "$EFT_CONTROLLER or `controller:` in %s) and check that eft-controller runs there.\n",
                 what.c_str(), cause.c_str(), kConfigPath);
    return 1;
  }
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

}  // namespace eft::cli
