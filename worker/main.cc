// eft-worker: one per node. Registers with eft-controller, heartbeats, and runs the ranks the
// controller wants on this node.
#include <csignal>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "common/logging.h"
#include "worker/agent.h"

int main(int argc, char** argv) {
  using namespace eft;
  using namespace eft::worker;
  SetLogProgram("eft-worker");

  WorkerConfig config;
  std::string log_level;
  CLI::App app{"eft-worker: runs the controller's ranks on this node"};
  app.add_option("--controller", config.controller, "controller gRPC address HOST:PORT")->required();
  app.add_option("--name", config.name, "node name (default: host name)");
  app.add_option("--slots", config.slots, "rank slots (default: one per visible GPU, else 1)");
  app.add_option("--work-dir", config.work_dir, "rank logs and state (default: /tmp/eft-worker-NAME)");
  app.add_option("--address", config.address, "address other nodes reach this one at (MASTER_ADDR; default: host name)");
  app.add_option("--log-level", log_level, "debug|info|warning|error")
      ->check(CLI::IsMember({"debug", "info", "warning", "warn", "error"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (LogLevel level; ParseLogLevel(log_level, &level)) SetLogLevel(level);
  Status s = FinalizeWorkerConfig(&config);
  if (!s.ok()) {
    std::fprintf(stderr, "eft-worker: %s\n", s.message().c_str());
    return 2;
  }
  SetLogProgram("eft-worker " + config.name);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  WorkerAgent agent(config);
  s = agent.Start();
  if (!s.ok()) {
    EFT_LOG(ERROR) << "cannot start: " << s;
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  EFT_LOG(INFO) << "signal " << sig << ": stopping ranks and exiting";
  agent.Shutdown(std::chrono::seconds(35));
  return 0;
}
