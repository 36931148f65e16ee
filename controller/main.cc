// eft-controller: one per cluster. Keeps jobs, nodes, attempts and checkpoints in SQLite and
// serves JobService, NodeService (clients) and AgentService (workers) over gRPC, and the same
// client API as REST/JSON with --http (controller/http/), with Prometheus /metrics there.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "common/http/http_metrics.h"
#include "common/http/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "controller/auth.h"
#include "controller/controller.h"
#include "controller/controller_metrics.h"
#include "controller/grpc_metrics.h"
#include "controller/grpc_services.h"
#include "controller/http/rest_api.h"

int main(int argc, char** argv) {
  using namespace eft;
  using namespace eft::controller;
  namespace rest = eft::controller::http;  // the REST handlers
  namespace web = eft::http;               // the generic server under them
  SetLogProgram("eft-controller");

  CLI::App app{"eft-controller: the elastic-ft control plane (jobs, nodes, restarts)"};
  std::string listen, db, config_path, log_level;
  double heartbeat_timeout_s = 0, heartbeat_interval_s = 0;
  app.add_option("--listen", listen,
                 "gRPC address HOST:PORT (default 0.0.0.0:7070 with authentication, else 127.0.0.1:7070)");
  app.add_option("--db", db, "SQLite database file (created if missing)");
  app.add_option("--config", config_path, "controller.yaml with further settings")->check(CLI::ExistingFile);
  app.add_option("--heartbeat-interval", heartbeat_interval_s, "seconds between worker heartbeats (default 1)");
  app.add_option("--heartbeat-timeout", heartbeat_timeout_s, "seconds without heartbeat before a node is LOST (default 3)");
  app.add_option("--log-level", log_level, "debug|info|warning|error")
      ->check(CLI::IsMember({"debug", "info", "warning", "warn", "error"}));
  std::string http_address;
  int http_threads = 0;
  double http_read_timeout_s = 0;
  app.add_option("--http", http_address, "serve the REST API on HOST:PORT (default: off)");
  app.add_option("--http-threads", http_threads, "threads serving HTTP (default 2)")->check(CLI::Range(1, 64));
  app.add_option("--http-read-timeout", http_read_timeout_s,
                 "seconds a client has to send a complete request; also the keep-alive idle time (default 15)")
      ->check(CLI::PositiveNumber);
  std::string auth_tokens, join_token_file, tls_cert, tls_key, tls_client_ca;
  bool insecure_listen_anywhere = false, metrics_without_auth = false;
  app.add_option("--auth-tokens", auth_tokens, "tokens file: users' bearer tokens and roles (docs/auth.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--join-token-file", join_token_file, "file holding the token workers join with (docs/auth.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-cert", tls_cert, "PEM certificate (chain): gRPC over TLS, and HTTPS for --http")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  app.add_option("--tls-client-ca", tls_client_ca, "PEM CA: also require client certificates signed by it (mTLS)")
      ->check(CLI::ExistingFile);
  app.add_flag("--insecure-listen-anywhere", insecure_listen_anywhere,
               "allow non-loopback addresses without authentication (anyone who reaches the port controls the cluster)");
  app.add_flag("--metrics-without-auth", metrics_without_auth, "serve GET /metrics without a token when auth is on");
  bool ignore_sigterm = false;
  app.add_flag("--ignore-sigterm", ignore_sigterm,
               "keep running on SIGTERM, stop on SIGINT only: for batch systems that signal every process of an "
               "allocation at once (slurm/eft-cluster.sbatch records a cancellation before stopping the controller)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (LogLevel level; ParseLogLevel(log_level, &level)) SetLogLevel(level);

  ControllerConfig config;
  if (!config_path.empty()) {
    Status s = LoadControllerConfig(config_path, &config);
    if (!s.ok()) {
      std::fprintf(stderr, "eft-controller: %s\n", s.ToString().c_str());
      return 2;
    }
  }
  if (!listen.empty()) config.listen = listen;
  if (!db.empty()) config.db_path = db;
  if (heartbeat_interval_s > 0) config.heartbeat_interval = std::chrono::milliseconds(static_cast<long>(heartbeat_interval_s * 1000));
  if (heartbeat_timeout_s > 0) config.heartbeat_timeout = std::chrono::milliseconds(static_cast<long>(heartbeat_timeout_s * 1000));
  if (!auth_tokens.empty()) config.auth_tokens_file = auth_tokens;
  if (!join_token_file.empty()) config.join_token_file = join_token_file;
  if (!tls_cert.empty()) config.tls_cert = tls_cert;
  if (!tls_key.empty()) config.tls_key = tls_key;
  if (!tls_client_ca.empty()) config.tls_client_ca = tls_client_ca;
  if (insecure_listen_anywhere) config.insecure_listen_anywhere = true;
  if (metrics_without_auth) config.metrics_without_auth = true;

  // Authentication and the loopback rule, before anything listens (docs/auth.md).
  if (Status s = CheckListenSecurity(config, http_address); !s.ok()) {
    std::fprintf(stderr, "eft-controller: %s\n", s.message().c_str());
    return 2;
  }
  std::unique_ptr<Authenticator> auth;
  if (config.auth_enabled()) {
    auto loaded = Authenticator::Load(config.auth_tokens_file, config.join_token_file);
    if (!loaded.ok()) {
      std::fprintf(stderr, "eft-controller: %s\n", loaded.status().message().c_str());
      return 2;
    }
    auth = std::move(loaded).value();
    EFT_LOG(INFO) << "authentication on: " << auth->user_count() << " user token(s) from " << config.auth_tokens_file
                  << ", workers join with the token in " << config.join_token_file << " (SIGHUP reloads both)";
  } else if (config.insecure_listen_anywhere) {
    EFT_LOG(WARNING) << "running WITHOUT AUTHENTICATION and --insecure-listen-anywhere: anyone who can reach the "
                        "controller's ports can run commands on every worker";
  } else {
    EFT_LOG(WARNING) << "running without authentication: listening on loopback only (configure --auth-tokens and "
                        "--join-token-file to listen elsewhere; docs/auth.md)";
  }
  auto read_file = [](const std::string& path, std::string* out) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return static_cast<bool>(in);
  };
  std::shared_ptr<grpc::ServerCredentials> grpc_credentials = grpc::InsecureServerCredentials();
  if (config.tls_enabled()) {
    grpc::SslServerCredentialsOptions ssl(config.tls_client_ca.empty()
                                              ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (!read_file(config.tls_cert, &pair.cert_chain) || !read_file(config.tls_key, &pair.private_key) ||
        (!config.tls_client_ca.empty() && !read_file(config.tls_client_ca, &ssl.pem_root_certs))) {
      std::fprintf(stderr, "eft-controller: cannot read the TLS certificate, key or client CA\n");
      return 2;
    }
    ssl.pem_key_cert_pairs.push_back(pair);
    grpc_credentials = grpc::SslServerCredentials(ssl);
    EFT_LOG(INFO) << "TLS on: certificate " << config.tls_cert
                  << (config.tls_client_ca.empty() ? "" : ", client certificates required (CA " + config.tls_client_ca + ")");
  }

  // Block the shutdown signals before any thread starts, so only the sigwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  if (ignore_sigterm) {
    std::signal(SIGTERM, SIG_IGN);
  } else {
    sigaddset(&signals, SIGTERM);
  }
  sigaddset(&signals, SIGINT);
  if (auth) sigaddset(&signals, SIGHUP);  // reloads the tokens (without auth SIGHUP keeps its default)
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Every module registers its families here; /metrics serves them all. Until the state has loaded
  // only the HTTP server's own families exist.
  MetricsRegistry metrics;
  std::atomic<ControllerMetrics*> controller_metrics{nullptr};
  auto http_metrics = web::HttpRequestMetrics::Create(&metrics);
  auto grpc_metrics = GrpcRequestMetrics::Create(&metrics);
  for (const Status& s : {http_metrics.status(), grpc_metrics.status()}) {
    if (!s.ok()) {
      EFT_LOG(ERROR) << "metrics: " << s;
      return 1;
    }
  }

  // REST listens before the state loads, so /healthz answers and /readyz says "loading" meanwhile.
  rest::RestApiOptions rest_options;
  rest_options.metrics_text = [&] {
    ControllerMetrics* m = controller_metrics.load();
    return m ? m->Scrape() : metrics.Serialize();
  };
  rest_options.auth = auth.get();
  rest_options.metrics_open = config.metrics_without_auth;
  rest::RestApi rest_api(rest_options);
  std::unique_ptr<web::HttpServer> http_server;
  if (!http_address.empty()) {
    web::HttpServerConfig http_config;
    http_config.address = http_address;
    http_config.server_name = "eft-controller";
    http_config.on_request = (*http_metrics)->Hook();
    http_config.tls_cert_file = config.tls_cert;
    http_config.tls_key_file = config.tls_key;
    http_config.tls_client_ca_file = config.tls_client_ca;
    if (http_threads > 0) http_config.threads = http_threads;
    if (http_read_timeout_s > 0) {
      http_config.read_timeout = std::chrono::milliseconds(static_cast<long>(http_read_timeout_s * 1000));
    }
    http_server = std::make_unique<web::HttpServer>(http_config,
                                                    [&rest_api](const web::HttpRequest& r) { return rest_api.Handle(r); });
    Status s = http_server->Start();
    if (!s.ok()) {
      EFT_LOG(ERROR) << "--http: " << s.message();
      return 1;
    }
    EFT_LOG(INFO) << (config.tls_enabled() ? "REST API (HTTPS) on " : "REST API on ") << http_address << " (port " << http_server->port() << ")";
  }

  auto controller = Controller::Create(config, RealClock::Get());
  if (!controller.ok()) {
    EFT_LOG(ERROR) << "cannot start: " << controller.status();
    return 1;
  }
  Controller* c = controller->get();
  auto state_metrics = ControllerMetrics::Create(&metrics, c);
  if (!state_metrics.ok()) {
    EFT_LOG(ERROR) << "metrics: " << state_metrics.status();
    return 1;
  }
  controller_metrics.store(state_metrics->get());
  // Ready as soon as the state is loaded, so that gRPC answering implies REST is ready as well.
  rest_api.SetController(c);
  JobServiceImpl jobs(c, auth.get());
  NodeServiceImpl nodes(c, auth.get());
  AgentServiceImpl agents(c, auth.get());
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(c->config().listen, grpc_credentials, &bound_port);
  builder.RegisterService(&jobs);
  builder.RegisterService(&nodes);
  builder.RegisterService(&agents);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back((*grpc_metrics)->InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    EFT_LOG(ERROR) << "cannot listen on " << c->config().listen;
    if (http_server) http_server->Stop();  // before the controller it calls into goes away
    return 1;
  }
  c->StartTicker();
  EFT_LOG(INFO) << "listening on " << c->config().listen << " (port " << bound_port << "), database "
                << c->config().db_path << ", heartbeat timeout " << c->config().heartbeat_timeout.count() << " ms";

  int sig = 0;
  while (true) {
    sigwait(&signals, &sig);
    if (sig != SIGHUP) break;
    Status s = auth->Reload();
    if (s.ok()) {
      EFT_LOG(INFO) << "SIGHUP: reloaded " << auth->user_count() << " user token(s) and the join token";
    } else {
      EFT_LOG(ERROR) << "SIGHUP: keeping the previous tokens: " << s;
    }
  }
  EFT_LOG(INFO) << "signal " << sig << ": shutting down (running jobs keep running on their workers)";
  rest_api.SetShuttingDown();
  // The HTTP threads call into the controller, so they stop before it is destroyed.
  if (http_server) http_server->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
