// eft-worker as a program: RunWorker starts the WorkerAgent and, with --metrics, the /metrics
// server and the GPU monitor, serves until SIGTERM or SIGINT, and stops the ranks on the way out.
// worker/main.cc only takes the settings (AddWorkerSettings, ResolveWorkerConfig) and calls it.
#pragma once

#include "worker/worker_config.h"

namespace eft::worker {

// Returns the process exit code: 0 after a shutdown signal, 1 when the agent or the metrics
// server cannot start. Blocks SIGTERM and SIGINT in the calling thread before any thread starts.
int RunWorker(const WorkerConfig& config);

}  // namespace eft::worker
