// eft-controller: one per cluster. Keeps jobs, nodes, attempts and checkpoints in SQLite and
// serves JobService, NodeService (clients) and AgentService (workers) over gRPC, and the same
// client API as REST/JSON with --http (controller/http/), with Prometheus /metrics there.
#include <atomic>
#include <csignal>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "common/http/http_metrics.h"
#include "common/http/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
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
  app.add_option("--listen", listen, "gRPC address HOST:PORT (default 0.0.0.0:7070)");
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

  // Block the shutdown signals before any thread starts, so only the sigwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
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
  rest::RestApi rest_api(rest_options);
  std::unique_ptr<web::HttpServer> http_server;
  if (!http_address.empty()) {
    web::HttpServerConfig http_config;
    http_config.address = http_address;
    http_config.server_name = "eft-controller";
    http_config.on_request = (*http_metrics)->Hook();
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
    EFT_LOG(INFO) << "REST API on " << http_address << " (port " << http_server->port() << ")";
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
  JobServiceImpl jobs(c);
  NodeServiceImpl nodes(c);
  AgentServiceImpl agents(c);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(c->config().listen, grpc::InsecureServerCredentials(), &bound_port);
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
  sigwait(&signals, &sig);
  EFT_LOG(INFO) << "signal " << sig << ": shutting down (running jobs keep running on their workers)";
  rest_api.SetShuttingDown();
  // The HTTP threads call into the controller, so they stop before it is destroyed.
  if (http_server) http_server->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
