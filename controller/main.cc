// eft-controller: one per cluster. Keeps jobs, nodes, attempts and checkpoints in SQLite and
// serves JobService, NodeService (clients) and AgentService (workers) over gRPC, and the same
// client API as REST/JSON with --http (controller/http/), with Prometheus /metrics there.
// This file only takes the settings (flags and --config controller.yaml); controller/server.cc serves.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "common/daemon_settings.h"
#include "common/logging.h"
#include "controller/server.h"

int main(int argc, char** argv) {
  using namespace eft;
  using namespace eft::controller;
  SetLogProgram("eft-controller");

  CLI::App app{"eft-controller: the elastic-ft control plane (jobs, nodes, restarts)"};
  ControllerServerConfig config;
  DaemonSettings settings(&app, "controller.yaml with further settings");
  AddControllerServerSettings(&settings, &config);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (Status s = settings.Apply(); !s.ok()) {
    std::fprintf(stderr, "eft-controller: %s\n", s.ToString().c_str());
    return 2;
  }
  return RunController(config);
}
