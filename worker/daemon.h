// eft-worker as a program: RunWorker starts the WorkerAgent and, with --metrics, the /metrics
// server and the GPU monitor, serves until SIGTERM or SIGINT, and stops the ranks on the way out.
// worker/main.cc only takes the settings (AddWorkerSettings, ResolveWorkerConfig) and calls it.
#pragma once

#include "worker/worker_config.h"

namespace eft::worker {

// The exit code of a worker the controller fenced: another live eft-worker runs under its --name
// (docs/architecture.md, "Two workers, one name"). Restarting it changes nothing.
constexpr int kExitFenced = 3;

// Returns the process exit code: 0 after a shutdown signal, 1 when the agent or the metrics
// server cannot start (another worker holds the work dir included), kExitFenced. Blocks SIGTERM
// and SIGINT in the calling thread before any thread starts.
int RunWorker(const WorkerConfig& config);

}  // namespace eft::worker
