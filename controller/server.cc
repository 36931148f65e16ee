#include "controller/server.h"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "common/daemon_settings.h"
#include "common/grpc/credentials.h"
#include "common/http/http_metrics.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "controller/auth.h"
#include "controller/controller.h"
#include "controller/controller_metrics.h"
#include "controller/grpc_metrics.h"
#include "controller/grpc_services.h"
#include "controller/http/rest_api.h"
#include "controller/tracking/mlflow_tracker.h"

namespace eft::controller {
namespace {

namespace rest = eft::controller::http;  // the REST handlers
namespace web = eft::http;               // the generic server under them

// A refused configuration: the message on stderr, exit code 2.
int Refuse(const std::string& message) {
  std::fprintf(stderr, "eft-controller: %s\n", message.c_str());
  return 2;
}

// The tokens of docs/auth.md, or nullptr without authentication; says which mode it runs in.
Result<std::unique_ptr<Authenticator>> LoadAuthentication(const ControllerConfig& config) {
  if (!config.auth_enabled()) {
    if (config.insecure_listen_anywhere) {
      EFT_LOG(WARNING) << "running WITHOUT AUTHENTICATION and --insecure-listen-anywhere: anyone who can reach the "
                          "controller's ports can run commands on every worker";
    } else {
      EFT_LOG(WARNING) << "running without authentication: listening on loopback only (configure --auth-tokens and "
                          "--join-token-file to listen elsewhere; docs/auth.md)";
    }
    return std::unique_ptr<Authenticator>();
  }
  EFT_ASSIGN_OR_RETURN(std::unique_ptr<Authenticator> auth,
                       Authenticator::Load(config.auth_tokens_file, config.join_token_file));
  EFT_LOG(INFO) << "authentication on: " << auth->user_count() << " user token(s) from " << config.auth_tokens_file
                << ", workers join with the token in " << config.join_token_file << " (SIGHUP reloads both)";
  return auth;
}

// Blocks the shutdown signals (and SIGHUP, which reloads the tokens, when there are tokens) before
// any thread starts, so only WaitForShutdown receives them.
sigset_t BlockSignals(bool ignore_sigterm, bool reload_on_sighup) {
  sigset_t signals;
  sigemptyset(&signals);
  if (ignore_sigterm) {
    std::signal(SIGTERM, SIG_IGN);
  } else {
    sigaddset(&signals, SIGTERM);
  }
  sigaddset(&signals, SIGINT);
  if (reload_on_sighup) sigaddset(&signals, SIGHUP);  // without auth SIGHUP keeps its default
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Returns the shutdown signal; SIGHUP reloads the tokens meanwhile.
int WaitForShutdown(const sigset_t& signals, Authenticator* auth) {
  int sig = 0;
  while (true) {
    sigwait(&signals, &sig);
    if (sig != SIGHUP) return sig;
    Status s = auth->Reload();
    if (s.ok()) {
      EFT_LOG(INFO) << "SIGHUP: reloaded " << auth->user_count() << " user token(s) and the join token";
    } else {
      EFT_LOG(ERROR) << "SIGHUP: keeping the previous tokens: " << s;
    }
  }
}

}  // namespace

void AddControllerServerSettings(DaemonSettings* s, ControllerServerConfig* c) {
  AddControllerSettings(s, &c->controller);
  s->AddChoice({"", "--log-level", "debug|info|warning|error"}, {"debug", "info", "warning", "warn", "error"},
               &c->log_level);
  s->AddString({"", "--http", "serve the REST API on HOST:PORT (default: off)"}, &c->http_address);
  if (CLI::Option* threads = s->AddInt({"", "--http-threads", "threads serving HTTP (default 2)"}, &c->http.threads)) {
    threads->check(CLI::Range(1, 64));
  }
  s->AddSeconds({"", "--http-read-timeout",
                 "seconds a client has to send a complete request; also the keep-alive idle time (default 15)"},
                &c->http.read_timeout);
  s->AddBool({"", "--ignore-sigterm",
              "keep running on SIGTERM, stop on SIGINT only: for batch systems that signal every process of an "
              "allocation at once (slurm/eft-cluster.sbatch records a cancellation before stopping the controller)"},
             &c->ignore_sigterm);
}

int RunController(const ControllerServerConfig& server_config) {
  if (LogLevel level; ParseLogLevel(server_config.log_level, &level)) SetLogLevel(level);
  const ControllerConfig& config = server_config.controller;

  // Authentication and the loopback rule, before anything listens (docs/auth.md).
  if (Status s = CheckListenSecurity(config, server_config.http_address); !s.ok()) return Refuse(s.message());
  auto loaded_auth = LoadAuthentication(config);
  if (!loaded_auth.ok()) return Refuse(loaded_auth.status().message());
  std::unique_ptr<Authenticator> auth = std::move(loaded_auth).value();
  auto grpc_credentials = LoadServerCredentials(config.tls_cert, config.tls_key, config.tls_client_ca);
  if (!grpc_credentials.ok()) {
    return Refuse("cannot read the TLS certificate, key or client CA (" + grpc_credentials.status().message() + ")");
  }
  if (config.tls_enabled()) {
    EFT_LOG(INFO) << "TLS on: certificate " << config.tls_cert
                  << (config.tls_client_ca.empty() ? "" : ", client certificates required (CA " + config.tls_client_ca + ")");
  }

  // The controller's MLflow server, checked before anything starts (a job's own is checked by its run).
  if (!config.mlflow_tracking_uri.empty()) {
    auto client = mlflow::MlflowClient::Create(config.mlflow_tracking_uri,
                                               mlflow::ClientOptionsFromEnvironment(config.mlflow_timeout));
    if (!client.ok()) return Refuse("--mlflow-tracking-uri: " + client.status().message());
  }

  const sigset_t signals = BlockSignals(server_config.ignore_sigterm, auth != nullptr);

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
  if (!server_config.http_address.empty()) {
    web::HttpServerConfig http_config = server_config.http;
    http_config.address = server_config.http_address;
    http_config.server_name = "eft-controller";
    http_config.on_request = (*http_metrics)->Hook();
    http_config.tls_cert_file = config.tls_cert;
    http_config.tls_key_file = config.tls_key;
    http_config.tls_client_ca_file = config.tls_client_ca;
    http_server = std::make_unique<web::HttpServer>(http_config,
                                                    [&rest_api](const web::HttpRequest& r) { return rest_api.Handle(r); });
    Status s = http_server->Start();
    if (!s.ok()) {
      EFT_LOG(ERROR) << "--http: " << s.message();
      return 1;
    }
    EFT_LOG(INFO) << (config.tls_enabled() ? "REST API (HTTPS) on " : "REST API on ") << server_config.http_address
                  << " (port " << http_server->port() << ")";
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
  // MLflow runs (docs/tracking.md): the tracker hears of every tracked job before workers can report
  // anything, and talks to the servers on its own thread.
  mlflow::MlflowTracker tracker(
      mlflow::MlflowTrackerOptions::FromConfig(c->config()), RealClock::Get(),
      {/*save_run=*/[c](const MlflowRunRecord& run) { return c->SaveMlflowRun(run); },
       /*add_event=*/[c](const std::string& job, const std::string& type,
                         const std::string& message) { return c->AddJobEvent(job, type, message); },
       /*stored_curves=*/[c](const std::string& job) { return c->StoredLossCurves(job); }});
  if (Status s = tracker.RegisterMetrics(&metrics); !s.ok()) {
    EFT_LOG(ERROR) << "metrics: " << s;
    return 1;
  }
  struct StopTracking {  // before the tracker goes, on every way out
    Controller* c;
    mlflow::MlflowTracker* tracker;
    ~StopTracking() {
      (void)c->SetTrackingObserver(nullptr);
      tracker->Stop();
    }
  } stop_tracking{c, &tracker};
  if (Status s = c->SetTrackingObserver(&tracker); !s.ok()) {
    EFT_LOG(ERROR) << "cannot start: " << s;
    return 1;
  }
  tracker.Start();
  if (!config.mlflow_tracking_uri.empty()) {
    EFT_LOG(INFO) << "MLflow: jobs are logged to " << config.mlflow_tracking_uri << ", experiment "
                  << config.mlflow_experiment << ", unless their spec.tracking says otherwise";
  }
  // Ready as soon as the state is loaded, so that gRPC answering implies REST is ready as well.
  rest_api.SetController(c);
  JobServiceImpl jobs(c, auth.get());
  NodeServiceImpl nodes(c, auth.get());
  AgentServiceImpl agents(c, auth.get());
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(c->config().listen, *grpc_credentials, &bound_port);
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
  if (std::string warning = MasterPortRangeWarning(c->config(), EphemeralPorts()); !warning.empty()) {
    EFT_LOG(WARNING) << warning;
  }
  EFT_LOG(INFO) << "listening on " << c->config().listen << " (port " << bound_port << "), database "
                << c->config().db_path << ", heartbeat timeout " << c->config().heartbeat_timeout.count() << " ms";

  int sig = WaitForShutdown(signals, auth.get());
  EFT_LOG(INFO) << "signal " << sig << ": shutting down (running jobs keep running on their workers)";
  rest_api.SetShuttingDown();
  // The HTTP threads call into the controller, so they stop before it is destroyed.
  if (http_server) http_server->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace eft::controller
