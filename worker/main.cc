// eft-worker: one per node. Registers with eft-controller, heartbeats, and runs the ranks the
// controller wants on this node; with --metrics it serves Prometheus /metrics (ranks, heartbeats,
// and per-GPU utilisation and memory joined to jobs when nvidia-smi is there).
// This file only takes the settings (flags and --config worker.yaml); worker/daemon.cc runs.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "common/daemon_settings.h"
#include "common/logging.h"
#include "worker/daemon.h"
#include "worker/worker_config.h"

int main(int argc, char** argv) {
  using namespace eft;
  using namespace eft::worker;
  SetLogProgram("eft-worker");

  CLI::App app{"eft-worker: runs the controller's ranks on this node"};
  WorkerSettings settings;
  DaemonSettings daemon_settings(&app, "worker.yaml: any of these options as key: value (flags given here win)");
  AddWorkerSettings(&daemon_settings, &settings);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (Status s = daemon_settings.Apply(); !s.ok()) {
    std::fprintf(stderr, "eft-worker: %s\n", s.message().c_str());
    return 2;
  }
  if (LogLevel level; ParseLogLevel(settings.log_level, &level)) SetLogLevel(level);
  Result<WorkerConfig> config = ResolveWorkerConfig(settings);
  if (!config.ok()) {
    std::fprintf(stderr, "eft-worker: %s\n", config.status().message().c_str());
    return 2;
  }
  return RunWorker(*config);
}
