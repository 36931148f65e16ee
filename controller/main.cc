// eft-controller: one per cluster. Keeps jobs, nodes, attempts and checkpoints in SQLite and
// serves JobService, NodeService (clients) and AgentService (workers) over gRPC.
#include <csignal>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "common/logging.h"
#include "controller/controller.h"
#include "controller/grpc_services.h"

int main(int argc, char** argv) {
  using namespace eft;
  using namespace eft::controller;
  SetLogProgram("eft-controller");

  CLI::App app{"eft-controller: the elastic-ft control plane (jobs, nodes, restarts)"};
  std::string listen, db, config_path, log_level;
  double heartbeat_timeout_s = 0, heartbeat_interval_s = 0;
  app.add_option("--listen", listen, "gRPC address HOST:PORT (default 0.0.0.0:7070)");
  app.add_option("--db", db, "SQLite database file (created if missing)");
  app.add_option("--config", config_path, "controller.yaml with further settings")->check(CLI::ExistingFile);
  app.add_option("--heartbeat-interval", heartbeat_interval_s, "seconds between worker heartbeats (default 1)");
  app.add_option("--heartbeat-timeout", heartbeat_timeout_s, "seconds without heartbeat before a node is LOST (default 3)");
  app.add_option("--log-level", log_level, "debug|info|warning|error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!log_level.empty()) {
    LogLevel level;
    if (!ParseLogLevel(log_level, &level)) {
      std::fprintf(stderr, "--log-level: expected debug, info, warning or error, got '%s'\n", log_level.c_str());
      return 2;
    }
    SetLogLevel(level);
  }

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

  auto controller = Controller::Create(config, RealClock::Get());
  if (!controller.ok()) {
    EFT_LOG(ERROR) << "cannot start: " << controller.status();
    return 1;
  }
  Controller* c = controller->get();
  JobServiceImpl jobs(c);
  NodeServiceImpl nodes(c);
  AgentServiceImpl agents(c);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(c->config().listen, grpc::InsecureServerCredentials(), &bound_port);
  builder.RegisterService(&jobs);
  builder.RegisterService(&nodes);
  builder.RegisterService(&agents);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    EFT_LOG(ERROR) << "cannot listen on " << c->config().listen;
    return 1;
  }
  c->StartTicker();
  EFT_LOG(INFO) << "listening on " << c->config().listen << " (port " << bound_port << "), database "
                << c->config().db_path << ", heartbeat timeout " << c->config().heartbeat_timeout.count() << " ms";

  int sig = 0;
  sigwait(&signals, &sig);
  EFT_LOG(INFO) << "signal " << sig << ": shutting down (running jobs keep running on their workers)";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
